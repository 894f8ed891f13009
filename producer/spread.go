package producer

import (
	"sync/atomic"
	"time"

	"github.com/twinmq/twinmq/failover"
)

// stickyTarget is a broker a topic's ordinary messages currently go to.
type stickyTarget struct {
	h     *failover.Handle[*brokerTarget]
	until time.Time    // pick again after this
	left  atomic.Int64 // or after this many more bytes
}

// stickyFor bounds how long a topic sticks to one broker, so that the
// shares follow the weights closely at low rates too.
const stickyFor = 20 * time.Millisecond

// Spreading. One sticky target makes the biggest batches, but then every
// batch of the moment goes through one serial chain (encode, one broker's
// decode and append, the reply) and the client's second core idles while a
// batch is in flight. Once the batches of a topic are large, halving them
// costs little (the fixed cost of a request is spread over many messages
// still) and sending to two brokers at once runs two chains side by side:
// with 64 synchronous senders on two cores that is 10-30% more messages per
// second in BenchmarkProduce. Small batches stay on one target, where
// splitting them would only add requests.
const (
	maxSpread = 2
	// A topic widens to maxSpread targets when its batches average at
	// least spreadWiden messages and narrows back below spreadNarrow; the
	// gap keeps it from flapping when halved batches are mid-sized.
	spreadWiden  = 24
	spreadNarrow = 8
	// avgShift sets the weight of a new batch in the running average
	// (1/8), and fixShift the fixed-point scale of the average.
	avgShift = 3
	fixShift = 4
)

// spread is the sticky state of a topic's ordinary messages: up to
// maxSpread slots, each holding a target failover picked. Messages take the
// active slots in turn; each slot re-picks on its own when its time or
// bytes run out, so over time the shares follow weights and health exactly
// as with one slot. Two slots may hold the same broker; their messages then
// share its current queue and so its batches.
type spread struct {
	slots [maxSpread]atomic.Pointer[stickyTarget]
	next  atomic.Uint32
	width atomic.Int32 // active slots - 1 (the zero value is one slot)
	avg   atomic.Int64 // running average of batch sizes, << fixShift
}

// observe feeds the size of a batch sent for the topic into the average
// and adjusts the width. Concurrent updates may lose one another's sample,
// which an average tolerates.
func (s *spread) observe(items int) {
	old := s.avg.Load()
	avg := old + (int64(items)<<fixShift-old)>>avgShift
	s.avg.Store(avg)
	switch w := s.width.Load(); {
	case w == 0 && avg >= spreadWiden<<fixShift:
		s.width.Store(maxSpread - 1)
	case w > 0 && avg < spreadNarrow<<fixShift:
		s.width.Store(0)
	}
}

// slot returns the slot the next message uses.
func (s *spread) slot() *atomic.Pointer[stickyTarget] {
	w := s.width.Load()
	if w == 0 {
		return &s.slots[0]
	}
	return &s.slots[s.next.Add(1)%uint32(w+1)]
}

// reset ends every slot's stickiness (a reload or a route change).
func (s *spread) reset() {
	for i := range s.slots {
		s.slots[i].Store(nil)
	}
}

// unstick ends the stickiness of the slots holding h (after a failed
// request there).
func (s *spread) unstick(h *failover.Handle[*brokerTarget]) {
	for i := range s.slots {
		if t := s.slots[i].Load(); t != nil && t.h == h {
			s.slots[i].CompareAndSwap(t, nil)
		}
	}
}

// pickSticky picks the target of an ordinary message. Messages of a topic
// stick to the broker failover picked until rotateBytes were sent there or
// stickyFor passed, then failover picks again. Over time the shares follow
// the weights and health, as with a pick per message; but the messages of a
// moment share one target (two under heavy load, see spread) and so form
// full batches instead of one small batch per broker, which costs the
// brokers and the client several times less CPU per message (see
// BenchmarkProduce, cpu-us/msg). A retry picks afresh, avoiding what it
// tried; a failed request, a broker going down and a reload end the
// stickiness at once.
func (p *Producer) pickSticky(pd *pending) (*failover.Handle[*brokerTarget], error) {
	ts := pd.topic
	if len(pd.tried) > 0 {
		return ts.picker.PickExcluding(pd.tried)
	}
	slot := ts.spread.slot()
	if s := slot.Load(); s != nil && pd.start.Before(s.until) && s.left.Add(-int64(pd.size)) > 0 && !s.h.IsDown() {
		return s.h, nil
	}
	h, err := ts.picker.Pick()
	if err != nil {
		return nil, err
	}
	s := &stickyTarget{h: h, until: pd.start.Add(stickyFor)}
	s.left.Store(p.settings.Load().rotateBytes)
	slot.Store(s)
	return h, nil
}

// unstick ends the topic's stickiness to h.
func (ts *topicState) unstick(h *failover.Handle[*brokerTarget]) { ts.spread.unstick(h) }
