package embedded_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/twinmq/twinmq/internal/driver"
)

// delayRun is the outcome of runDelayed.
type delayRun struct {
	late  []time.Duration // sorted: receive time minus delivery time
	early int
	dups  int
}

func (r delayRun) pct(p float64) time.Duration { return r.late[int(float64(len(r.late)-1)*p)] }

// runDelayed sends n messages with uniformly random delays in [0, spread)
// through the driver to one embedded broker, and consumes them with four
// long-polling receivers; lateness is measured when the receive returns.
func runDelayed(tb testing.TB, n int, spread time.Duration) delayRun {
	_, b := oneBroker(tb, nil)
	ep := b.Endpoint()
	ctx, cancel := context.WithTimeout(context.Background(), spread+2*time.Minute)
	defer cancel()

	pcfg := driver.Config{Type: driver.Producer, Topics: []string{"later"}}
	p, err := driver.New(pcfg)
	require.NoError(tb, err)
	defer p.Close(context.Background())
	c, err := driver.New(driver.Config{Type: driver.SimpleConsumer, Group: "g", Subscriptions: []driver.Subscription{{Topic: "later"}}})
	require.NoError(tb, err)
	defer c.Close(context.Background())
	route, err := c.QueryRoute(ctx, ep, "later")
	require.NoError(tb, err)

	var mu sync.Mutex
	seen := map[string]int{}
	var out delayRun
	done := make(chan struct{})
	var wg sync.WaitGroup
	for _, q := range route.ReadableQueues() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				msgs, err := c.Receive(ctx, driver.ReceiveRequest{Queue: q, BatchSize: 32, InvisibleDuration: time.Minute,
					LongPollingTimeout: 200 * time.Millisecond})
				now := time.Now()
				if err != nil {
					if ctx.Err() != nil {
						return
					}
					continue
				}
				var acks []driver.AckEntry
				mu.Lock()
				for _, m := range msgs {
					seen[m.ID]++
					if seen[m.ID] > 1 {
						out.dups++
					}
					if now.Before(m.DeliveryTime) {
						out.early++
					}
					out.late = append(out.late, now.Sub(m.DeliveryTime))
					acks = append(acks, driver.AckEntry{MessageID: m.ID, ReceiptHandle: m.ReceiptHandle})
				}
				mu.Unlock()
				if len(acks) > 0 {
					_, _ = c.Ack(ctx, ep, "later", acks)
				}
			}
		}()
	}
	rng := rand.New(rand.NewPCG(42, uint64(n)))
	var swg sync.WaitGroup
	const senders = 8
	sendErr := make(chan error, senders)
	for s := range senders {
		swg.Add(1)
		delays := make([]time.Duration, 0, n/senders+1)
		for i := s; i < n; i += senders {
			delays = append(delays, time.Duration(rng.Int64N(int64(spread))))
		}
		go func() {
			defer swg.Done()
			for i, d := range delays {
				// Millisecond times: the protocol's delivery time has
				// millisecond meaning in the store.
				at := time.Now().Add(d).Truncate(time.Millisecond)
				_, err := p.Send(ctx, ep, []*driver.Message{{Topic: "later", ID: fmt.Sprintf("d-%d-%d", s, i), Body: []byte("x"),
					DeliveryTime: at, QueueID: driver.AnyQueue}})
				if err != nil {
					sendErr <- err
					return
				}
			}
		}()
	}
	swg.Wait()
	close(sendErr)
	for err := range sendErr {
		require.NoError(tb, err)
	}
	deadline := time.Now().Add(spread + time.Minute)
	for {
		mu.Lock()
		got := len(seen)
		mu.Unlock()
		if got == n || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(done)
	wg.Wait()
	require.Len(tb, seen, n, "messages lost")
	sort.Slice(out.late, func(i, j int) bool { return out.late[i] < out.late[j] })
	return out
}

// TestDelayedEndToEnd: delayed messages sent through the driver arrive at
// a consumer once each and never before their time. (Lateness figures come
// from BenchmarkDelayEndToEnd.)
func TestDelayedEndToEnd(t *testing.T) {
	r := runDelayed(t, 2000, 3*time.Second)
	require.Zero(t, r.early, "received before the delivery time")
	require.Zero(t, r.dups, "received twice")
	t.Logf("lateness at the consumer: p50 %s p99 %s max %s", r.pct(0.5), r.pct(0.99), r.pct(1))
}

// BenchmarkDelayEndToEnd: the run through the whole path (driver
// send, broker timer store, pop, long-polling consumer): 10,000 messages
// with random delays up to 10 s. It reports the 99th percentile lateness
// at the consumer as delay_p99_late_ms. Run with -benchtime 1x.
func BenchmarkDelayEndToEnd(b *testing.B) {
	var p50, p99 float64
	for b.Loop() {
		r := runDelayed(b, 10_000, 10*time.Second)
		if r.early > 0 || r.dups > 0 {
			b.Fatalf("%d early, %d duplicate", r.early, r.dups)
		}
		p50 = float64(r.pct(0.5).Microseconds()) / 1000
		p99 = float64(r.pct(0.99).Microseconds()) / 1000
	}
	b.ReportMetric(p50, "p50_late_ms")
	b.ReportMetric(p99, "fig:delay_p99_late_ms")
}
