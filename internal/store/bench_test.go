package store

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Benchmarks run on the real disk (b.TempDir) and publish figures with
// b.ReportMetric(v, "fig:<name>"); `make bench-store` prints them.

const benchBody = 1024

func benchOpen(b *testing.B, mod func(*Options)) *Store {
	b.Helper()
	o := Options{Dir: b.TempDir(), SegmentSize: 256 << 20}
	if mod != nil {
		mod(&o)
	}
	s, err := Open(context.Background(), o)
	if err != nil {
		b.Fatal(err)
	}
	return s
}

func benchMsg(topic string, q int32) []Message {
	return []Message{{Topic: topic, QueueID: q, BornHost: "127.0.0.1:1", Tag: "t", Body: make([]byte, benchBody)}}
}

// median returns the middle value of xs.
func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[len(s)/2]
}

const benchRounds = 5

// BenchmarkSeqWriteVsAppend compares, in alternating rounds so both see the
// same machine load, a dd-style sequential write (1 MiB writes, final
// fdatasync) with appends of 1 KB messages (async flush, GOMAXPROCS
// appenders, final fsync) of the same volume. Figures are round medians.
func BenchmarkSeqWriteVsAppend(b *testing.B) {
	const volume = 256 << 20
	var disk, store []float64
	for i := 0; i < b.N; i++ {
		for r := 0; r < 3; r++ {
			disk = append(disk, volume/1e6/seqWrite(b, volume).Seconds())
			store = append(store, volume/1e6/appendVolume(b, volume/benchBody).Seconds())
		}
	}
	b.ReportMetric(median(disk), "fig:disk_seq_write_mb_s")
	b.ReportMetric(median(store), "fig:store_append_async_mb_s")
}

