package store

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/twinmq/twinmq/internal/store/vfs"
)

// crashModel remembers, across the generations of one store, every message
// ever attempted (by its unique key) and every one acknowledged under sync
// flush (by topic, queue and offset).
type crashModel struct {
	mu        sync.Mutex
	attempted map[string]Message
	acked     map[queueKey]map[int64]Message
	seq       int
	noise     []byte          // random bytes that message bodies are cut from
	optsAcked map[string]bool // topics whose SetTopicOptions returned nil
}

type queueKey struct {
	topic string
	queue int32
}

var crashTopics = []string{"plain", "batched"}

func (m *crashModel) next(rng *rand.Rand) []Message {
	m.mu.Lock()
	defer m.mu.Unlock()
	topic := crashTopics[rng.IntN(len(crashTopics))]
	q := int32(rng.IntN(3))
	n := 1 + rng.IntN(3)
	batch := make([]Message, n)
	for i := range batch {
		m.seq++
		id := fmt.Sprintf("m%d", m.seq)
		n := rng.IntN(6000)
		at := rng.IntN(len(m.noise) - n + 1)
		body := append([]byte(nil), m.noise[at:at+n]...)
		batch[i] = Message{
			Topic: topic, QueueID: q, Flags: rng.Uint32(), BornTimestamp: int64(m.seq), BornHost: "h",
			Tag: id[:2], Properties: map[string]string{"id": id}, Body: body,
		}
		m.attempted[id] = batch[i]
	}
	return batch
}

func (m *crashModel) ack(res AppendResult, batch []Message) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := queueKey{res.Topic, res.QueueID}
	if m.acked[k] == nil {
		m.acked[k] = map[int64]Message{}
	}
	for i, msg := range batch {
		m.acked[k][res.FirstOffset+int64(i)] = msg
	}
}

// check verifies a reopened store against the model: acknowledged messages
// at their offsets with the same bytes, contiguous offsets, only messages
// that were attempted, nothing corrupt.
func (m *crashModel) check(t *testing.T, s *Store, label string) {
	t.Helper()
	ctx := context.Background()
	for _, topic := range crashTopics {
		for q := int32(0); q < 3; q++ {
			min, max := s.Offsets(topic, q)
			require.Equal(t, int64(0), min, label)
			next := int64(0)
			for next < max {
				got, err := s.Read(ctx, topic, q, next, 50, 1<<20)
				require.NoError(t, err, "%s: read %s/%d@%d", label, topic, q, next)
				require.NotEmpty(t, got, label)
				for _, sm := range got {
					require.Equal(t, next, sm.QueueOffset, "%s: offsets not contiguous", label)
					want, ok := m.attempted[sm.Properties["id"]]
					require.True(t, ok, "%s: unknown message %v", label, sm.Properties)
					if !reflect.DeepEqual(want, sm.Message) {
						diff := cmp.Diff(want, sm.Message)
						t.Fatalf("%s: %s/%d@%d differs:\n%s", label, topic, q, next, diff)
					}
					if a, ok := m.acked[queueKey{topic, q}][next]; ok {
						require.Equal(t, a.Properties["id"], sm.Properties["id"], "%s: acked message replaced", label)
					}
					next++
				}
			}
			for off := range m.acked[queueKey{topic, q}] {
				require.Less(t, off, max, "%s: acked %s/%d@%d lost (max %d)", label, topic, q, off, max)
			}
		}
	}
	for topic := range m.optsAcked {
		require.Equal(t, TopicOptions{BatchCQ: true}, s.topicOpts[topic], "%s: acked options of %s lost", label, topic)
	}
}

func crashOptions(fs vfs.FS, log *zap.Logger) Options {
	return Options{
		Dir: "/d", FS: fs, Logger: log, SegmentSize: MinSegmentSize, MaxMessageSize: 16 << 10,
		Flush: FlushSync, DispatchChunk: 8 << 10, DispatchWorkers: 2,
		CheckpointInterval: 2 * time.Millisecond, CQFileEntries: 8,
	}
}

// TestCrashRecovery crashes a store under concurrent appends (sync flush in
// two generations out of three, async in the rest) and topic-option changes
// at a random file operation: a write torn at a random byte (a log record, a
// consume-queue entry or a checkpoint), or a truncation, rename or removal
// that happens or not. It takes a power-loss image of the disk (a strict
// file system: names not synced into their directory are lost too), reopens
// it and checks it; chains of generations build on the recovered images. Set
// STORE_CRASH_LONG=1 for a run ten times as long.
func TestCrashRecovery(t *testing.T) {
	chains, gens := 120, 10 // 1200 generations, each armed with a crash point
	if os.Getenv("STORE_CRASH_LONG") != "" {
		chains = 1000
	}
	where, ops := map[string]int{}, map[string]int{}
	for c := 0; c < chains; c++ {
		runCrashChain(t, uint64(c), gens, where, ops)
	}
	crashes := 0
	for _, n := range where {
		crashes += n
	}
	t.Logf("%d crash points hit: %v; by operation %v", crashes, where, ops)
	require.GreaterOrEqual(t, crashes, 1000)
	require.Positive(t, where[commitLogDir], "no crash tore a log record")
	require.Positive(t, where[cqDir], "no crash tore a queue entry")
	require.Positive(t, where[checkpointName], "no crash tore a checkpoint")
	require.Positive(t, ops["rename"], "no crash fell on a rename")
	require.Positive(t, ops["remove"], "no crash fell on a removal")
}

