package producer

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/twinmq/twinmq/config"
)

// sendLog records every send of a load loop.
type sendLog struct {
	mu   sync.Mutex
	recs []sendRec
}

type sendRec struct {
	at       time.Time
	cluster  string
	endpoint string
	attempts int
	err      error
}

func (l *sendLog) add(r sendRec) {
	l.mu.Lock()
	l.recs = append(l.recs, r)
	l.mu.Unlock()
}

func (l *sendLog) since(t time.Time) []sendRec {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []sendRec
	for _, r := range l.recs {
		if !r.at.Before(t) {
			out = append(out, r)
		}
	}
	return out
}

// steadyLoad runs senders that each send, then pause, until ctx ends.
func steadyLoad(ctx context.Context, p *Producer, topic string, senders int, pause time.Duration, log *sendLog) *sync.WaitGroup {
	var wg sync.WaitGroup
	body := make([]byte, 512)
	for range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				at := time.Now()
				sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
				r, err := p.Send(sctx, &Message{Topic: topic, Body: body})
				cancel()
				rec := sendRec{at: at, err: err}
				if err == nil {
					rec.cluster, rec.endpoint, rec.attempts = r.Cluster, r.Endpoint, r.Attempts
				}
				log.add(rec)
				select {
				case <-ctx.Done():
				case <-time.After(pause):
				}
			}
		}()
	}
	return &wg
}

// One of two clusters stops under steady load: no send fails, within a
// second failover sends (nearly) everything straight to the live cluster,
// and the stopped cluster gets traffic again once it is back. Both with the
// clusters in one priority group (sharing traffic by weight) and with the
// stopped one preferred (the local data centre, spilling to the remote).
func TestFailoverWhenAClusterStops(t *testing.T) {
	t.Run("same priority", func(t *testing.T) { testFailover(t, false) })
	t.Run("local cluster stops", func(t *testing.T) { testFailover(t, true) })
}

func testFailover(t *testing.T, prioritized bool) {
	env := startEnv(t, "pay")
	doc := docFor(env, "pay")
	doc.Failover.ProbeInterval = config.Duration(200 * time.Millisecond)
	live, dead := env.Clusters()[0], env.Clusters()[1]
	if prioritized {
		// The dead-to-be cluster is the local one.
		doc.Topics["pay"].Clusters[0].Priority = 1
	}
	p := newProducer(t, WithConfig(doc))

	loadCtx, stopLoad := context.WithCancel(context.Background())
	log := &sendLog{}
	wg := steadyLoad(loadCtx, p, "pay", 8, 2*time.Millisecond, log)
	defer func() { stopLoad(); wg.Wait() }()

	if prioritized {
		time.Sleep(time.Second)
		before := log.since(time.Time{})
		require.NotEmpty(t, before)
		for _, r := range before {
			require.Equal(t, dead.Name, r.cluster, "the local cluster takes all traffic while healthy")
		}
	} else {
		require.Eventually(t, func() bool {
			seen := map[string]bool{}
			for _, r := range log.since(time.Time{}) {
				seen[r.cluster] = true
			}
			return seen[dead.Name] && seen[live.Name]
		}, 10*time.Second, 10*time.Millisecond, "both clusters take traffic before the stop")
	}

	stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stoppedAt := time.Now()
	for _, b := range dead.Brokers() {
		require.NoError(t, b.Stop(stopCtx))
	}
	time.Sleep(3 * time.Second)
	restartedAt := time.Now()
	for _, b := range dead.Brokers() {
		require.NoError(t, b.Restart(stopCtx))
	}

	// Traffic comes back to the restarted cluster.
	require.Eventually(t, func() bool {
		for _, r := range log.since(restartedAt) {
			if r.err == nil && r.cluster == dead.Name {
				return true
			}
		}
		return false
	}, 20*time.Second, 50*time.Millisecond, "the restarted cluster never got traffic back")
	stopLoad()
	wg.Wait()

	all := log.since(time.Time{})
	for _, r := range all {
		require.NoError(t, r.err, "a send failed")
	}
	var settled, direct int
	for _, r := range log.since(stoppedAt.Add(time.Second)) {
		if !r.at.Before(restartedAt) {
			continue
		}
		settled++
		if r.cluster == live.Name && r.attempts == 1 {
			direct++
		} else {
			t.Logf("indirect send %v after the stop: cluster %s, %d attempts", r.at.Sub(stoppedAt), r.cluster, r.attempts)
		}
	}
	require.Greater(t, settled, 100, "enough sends between one second after the stop and the restart")
	share := float64(direct) / float64(settled)
	t.Logf("%d sends, %d from 1 s after the stop to the restart, %.2f%% straight to the live cluster", len(all), settled, 100*share)
	require.GreaterOrEqual(t, share, 0.99, "sends going straight to the live cluster one second after the stop")
}
