package producer

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/twinmq/twinmq/config"
)

// A broker that hangs (accepts requests, answers none) while every sender
// has a deadline far shorter than timeouts.request: the requests it holds
// are cut by their senders, not by the request timeout, and used to say
// nothing of its health, so it kept its share of the traffic and a quarter
// of the sends failed for as long as it hung. With failover.slowRequest a
// request unanswered that long counts against it, and the sends move off
// it within a fraction of a second.
func TestHungBrokerIsLeftUnderShortDeadlines(t *testing.T) {
	env := startEnv(t, "hung")
	doc := docFor(env, "hung")
	doc.Failover.SlowRequest = config.Duration(100 * time.Millisecond)
	doc.Timeouts.Request = config.Duration(10 * time.Second)
	p := newProducer(t, WithConfig(doc))
	ctx := context.Background()
	_, err := p.Send(ctx, &Message{Topic: "hung", Body: []byte("warm up")})
	require.NoError(t, err)

	hung := env.Clusters()[0].Brokers()[0]
	hung.Pause()
	defer hung.Resume()

	const (
		senders  = 8
		deadline = 500 * time.Millisecond
		run      = 3 * time.Second
		settle   = time.Second // the sends after this count
	)
	var (
		late, lateFailed atomic.Int64
		wg               sync.WaitGroup
	)
	start := time.Now()
	for range senders {
		wg.Go(func() {
			for time.Since(start) < run {
				sctx, cancel := context.WithTimeout(ctx, deadline)
				t0 := time.Now()
				_, err := p.Send(sctx, &Message{Topic: "hung", Body: []byte("x")})
				cancel()
				if t0.Sub(start) >= settle {
					late.Add(1)
					if err != nil {
						lateFailed.Add(1)
					}
				}
			}
		})
	}
	wg.Wait()
	require.Positive(t, late.Load())
	t.Logf("%d of %d sends failed after the first second", lateFailed.Load(), late.Load())
	// A hung broker is probed back now and then (a probe fails, but a
	// release on probation may take a send or two with it).
	require.LessOrEqual(t, float64(lateFailed.Load()), 0.02*float64(late.Load()),
		"%d of %d sends failed after the first second with one broker of four hung", lateFailed.Load(), late.Load())
}
