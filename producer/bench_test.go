package producer

import (
	"context"
	"fmt"
	"os"
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
const benchRounds = 25

// benchRound is the wall time of one round of one mode, unless the
// PRODUCE_ROUND environment variable gives another duration. Rounds are
// timed rather than counted so that both modes sample the machine over
// windows of the same length: with a count, batched rounds (five times the
// rate) lasted a fifth as long and a passing stall weighed five times as
// much on them.
const benchRound = 200 * time.Millisecond

// BenchmarkProduce measures synchronous Send of 1 KB messages from C
// concurrent senders against the embedded two-cluster broker, with and
// without batching, on the same brokers. For each C it publishes msgs/s
// (median of the rounds) and the p99 latency (over all rounds) of both
// modes as benchfig "fig:" metrics, and the CPU of the whole process
// (producer and brokers) per message as cpu-us/msg. Its length is set by
// benchRounds and benchRound, not by b.N: run it with -benchtime 1x.
func BenchmarkProduce(b *testing.B) {
	round := benchRound
	if v := os.Getenv("PRODUCE_ROUND"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			b.Fatalf("PRODUCE_ROUND=%q: want a positive duration", v)
		}
		round = d
	}
	env := startEnv(b, "bench")
	body := make([]byte, 1024)
	for i := range body {
		body[i] = byte('a' + i%26)
	}
	// Warm the brokers' stores and the runtime up once, so that the first
	// sub-benchmark does not pay for them.
	warm := newProducer(b, WithConfig(docFor(env, "bench")))
	if _, err := load(warm, 16, round, body); err != nil {
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
				if _, err := load(p, c, round/4, body); err != nil {
					b.Fatal(err)
				}
				producers[mode] = p
			}
			rates := map[string][]float64{}
			lats := map[string][]time.Duration{}
			cpus := map[string]time.Duration{}
			sent := map[string]int{}
			b.ResetTimer()
			for r := range benchRounds {
				order := modes
				if r%2 == 1 {
					order = []string{modes[1], modes[0]}
				}
				for _, mode := range order {
					cpu0 := processCPU()
					res, err := load(producers[mode], c, round, body)
					if err != nil {
						b.Fatal(err)
					}
					cpus[mode] += processCPU() - cpu0
					rates[mode] = append(rates[mode], float64(len(res.latencies))/res.elapsed.Seconds())
					lats[mode] = append(lats[mode], res.latencies...)
					sent[mode] += len(res.latencies)
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
				b.ReportMetric(float64(cpus[mode].Microseconds())/float64(max(sent[mode], 1)), mode+"-cpu-us/msg")
			}
		})
	}
}

type loadResult struct {
	elapsed   time.Duration
	latencies []time.Duration
}

// load sends messages with Send from c goroutines for about d (each
// sender starts no new send after d) and times each.
func load(p *Producer, c int, d time.Duration, body []byte) (loadResult, error) {
	var (
		firstErr atomic.Pointer[error]
		wg       sync.WaitGroup
	)
	lat := make([][]time.Duration, c)
	ctx := context.Background()
	start := time.Now()
	end := start.Add(d)
	for i := range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			own := make([]time.Duration, 0, 4096)
			for {
				t0 := time.Now()
				if t0.After(end) {
					break
				}
				if _, err := p.Send(ctx, &Message{Topic: "bench", Body: body}); err != nil {
					firstErr.CompareAndSwap(nil, &err)
				}
				own = append(own, time.Since(t0))
			}
			lat[i] = own
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := firstErr.Load(); err != nil {
		return loadResult{}, *err
	}
	return loadResult{elapsed: elapsed, latencies: slices.Concat(lat...)}, nil
}

// processCPU returns the user and system CPU time this process used so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
