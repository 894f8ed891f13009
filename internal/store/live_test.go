package store

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/twinmq/twinmq/internal/store/vfs"
)

// The queue entries of live appends, which the appender hands to the index
// pipeline, are those the log itself gives when its records are read back
// and parsed (as after a restart): plain and BatchCQ topics, several queues,
// tags and none, across segment rolls.
func TestLiveEntriesMatchTheLog(t *testing.T) {
	fs := vfs.NewMem(1, vfs.Strict())
	s := openMem(t, fs, nil)
	defer s.Close()
	require.NoError(t, s.SetTopicOptions("B", TopicOptions{BatchCQ: true}))
	ctx := testCtx(t)
	type appended struct {
		topic string
		queue int32
		res   AppendResult
	}
	var all []appended
	for i := range 300 {
		topic := []string{"P", "B"}[i%2]
		q := int32(i % 3)
		var b []Message
		for k := range 1 + i%5 {
			m := msg(topic, q, i*10+k)
			if k%2 == 1 {
				m.Tag = ""
			}
			m.Body = make([]byte, 2048) // enough for the appends to span segments
			b = append(b, m)
		}
		res, err := s.Append(ctx, b)
		require.NoError(t, err)
		all = append(all, appended{topic, q, res})
	}
	require.NoError(t, s.WaitDispatched(ctx))
	require.Positive(t, s.pipe.handed.Load(), "live appends were indexed from their entries")
	require.Greater(t, len(s.segs), 1, "the appends span segments")

	for _, a := range all {
		ts := s.topicState(a.topic, false)
		require.NotNil(t, ts)
		q := ts.queues[a.queue]
		require.NotNil(t, q)
		// What parsing the append's records gives.
		var want []CQEntry
		pos := a.res.LogOffset
		for i := range a.res.Count {
			hdr, err := s.readLog(nil, pos, headerSize)
			require.NoError(t, err)
			size, _, err := peekFrame(hdr)
			require.NoError(t, err)
			b, err := s.readLog(nil, pos, size)
			require.NoError(t, err)
			v, err := parseRecord(b)
			require.NoError(t, err)
			require.Equal(t, a.res.FirstOffset+int64(i), v.queueOffset)
			want = append(want, CQEntry{LogOffset: v.logOffset, Size: int32(v.size), TagHash: tagHashBytes(v.tag),
				StoreTimestamp: v.storeTS, BaseOffset: v.queueOffset, Count: 1})
			pos += int64(size)
		}
		if !q.batch {
			for i := range want {
				want[i].StoreTimestamp = 0 // a 20-byte entry does not keep it
			}
		} else {
			e := want[0]
			for _, w := range want[1:] {
				e.Size += w.Size
				e.Count++
			}
			want = []CQEntry{e}
		}
		for _, w := range want {
			got, ok := q.lookup(w.BaseOffset)
			require.True(t, ok, fmt.Sprintf("%s/%d offset %d", a.topic, a.queue, w.BaseOffset))
			require.Equal(t, w, got, "%s/%d offset %d", a.topic, a.queue, w.BaseOffset)
		}
	}
}

// The queue of live appends: the reader takes an append that starts where
// it is, drops what it read from the log meanwhile, waits for what lies
// past its limit, and a queue the reader fell too far behind is dropped
// whole (the reader then reads the log).
func TestLiveQueue(t *testing.T) {
	var s Store
	m := Message{Topic: "T", QueueID: 2, Tag: "x", Body: []byte("b")}
	rec := appendRecord(nil, &m, 0, 1)
	size := int64(len(rec))
	for i := range int64(10) {
		s.handLive(rec, []Message{m}, i, i*size, 1)
	}
	require.Nil(t, s.takeLive(0, size-1), "past the limit")
	require.Len(t, s.live, 10, "an append past the limit waits")
	j := s.takeLive(0, 100*size)
	require.NotNil(t, j)
	require.Equal(t, int64(0), j.start)
	require.Equal(t, size, j.end)
	require.Equal(t, []dispEntry{{topic: "T", queueID: 2, qoff: 0, logOff: 0, size: int32(size), tagHash: TagHash("x"), storeTS: 1, batchIdx: 0, batchCnt: 1}}, j.entries)
	// The reader read appends 1..4 from the log: they are dropped.
	j = s.takeLive(5*size, 100*size)
	require.NotNil(t, j)
	require.Equal(t, 5*size, j.start)
	require.Len(t, s.live, 4)

	for i := range int64(maxLive + 5) {
		s.handLive(rec, []Message{m}, 10+i, (10+i)*size, 1)
	}
	require.LessOrEqual(t, len(s.live), maxLive)
	require.Nil(t, s.takeLive(6*size, 1<<40), "the appends the reader fell behind on were dropped")
}
