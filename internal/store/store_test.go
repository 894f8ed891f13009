package store

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"

	"github.com/twinmq/twinmq/internal/store/vfs"
)

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func openMem(t *testing.T, fs *vfs.MemFS, mod func(*Options)) *Store {
	t.Helper()
	o := Options{Dir: "/data", FS: fs, SegmentSize: MinSegmentSize, MaxMessageSize: 64 << 10}
	if mod != nil {
		mod(&o)
	}
	s, err := Open(testCtx(t), o)
	require.NoError(t, err)
	return s
}

func msg(topic string, q int32, i int) Message {
	return Message{
		Topic: topic, QueueID: q, Flags: uint32(i), BornTimestamp: int64(1000 + i), BornHost: "10.0.0.1:5000",
		Tag: fmt.Sprintf("tag%d", i%3), ReconsumeTimes: int32(i % 2),
		Properties: map[string]string{"k": fmt.Sprint(i), "UNIQ_KEY": fmt.Sprintf("id-%d", i)},
		Body:       []byte(fmt.Sprintf("body-%s-%d-%d", topic, q, i)),
	}
}

func readAll(t *testing.T, s *Store, topic string, q int32) []StoredMessage {
	t.Helper()
	min, max := s.Offsets(topic, q)
	var out []StoredMessage
	for off := min; off < max; {
		got, err := s.Read(testCtx(t), topic, q, off, 100, 0)
		require.NoError(t, err)
		require.NotEmpty(t, got)
		out = append(out, got...)
		off = got[len(got)-1].QueueOffset + 1
	}
	return out
}

func TestAppendReadRoundTrip(t *testing.T) {
	for _, batch := range []bool{false, true} {
		t.Run(fmt.Sprintf("batchCQ=%v", batch), func(t *testing.T) {
			fs := vfs.NewMem(1, vfs.Strict())
			s := openMem(t, fs, nil)
			require.NoError(t, s.SetTopicOptions("T", TopicOptions{BatchCQ: batch}))
			ctx := testCtx(t)
			var want []Message
			for i := 0; i < 50; i++ {
				n := 1 + i%4
				var b []Message
				for k := 0; k < n; k++ {
					b = append(b, msg("T", 1, len(want)+k))
				}
				res, err := s.Append(ctx, b)
				require.NoError(t, err)
				require.Equal(t, int64(len(want)), res.FirstOffset)
				require.Equal(t, n, res.Count)
				want = append(want, b...)
			}
			require.NoError(t, s.WaitDispatched(ctx))
			min, max := s.Offsets("T", 1)
			require.Equal(t, int64(0), min)
			require.Equal(t, int64(len(want)), max)
			st := s.Stats()
			require.Equal(t, st.LogEnd, st.Dispatched)
			require.Equal(t, 1, st.Queues)
			got := readAll(t, s, "T", 1)
			require.Len(t, got, len(want))
			for i := range got {
				require.Equal(t, int64(i), got[i].QueueOffset)
				if diff := cmp.Diff(want[i], got[i].Message); diff != "" {
					t.Fatalf("message %d differs (-want +got):\n%s", i, diff)
				}
			}
			// A read from the middle of a batch starts at that offset.
			mid, err := s.Read(ctx, "T", 1, 7, 3, 0)
			require.NoError(t, err)
			require.Len(t, mid, 3)
			require.Equal(t, int64(7), mid[0].QueueOffset)
			require.NoError(t, s.Close())

			s = openMem(t, fs, nil)
			defer s.Close()
			got2 := readAll(t, s, "T", 1)
			require.Equal(t, len(want), len(got2))
			res, err := s.Append(ctx, []Message{msg("T", 1, 999)})
			require.NoError(t, err)
			require.Equal(t, int64(len(want)), res.FirstOffset)
		})
	}
}

func TestBadInput(t *testing.T) {
	s := openMem(t, vfs.NewMem(2, vfs.Strict()), nil)
	defer s.Close()
	ctx := testCtx(t)
	_, err := s.Append(ctx, nil)
	require.ErrorIs(t, err, ErrEmptyBatch)
	_, err = s.Append(ctx, []Message{msg("A", 0, 0), msg("A", 1, 1)})
	require.ErrorIs(t, err, ErrMixedBatch)
	_, err = s.Append(ctx, []Message{msg("A", 0, 0), msg("B", 0, 1)})
	require.ErrorIs(t, err, ErrMixedBatch)
	big := msg("A", 0, 0)
	big.Body = make([]byte, 65<<10)
	_, err = s.Append(ctx, []Message{big})
	require.ErrorIs(t, err, ErrMessageTooLarge)
	_, err = s.Append(ctx, []Message{{Topic: "", Body: []byte("x")}})
	require.ErrorIs(t, err, ErrInvalidMessage)
	_, err = s.Append(ctx, []Message{{Topic: "A", QueueID: -1}})
	require.ErrorIs(t, err, ErrInvalidMessage)
	// Nothing of the rejected appends was stored.
	_, err = s.Append(ctx, []Message{msg("A", 0, 0)})
	require.NoError(t, err)
	require.NoError(t, s.WaitDispatched(ctx))
	min, max := s.Offsets("A", 0)
	require.Equal(t, [2]int64{0, 1}, [2]int64{min, max})
	_, err = s.Read(ctx, "A", 0, 5, 10, 0)
	var re *OffsetRangeError
	require.ErrorAs(t, err, &re)
	require.ErrorIs(t, err, ErrOffsetOutOfRange)
	require.Equal(t, int64(1), re.Max)
	got, err := s.Read(ctx, "A", 0, 1, 10, 0)
	require.NoError(t, err)
	require.Empty(t, got)
	require.NoError(t, s.Close())
	_, err = s.Append(ctx, []Message{msg("A", 0, 0)})
	require.ErrorIs(t, err, ErrClosed)
	require.True(t, errors.Is(err, ErrClosed))
}

// TestOnRealDisk runs the same round trip on the OS file system, with sync
// flush, topic options, a segment roll and a reopen.
func TestOnRealDisk(t *testing.T) {
	dir := t.TempDir()
	o := Options{Dir: dir, SegmentSize: MinSegmentSize, Flush: FlushSync, CQFileEntries: 64}
	ctx := testCtx(t)
	s, err := Open(ctx, o)
	require.NoError(t, err)
	require.NoError(t, s.SetTopicOptions("%RETRY%group", TopicOptions{BatchCQ: true}))
	body := make([]byte, 20_000)
	for i := 0; i < 120; i++ {
		m := msg("%RETRY%group", 0, i)
		m.Body = append(append([]byte(nil), body...), m.Body...)
		res, err := s.Append(ctx, []Message{m, msg("%RETRY%group", 0, -i)})
		require.NoError(t, err)
		require.Equal(t, Flushed, res.Durability)
	}
	require.NoError(t, s.WaitDispatched(ctx))
	_, end := s.LogRange()
	require.Greater(t, end, int64(2*MinSegmentSize))
	require.NoError(t, s.Close())

	s, err = Open(ctx, o)
	require.NoError(t, err)
	defer s.Close()
	got := readAll(t, s, "%RETRY%group", 0)
	require.Len(t, got, 240)
	for i, m := range got {
		require.Equal(t, int64(i), m.QueueOffset)
	}
	require.Equal(t, []string{"%RETRY%group"}, s.Topics())
}
