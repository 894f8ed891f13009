package producer

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// benchRounds is how many rounds each mode runs per sub-benchmark. The
// modes alternate round by round, so that a load spike from elsewhere on a
// shared machine hits both alike; each figure is the median of its rounds.
const benchRounds = 10

// BenchmarkProduce measures synchronous Send of 1 KB messages from C
// concurrent senders against the embedded two-cluster broker, with and
// without batching, on the same brokers. For each C it publishes msgs/s
// (median of the rounds) and the p99 latency (over all rounds) of both
// modes as benchfig "fig:" metrics, and the CPU of the whole process
// (producer and brokers) per message as cpu-us/msg.
func BenchmarkProduce(b *testing.B) {
	env := startEnv(b, "bench")
	body := make([]byte, 1024)
	for i := range body {
		body[i] = byte('a' + i%26)
	}
	// Warm the brokers' stores and the runtime up once, so that the first
	// sub-benchmark does not pay for them.
	warm := newProducer(b, WithConfig(docFor(env, "bench")))
	if _, err := load(warm, 16, 8000, body); err != nil {
		b.Fatal(err)
	}
	for _, c := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("c%d", c), func(b *testing.B) {
			modes := []string{"batched", "unbatched"}
			producers := map[string]*Producer{}
			for _, mode := range modes {
				doc := docFor(env, "bench")
				doc.Batching.Enabled = mode == "batched"
				p := newProducer(b, WithConfig(doc))
				if _, err := load(p, c, 256, body); err != nil {
					b.Fatal(err)
				}
				producers[mode] = p
			}
			perRound := max(b.N/(len(modes)*benchRounds), 1)
			rates := map[string][]float64{}
			lats := map[string][]time.Duration{}
			cpus := map[string]time.Duration{}
			b.SetBytes(int64(len(body)))
			b.ResetTimer()
			for round := range benchRounds {
				order := modes
				if round%2 == 1 {
					order = []string{modes[1], modes[0]}
				}
				for _, mode := range order {
					cpu0 := processCPU()
					r, err := load(producers[mode], c, perRound, body)
					if err != nil {
						b.Fatal(err)
					}
					cpus[mode] += processCPU() - cpu0
					rates[mode] = append(rates[mode], float64(perRound)/r.elapsed.Seconds())
					lats[mode] = append(lats[mode], r.latencies...)
				}
			}
			b.StopTimer()
			for _, mode := range modes {
				slices.Sort(rates[mode])
				slices.Sort(lats[mode])
				rate := rates[mode][len(rates[mode])/2]
				p99 := lats[mode][min(len(lats[mode])-1, len(lats[mode])*99/100)]
				b.ReportMetric(rate, fmt.Sprintf("fig:produce_%s_c%d_msgs_s", mode, c))
				b.ReportMetric(float64(p99)/float64(time.Millisecond), fmt.Sprintf("fig:produce_%s_c%d_p99_ms", mode, c))
				b.ReportMetric(float64(cpus[mode].Microseconds())/float64(perRound*benchRounds), mode+"-cpu-us/msg")
			}
		})
	}
}

type loadResult struct {
	elapsed   time.Duration
	latencies []time.Duration
}

// load sends n messages with Send from c goroutines and times each.
func load(p *Producer, c, n int, body []byte) (loadResult, error) {
	lat := make([]time.Duration, n)
	var (
		next     atomic.Int64
		firstErr atomic.Pointer[error]
		wg       sync.WaitGroup
	)
	ctx := context.Background()
	start := time.Now()
	for range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				t0 := time.Now()
				if _, err := p.Send(ctx, &Message{Topic: "bench", Body: body}); err != nil {
					firstErr.CompareAndSwap(nil, &err)
				}
				lat[i] = time.Since(t0)
			}
		}()
	}
	wg.Wait()
	if err := firstErr.Load(); err != nil {
		return loadResult{}, *err
	}
	return loadResult{elapsed: time.Since(start), latencies: lat}, nil
}

// processCPU returns the user and system CPU time this process used so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