func runCrashChain(t *testing.T, seed uint64, gens int, where, ops map[string]int) {
	rng := rand.New(rand.NewPCG(seed, 7))
	model := &crashModel{attempted: map[string]Message{}, acked: map[queueKey]map[int64]Message{}, noise: make([]byte, 1<<16),
		optsAcked: map[string]bool{}}
	for i := range model.noise {
		model.noise[i] = byte(rng.Uint32())
	}
	fs := vfs.NewMem(seed, vfs.Strict())
	// The checkpoint protocol must make the fallback (rebuilding every queue
	// from the whole log) unnecessary: count it.
	core, logs := observer.New(zap.WarnLevel)
	log := zap.New(core)
	defer func() {
		require.Zero(t, logs.FilterMessageSnippet("rebuilding").Len(), "seed %d: a queue had a hole after a crash", seed)
	}()
	for g := 0; g < gens; g++ {
		label := fmt.Sprintf("seed %d gen %d", seed, g)
		opts := crashOptions(fs, log)
		async := rng.IntN(3) == 0 // async generations must stay consistent too
		if async {
			opts.Flush, opts.FlushInterval = FlushAsync, time.Millisecond
		}
		s, err := Open(context.Background(), opts)
		require.NoError(t, err, label)
		if g == 0 {
			require.NoError(t, s.SetTopicOptions("batched", TopicOptions{BatchCQ: true}))
		}
		model.check(t, s, label+" reopen")
		// One generation in four crashes in Close instead (its final
		// flush, checkpoint and the removal of the abort marker).
		atClose := rng.IntN(4) == 0
		if !atClose {
			fs.CrashAtWrite(int64(1 + rng.IntN(60)))
		}
		var wg sync.WaitGroup
		// Thorough checkpoints during the appends put queue-file writes
		// (and so torn queue entries) among the crash points.
		stop := make(chan struct{})
		cpDone := make(chan struct{})
		go func() {
			defer close(cpDone)
			for {
				select {
				case <-stop:
					return
				case <-time.After(time.Millisecond):
				}
				if s.checkpoint(true) != nil {
					return
				}
			}
		}()
		// Topic options are saved by a rename.
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; k < 3; k++ {
				time.Sleep(200 * time.Microsecond) // among the appends
				topic := fmt.Sprintf("opts-%d-%d", g, k)
				if s.SetTopicOptions(topic, TopicOptions{BatchCQ: true}) != nil {
					return
				}
				model.mu.Lock()
				model.optsAcked[topic] = true
				model.mu.Unlock()
			}
		}()
		for w := 0; w < 4; w++ {
			wrng := rand.New(rand.NewPCG(rng.Uint64(), uint64(w)))
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 10; i++ {
					batch := model.next(wrng)
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					res, err := s.Append(ctx, batch)
					cancel()
					if err != nil {
						if errors.Is(err, context.DeadlineExceeded) {
							t.Errorf("%s: append hung", label)
						}
						return
					}
					if async {
						continue // acknowledged only as buffered: a crash may take it
					}
					if res.Durability != Flushed {
						t.Errorf("%s: sync append returned durability %v", label, res.Durability)
					}
					model.ack(res, batch)
				}
			}()
		}
		wg.Wait()
		close(stop)
		<-cpDone
		if atClose {
			fs.CrashAtWrite(int64(1 + rng.IntN(4)))
		}
		s.Close()
		if fs.Crashed() {
			ops[fs.CrashedOp()]++
			in := fs.CrashedIn()
			switch {
			case strings.Contains(in, "/"+commitLogDir+"/"):
				where[commitLogDir]++
			case strings.Contains(in, "/"+cqDir+"/"):
				where[cqDir]++
			default:
				where[path.Base(in)]++
			}
		}
		fs.CrashAtWrite(0)
		fs = fs.CrashClone(rng.IntN(5) == 0)
	}
	s, err := Open(context.Background(), crashOptions(fs, log))
	require.NoError(t, err)
	model.check(t, s, fmt.Sprintf("seed %d final", seed))
	if os.Getenv("STAT") != "" {
		n := 0
		for _, m := range model.acked {
			n += len(m)
		}
		_, end := s.LogRange()
		t.Logf("seed %d: attempted %d acked %d logEnd %d topics %v", seed, len(model.attempted), n, end, s.Topics())
	}
	require.NoError(t, s.Close())
}
