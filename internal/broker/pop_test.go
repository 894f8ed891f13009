package broker

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestQueueStateCommitsOverAckedRuns(t *testing.T) {
	q := newQueueState(10)
	q.next = 15
	for off := int64(10); off < 15; off++ {
		q.track(&inflight{offset: off, deadline: 100 + off, idx: -1})
	}
	q.markDone(12)
	q.markDone(11)
	assert.Equal(t, int64(10), q.committed, "10 is still in flight")
	assert.Len(t, q.acked, 2)
	q.markDone(10)
	assert.Equal(t, int64(13), q.committed)
	assert.Empty(t, q.acked)
	assert.Len(t, q.due, 2)
	q.markDone(14)
	q.markDone(13)
	assert.Equal(t, int64(15), q.committed)
	assert.Empty(t, q.inflight)
	assert.Empty(t, q.due)
	q.markDone(3)  // below committed: nothing happens
	q.markDone(20) // never delivered: nothing happens
	assert.Equal(t, int64(15), q.committed)
	assert.Empty(t, q.acked)
}

func TestQueueStateSkipTo(t *testing.T) {
	q := newQueueState(0)
	q.next = 6
	for _, off := range []int64{0, 1, 4} {
		q.track(&inflight{offset: off, deadline: 1, idx: -1})
	}
	q.acked[2], q.acked[3], q.acked[5] = struct{}{}, struct{}{}, struct{}{}
	// The store dropped offsets below 4.
	q.skipTo(4)
	assert.Equal(t, int64(4), q.committed)
	assert.Len(t, q.inflight, 1)
	q.markDone(4)
	assert.Equal(t, int64(6), q.committed)
	assert.Empty(t, q.acked)
	q.skipTo(9)
	assert.Equal(t, int64(9), q.committed)
	assert.Equal(t, int64(9), q.next)
}

func TestFIFOWakeIsWhenTheQueueUnlocks(t *testing.T) {
	q := newQueueState(0)
	q.next = 2
	q.track(&inflight{offset: 0, deadline: 100, idx: -1})
	q.track(&inflight{offset: 1, deadline: 500, idx: -1})
	locked, until := q.lockedFIFO(200)
	assert.True(t, locked)
	assert.Equal(t, int64(500), until)
	assert.Equal(t, int64(500), q.wakeAt(200, true), "not the expired head: the queue stays locked until 500")
	assert.Equal(t, int64(100), q.wakeAt(200, false))
	locked, _ = q.lockedFIFO(500)
	assert.False(t, locked)
}

func TestRenewRecountsAutoRenewedDeliveries(t *testing.T) {
	b := &Broker{}
	b.cfg.Limits.fill()
	now := time.UnixMilli(1_000_000)
	g := newGroupTopic("g", "t")
	q := newQueueState(0)
	q.next = 3
	g.queues[0] = q
	// Offset 0 is auto-renewed; offset 1 was once, and left the in-flight
	// set through a path that did not lower the count (filtered out on
	// redelivery).
	q.track(&inflight{offset: 0, attempts: 1, deadline: now.UnixMilli() + 5_000, autoRenew: true, renewFrom: now.UnixMilli(), client: "c", idx: -1})
	q.track(&inflight{offset: 1, attempts: 1, deadline: now.UnixMilli() - 1, autoRenew: true, client: "c", idx: -1})
	q.markDone(1)
	g.autoRenew = 2
	b.renew(g, now, func(string) bool { return true })
	assert.Equal(t, 1, g.autoRenew, "only offset 0 is still auto-renewed")
	assert.Equal(t, now.UnixMilli()+b.cfg.Limits.AutoRenewSlice.Milliseconds(), q.inflight[0].deadline, "renewed")
	q.markDone(0)
	b.renew(g, now, func(string) bool { return true })
	assert.Zero(t, g.autoRenew, "nothing left to renew: the scan is skipped from now on")
}
