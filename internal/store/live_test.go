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
	fs := vfs.NewMem(1)
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