func seqWrite(b *testing.B, volume int) time.Duration {
	f, err := os.Create(filepath.Join(b.TempDir(), "seq"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	block := make([]byte, 1<<20)
	start := time.Now()
	for off := 0; off < volume; off += len(block) {
		if _, err := f.WriteAt(block, int64(off)); err != nil {
			b.Fatal(err)
		}
	}
	if err := unix.Fdatasync(int(f.Fd())); err != nil {
		b.Fatal(err)
	}
	return time.Since(start)
}

func appendVolume(b *testing.B, msgs int) time.Duration {
	s := benchOpen(b, nil)
	defer s.Close()
	ctx := context.Background()
	workers := runtime.GOMAXPROCS(0)
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := benchMsg("async", int32(w))
			for i := w; i < msgs; i += workers {
				if _, err := s.Append(ctx, m); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := s.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	return time.Since(start)
}

// benchSync appends 1 KB messages with sync flush from the given number of
// concurrent appenders; each append returns only once an fsync covered it.
func benchSync(b *testing.B, appenders int, fig string) {
	s := benchOpen(b, func(o *Options) { o.Flush = FlushSync })
	defer s.Close()
	ctx := context.Background()
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	for w := 0; w < appenders; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := benchMsg("sync", int32(w%8))
			for next.Add(1) <= int64(b.N) {
				res, err := s.Append(ctx, m)
				if err != nil || res.Durability != Flushed {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "fig:"+fig)
}

func BenchmarkSync1(b *testing.B)  { benchSync(b, 1, "store_sync_1_msgs_s") }
func BenchmarkSync64(b *testing.B) { benchSync(b, 64, "store_sync_64_msgs_s") }

// BenchmarkAppendDispatch appends 1 KB messages (async flush) and then
// measures the index pipeline alone: the queue files and checkpoint are
// removed and the store reopened, which re-indexes the whole log (a CRC scan
// plus the parallel pipeline).
func BenchmarkAppendDispatch(b *testing.B) {
	dir := b.TempDir()
	s := benchOpen(b, func(o *Options) { o.Dir = dir })
	ctx := context.Background()
	var q atomic.Int32
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		m := benchMsg("disp", q.Add(1)%16)
		for pb.Next() {
			if _, err := s.Append(ctx, m); err != nil {
				b.Error(err)
				return
			}
		}
	})
	appendDur := time.Since(start)
	b.StopTimer()
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
	os.RemoveAll(filepath.Join(dir, cqDir))
	os.Remove(filepath.Join(dir, checkpointName))
	t0 := time.Now()
	s2, err := Open(ctx, Options{Dir: dir, SegmentSize: 256 << 20})
	if err != nil {
		b.Fatal(err)
	}
	dispDur := time.Since(t0)
	var total int64
	for _, id := range s2.Queues("disp") {
		_, max := s2.Offsets("disp", id)
		total += max
	}
	s2.Close()
	if total != int64(b.N) {
		b.Fatalf("re-indexed %d messages, appended %d", total, b.N)
	}
	b.ReportMetric(float64(b.N)/appendDur.Seconds(), "fig:store_append_msgs_s")
	b.ReportMetric(float64(b.N)/dispDur.Seconds(), "fig:store_dispatch_msgs_s")
}

// BenchmarkQueueFanout appends 1 KB messages round-robin over 16 and over
// 10,000 queues (async flush, GOMAXPROCS appenders) and waits until all are
// indexed, alternating the two in rounds; figures are round medians. Each
// round uses a fresh store whose queues each got one message first
// (untimed): the figure is the steady state, not the creation of queues.
func BenchmarkQueueFanout(b *testing.B) {
	const msgs = 100_000
	var q16, q10k []float64
	for i := 0; i < b.N; i++ {
		for r := 0; r < benchRounds; r++ {
			q16 = append(q16, msgs/fanout(b, 16, msgs).Seconds())
			q10k = append(q10k, msgs/fanout(b, 10000, msgs).Seconds())
		}
	}
	b.ReportMetric(median(q16), "fig:store_16q_msgs_s")
	b.ReportMetric(median(q10k), "fig:store_10000q_msgs_s")
}

var fanoutHook = func(bool) {}

func fanout(b *testing.B, queues, msgs int) time.Duration {
	s := benchOpen(b, nil)
	defer s.Close()
	ctx := context.Background()
	for q := 0; q < queues; q++ {
		if _, err := s.Append(ctx, benchMsg("fan", int32(q))); err != nil {
			b.Fatal(err)
		}
	}
	if err := s.WaitDispatched(ctx); err != nil {
		b.Fatal(err)
	}
	workers := runtime.GOMAXPROCS(0)
	var wg sync.WaitGroup
	fanoutHook(true)
	defer fanoutHook(false)
	start := time.Now()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := benchMsg("fan", 0) // one buffer per producer, reused like a client would
			for i := w; i < msgs; i += workers {
				m[0].QueueID = int32(i % queues)
				if _, err := s.Append(ctx, m); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := s.WaitDispatched(ctx); err != nil {
		b.Fatal(err)
	}
	return time.Since(start)
}

// benchLookup measures finding the entry of a random offset in a queue of
// 100,000 messages.
func benchLookup(b *testing.B, batch bool, fig string) {
	s := benchOpen(b, nil)
	defer s.Close()
	if err := s.SetTopicOptions("lk", TopicOptions{BatchCQ: batch}); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	const total, per = 100_000, 8
	batchMsgs := make([]Message, per)
	for i := range batchMsgs {
		batchMsgs[i] = Message{Topic: "lk", Body: make([]byte, 16)}
	}
	for i := 0; i < total/per; i++ {
		if _, err := s.Append(ctx, batchMsgs); err != nil {
			b.Fatal(err)
		}
	}
	if err := s.WaitDispatched(ctx); err != nil {
		b.Fatal(err)
	}
	q := s.queue("lk", 0)
	rng := rand.New(rand.NewPCG(1, 2))
	offs := make([]int64, 4096)
	for i := range offs {
		offs[i] = rng.Int64N(total)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, ok := q.lookup(offs[i&4095]); !ok {
			b.Fatal("lookup failed")
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "fig:"+fig)
}

func BenchmarkCQLookup(b *testing.B)      { benchLookup(b, false, "cq_lookup_ns") }
func BenchmarkBatchCQLookup(b *testing.B) { benchLookup(b, true, "batchcq_lookup_ns") }
