package producer

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/twinmq/twinmq/config"
	"github.com/twinmq/twinmq/embedded"
	"github.com/twinmq/twinmq/internal/testpki"
	"github.com/twinmq/twinmq/lane"
	"github.com/twinmq/twinmq/rmqerr"
)

// startOneCluster starts an environment of one cluster of two brokers,
// named name, with the topics on both brokers; its name server serves the
// routes of that cluster only.
func startOneCluster(t testing.TB, name string, opts embedded.Options, topics ...string) *embedded.Env {
	t.Helper()
	opts.ClusterNames = []string{name}
	return startEnvWith(t, opts, topics...)
}

// remotingCluster is env's cluster as a remoting cluster of a document:
// its endpoint is env's name server.
func remotingCluster(env *embedded.Env, topic string) config.Cluster {
	return config.Cluster{Name: env.Clusters()[0].Name, Endpoints: []string{env.NameServer()}, Topic: topic,
		Weight: config.DefaultWeight, Protocol: config.ProtocolRemoting}
}

func remotingEndpoints(env *embedded.Env) []string {
	var out []string
	for _, b := range env.Clusters()[0].Brokers() {
		out = append(out, b.RemotingEndpoint())
	}
	return out
}

// One logic topic on a gRPC cluster and a remoting cluster at once (a
// migration from 4.x to 5.x): sends, unbatched and batched, reach both,
// and every acknowledged message is stored, once, where its result says,
// at the queue and offset it says.
func TestLogicTopicOnAGRPCAndARemotingCluster(t *testing.T) {
	for _, batching := range []bool{false, true} {
		t.Run(fmt.Sprintf("batching=%t", batching), func(t *testing.T) {
			grpcEnv := startOneCluster(t, "modern", embedded.Options{}, "orders")
			remEnv := startOneCluster(t, "classic", embedded.Options{}, "orders")
			cfg := config.Default()
			tc := grpcEnv.TopicConfig("orders")
			tc.Clusters = append(tc.Clusters, remotingCluster(remEnv, "orders"))
			cfg.Topics = map[string]config.Topic{"orders": tc}
			cfg.Batching.Enabled = batching
			p := newProducer(t, WithConfig(cfg))
			ctx := testCtx(t)

			var (
				mu   sync.Mutex
				sent = map[string]*SendResult{}
			)
			perCluster := func() map[string]int {
				mu.Lock()
				defer mu.Unlock()
				out := map[string]int{}
				for _, r := range sent {
					out[r.Cluster]++
				}
				return out
			}
			// Concurrent senders, so that batching has batches to make.
			deadline := time.Now().Add(30 * time.Second)
			for round := 0; len(perCluster()) < 2 || round < 4; round++ {
				require.True(t, time.Now().Before(deadline), "equal weights use both clusters: %v", perCluster())
				var wg sync.WaitGroup
				for s := range 8 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := range 20 {
							r, err := p.Send(ctx, &Message{Topic: "orders", Tag: "t", Keys: []string{"k"},
								Body: []byte(fmt.Sprintf("r%d-s%d-%d", round, s, i))})
							if err != nil {
								t.Errorf("send: %v", err)
								return
							}
							mu.Lock()
							sent[r.MessageID] = r
							mu.Unlock()
						}
					}()
				}
				wg.Wait()
			}
			stored := map[string]map[string]bool{}
			for cluster, env := range map[string]*embedded.Env{"modern": grpcEnv, "classic": remEnv} {
				msgs := drain(t, env, "orders")
				stored[cluster] = map[string]bool{}
				for id, m := range msgs {
					stored[cluster][id] = true
					r, ok := sent[id]
					require.True(t, ok, "message %s stored on %s was never acknowledged", id, cluster)
					require.Equal(t, cluster, r.Cluster, "message %s", id)
					require.Equal(t, r.Offset, m.QueueOffset, "offset of %s", id)
					require.Equal(t, r.QueueID, m.QueueID, "queue of %s", id)
					require.Equal(t, "t", m.Tag)
					require.Equal(t, []string{"k"}, m.Keys)
				}
			}
			for id, r := range sent {
				require.True(t, stored[r.Cluster][id], "acknowledged message %s is not stored on %s", id, r.Cluster)
				if r.Cluster == "classic" {
					require.Contains(t, remotingEndpoints(remEnv), r.Endpoint, "a remoting send names the broker's remoting address")
				}
			}
			require.Len(t, stored["modern"], perCluster()["modern"])
			require.Len(t, stored["classic"], perCluster()["classic"])
		})
	}
}

// The messages of a FIFO group sent over remoting all go to one queue of
// one broker, stored in the order they were sent.
func TestRemotingFIFOGroupKeepsOneQueue(t *testing.T) {
	env := startOneCluster(t, "classic", embedded.Options{}, "fifo")
	cfg := config.Default()
	cfg.Topics = map[string]config.Topic{"fifo": {Clusters: []config.Cluster{remotingCluster(env, "fifo")}}}
	p := newProducer(t, WithConfig(cfg))
	ctx := testCtx(t)

	var ids []string
	for i := range 40 {
		r, err := p.Send(ctx, &Message{Topic: "fifo", MessageGroup: "g1", Body: []byte(fmt.Sprint(i))})
		require.NoError(t, err)
		ids = append(ids, r.MessageID)
	}
	stored := drain(t, env, "fifo")
	require.Len(t, stored, len(ids))
	first := stored[ids[0]]
	for i, id := range ids {
		m := stored[id]
		require.Equal(t, first.Endpoint, m.Endpoint, "message %d", i)
		require.Equal(t, first.QueueID, m.QueueID, "message %d", i)
		require.Equal(t, first.QueueOffset+int64(i), m.QueueOffset, "message %d is stored in order", i)
		require.Equal(t, "g1", m.Group)
	}
	st := p.State().Topics[0].Clusters[0]
	require.True(t, st.Routed)
	require.Len(t, st.Brokers, 2)
	connected := 0
	for _, b := range st.Brokers {
		require.Contains(t, remotingEndpoints(env), b.Endpoint, "State names the brokers' remoting addresses")
		if b.Connected {
			connected++
		}
	}
	require.Positive(t, connected, "the broker the group went to is connected")
}

// Transactions over remoting: a commit is delivered, a rollback is not;
// half messages left pending by a producer that closed are resolved by
// the checker of another producer of the topic, which the broker asks.
func TestRemotingTransactions(t *testing.T) {
	env := startOneCluster(t, "classic", embedded.Options{
		BrokersPerCluster: 1,
		TransactionCheck:  embedded.TransactionCheck{Timeout: 200 * time.Millisecond, Interval: 200 * time.Millisecond, MaxChecks: 50},
	}, "pay")
	cfg := config.Default()
	cfg.Topics = map[string]config.Topic{"pay": {Clusters: []config.Cluster{remotingCluster(env, "pay")}}}
	ctx := testCtx(t)

	sender := newProducer(t, WithConfig(cfg))
	commit, err := sender.SendTransactional(ctx, &Message{Topic: "pay", Body: []byte("commit me")})
	require.NoError(t, err)
	rollback, err := sender.SendTransactional(ctx, &Message{Topic: "pay", Body: []byte("roll me back")})
	require.NoError(t, err)
	require.NoError(t, commit.Commit(ctx))
	require.NoError(t, rollback.Rollback(ctx))
	var stored map[string]bool
	require.Eventually(t, func() bool {
		stored = map[string]bool{}
		for id := range drain(t, env, "pay") {
			stored[id] = true
		}
		return len(stored) > 0
	}, 10*time.Second, 50*time.Millisecond, "END_TRANSACTION is oneway: the commit lands a moment later")
	require.Equal(t, map[string]bool{commit.Result.MessageID: true}, stored)

	orphanCommit, err := sender.SendTransactional(lane.WithLane(ctx, "a"), &Message{Topic: "pay", Body: []byte("orphan commit"),
		Properties: map[string]string{"order": "42"}})
	require.NoError(t, err)
	orphanRollback, err := sender.SendTransactional(ctx, &Message{Topic: "pay", Body: []byte("orphan rollback")})
	require.NoError(t, err)
	require.NoError(t, sender.Close(ctx))

	var mu sync.Mutex
	checked := map[string]*CheckedMessage{}
	checker := func(_ context.Context, m *CheckedMessage) TransactionResolution {
		mu.Lock()
		checked[m.MessageID] = m
		mu.Unlock()
		if string(m.Body) == "orphan commit" {
			return TransactionCommit
		}
		return TransactionRollback
	}
	newProducer(t, WithConfig(cfg), WithTransactionChecker(checker))
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return checked[orphanCommit.Result.MessageID] != nil && checked[orphanRollback.Result.MessageID] != nil
	}, 30*time.Second, 50*time.Millisecond, "the broker asks the checker of the topic's other producer")
	mu.Lock()
	c := checked[orphanCommit.Result.MessageID]
	mu.Unlock()
	require.Equal(t, "pay", c.Topic)
	require.Equal(t, "classic", c.Cluster)
	require.Equal(t, "a", c.Lane)
	require.Equal(t, "42", c.Properties["order"])
	require.True(t, strings.HasSuffix(orphanCommit.Result.TransactionID, ":"+c.TransactionID),
		"the result's transaction id %q ends with the broker's %q", orphanCommit.Result.TransactionID, c.TransactionID)

	require.Eventually(t, func() bool {
		n := 0
		for id := range drain(t, env, "pay") {
			require.Equal(t, orphanCommit.Result.MessageID, id, "only the orphan the checker committed is delivered")
			n++
		}
		return n == 1
	}, 30*time.Second, 100*time.Millisecond)
}

// A reload that switches a cluster from gRPC to remoting (same cluster,
// its name server for endpoints) swaps the client under steady load: the
// traffic moves to the brokers' remoting addresses, no send fails, and
// every acknowledged send is stored.
func TestReloadSwitchesAClusterToRemoting(t *testing.T) {
	env := startOneCluster(t, "dc", embedded.Options{}, "feed")
	grpcDoc := config.Default()
	grpcDoc.Topics = map[string]config.Topic{"feed": env.TopicConfig("feed")}
	remDoc := config.Default()
	remDoc.Topics = map[string]config.Topic{"feed": {Clusters: []config.Cluster{remotingCluster(env, "feed")}}}

	versions := make(chan config.Version, 1)
	versions <- config.Version{Config: grpcDoc, Revision: "1"}
	p := newProducer(t, WithSource(config.Chan(versions)))

	loadCtx, stopLoad := context.WithCancel(context.Background())
	log := &sendLog{}
	wg := steadyLoad(loadCtx, p, "feed", 4, time.Millisecond, log)
	defer func() { stopLoad(); wg.Wait() }()

	require.Eventually(t, func() bool { return recentEndpointsIn(log, 50, env.Clusters()[0].Endpoints()) },
		10*time.Second, 20*time.Millisecond)
	versions <- config.Version{Config: remDoc, Revision: "2"}
	require.Eventually(t, func() bool { return recentEndpointsIn(log, 50, remotingEndpoints(env)) },
		10*time.Second, 20*time.Millisecond, "traffic moves to the remoting endpoints")
	versions <- config.Version{Config: grpcDoc, Revision: "3"}
	require.Eventually(t, func() bool { return recentEndpointsIn(log, 50, env.Clusters()[0].Endpoints()) },
		10*time.Second, 20*time.Millisecond, "and back")

	stopLoad()
	wg.Wait()
	all := log.since(time.Time{})
	for _, r := range all {
		require.NoError(t, r.err)
	}
	require.Len(t, drain(t, env, "feed"), len(all), "every acknowledged send is stored")
}

// A delayed message needs a broker with the timer: a broker that says it is
// 4.x gets nothing, and when no broker of the topic has the timer the send
// fails with ErrDelayUnsupported after asking each broker once (never a
// silent delay level, never a second round); a 5.x broker delivers the
// message at its time.
func TestRemotingDelayNeedsA5xBroker(t *testing.T) {
	env := startOneCluster(t, "classic", embedded.Options{}, "later")
	cfg := config.Default()
	cfg.Topics = map[string]config.Topic{"later": {Clusters: []config.Cluster{remotingCluster(env, "later")}}}
	ctx := testCtx(t)

	t.Run("4.x", func(t *testing.T) {
		for _, b := range env.Clusters()[0].Brokers() {
			b.SetRemotingVersion(407) // RocketMQ 4.9.7
		}
		defer func() {
			for _, b := range env.Clusters()[0].Brokers() {
				b.SetRemotingVersion(0)
			}
		}()
		p := newProducer(t, WithConfig(cfg))
		_, err := p.Send(ctx, &Message{Topic: "later", Body: []byte("x"), DeliveryTime: time.Now().Add(time.Minute)})
		require.ErrorIs(t, err, ErrDelayUnsupported)
		require.ErrorIs(t, err, rmqerr.ErrUnsupported)
		require.ErrorContains(t, err, "2 attempts", "each of the two brokers once")
		require.NoError(t, p.Close(ctx))
		require.Empty(t, drain(t, env, "later"), "nothing was stored")
	})

	t.Run("5.x", func(t *testing.T) {
		p := newProducer(t, WithConfig(cfg))
		at := time.Now().Add(1500 * time.Millisecond).Truncate(time.Millisecond)
		r, err := p.Send(ctx, &Message{Topic: "later", Body: []byte("x"), DeliveryTime: at})
		require.NoError(t, err)
		require.Empty(t, drain(t, env, "later"), "not delivered before its time")
		require.Eventually(t, func() bool {
			m := drain(t, env, "later")[r.MessageID]
			return m != nil && m.DeliveryTime.Equal(at)
		}, 20*time.Second, 100*time.Millisecond)
	})
}

// The migration case: a logic topic on a 4.x cluster (no timer) and a 5.x
// cluster. Delayed messages all land on the 5.x cluster, whatever the
// picker chose first; the 4.x brokers' refusals cost them no health, so
// they keep their whole weight for the messages without a delivery time.
func TestDelayedSendsGoToTheClusterWithTheTimer(t *testing.T) {
	old := startOneCluster(t, "old", embedded.Options{}, "later")
	for _, b := range old.Clusters()[0].Brokers() {
		b.SetRemotingVersion(407) // RocketMQ 4.9.7
	}
	cur := startOneCluster(t, "new", embedded.Options{}, "later")
	cfg := config.Default()
	oldCl, curCl := remotingCluster(old, "later"), remotingCluster(cur, "later")
	oldCl.Weight, curCl.Weight = 1000, 1 // the old cluster is picked first
	cfg.Topics = map[string]config.Topic{"later": {Clusters: []config.Cluster{oldCl, curCl}}}
	p := newProducer(t, WithConfig(cfg))
	ctx := testCtx(t)
	at := time.Now().Add(time.Hour)
	refusedFirst := 0
	for i := range 40 {
		r, err := p.Send(ctx, &Message{Topic: "later", Body: []byte(fmt.Sprint(i)), DeliveryTime: at})
		require.NoError(t, err)
		require.Equal(t, "new", r.Cluster, "send %d", i)
		if r.Attempts > 1 {
			refusedFirst++
		}
	}
	require.Positive(t, refusedFirst, "the old cluster was tried first and refused")
	for _, tc := range p.State().Topics[0].Clusters {
		if tc.Name != "old" {
			continue
		}
		require.Len(t, tc.Brokers, 2)
		for _, b := range tc.Brokers {
			require.False(t, b.Down, "broker %s", b.Endpoint)
			require.Equal(t, b.MaxWeight, b.Weight, "broker %s keeps its whole weight", b.Endpoint)
		}
	}
	r, err := p.Send(ctx, &Message{Topic: "later", Body: []byte("plain")})
	require.NoError(t, err)
	require.Equal(t, "old", r.Cluster, "a message without a delivery time goes by weight")
}

// A remoting cluster whose name server cannot be reached has no route: a
// send fails with ErrNoTarget wrapping ErrUnavailable, and State says so.
func TestRemotingUnreachableNameServer(t *testing.T) {
	cfg := config.Default()
	cfg.Topics = map[string]config.Topic{"nowhere": {Clusters: []config.Cluster{
		{Name: "gone", Endpoints: []string{"127.0.0.1:1"}, Topic: "nowhere", Weight: 100, Protocol: config.ProtocolRemoting},
	}}}
	cfg.Timeouts.Request = config.Duration(200 * time.Millisecond)
	p := newProducer(t, WithConfig(cfg))
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err := p.Send(ctx, &Message{Topic: "nowhere", Body: []byte("x")})
	require.ErrorIs(t, err, ErrNoTarget)
	require.ErrorIs(t, err, ErrUnavailable)
	st := p.State().Topics[0].Clusters[0]
	require.False(t, st.Routed)
	require.ErrorIs(t, st.LastError, ErrUnavailable)
}

// A remoting cluster with TLS and access keys: the producer dials the name
// server and the broker over TLS and signs its requests; a wrong secret is
// refused by the broker as forbidden.
func TestRemotingTLSAndCredentials(t *testing.T) {
	pki := testpki.NewServer(t)
	env := startOneCluster(t, "secure", embedded.Options{BrokersPerCluster: 1, TLS: pki.ServerConfig(),
		Users: []embedded.User{{AccessKey: "app", SecretKey: "app-secret", Publish: []string{"t"}}}}, "t")
	send := func(t *testing.T, secret string) error {
		cfg := config.Default()
		cl := remotingCluster(env, "t")
		cl.TLS, cl.Credentials = true, "k"
		cfg.Credentials = map[string]config.Credential{"k": {AccessKey: "app", AccessSecret: secret}}
		cfg.Topics = map[string]config.Topic{"t": {Clusters: []config.Cluster{cl}}}
		cfg.Batching.Enabled = false
		p := newProducer(t, WithConfig(cfg), WithTLSConfig(pki.ClientConfig()))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := p.Send(ctx, &Message{Topic: "t", Body: []byte("signed")})
		return err
	}
	require.NoError(t, send(t, "app-secret"))
	require.ErrorIs(t, send(t, "wrong"), rmqerr.ErrForbidden)
}

// With batching on, a SendBatch over remoting goes as SEND_BATCH_MESSAGE
// requests of several messages, each message with its own id and offset.
func TestRemotingBatchesCarrySeveralMessages(t *testing.T) {
	env := startOneCluster(t, "classic", embedded.Options{BrokersPerCluster: 1}, "bulk")
	cfg := config.Default()
	cfg.Topics = map[string]config.Topic{"bulk": {Clusters: []config.Cluster{remotingCluster(env, "bulk")}}}
	reg := prometheus.NewRegistry()
	p := newProducer(t, WithConfig(cfg), WithRegisterer(reg))
	ctx := testCtx(t)

	batch := make([]*Message, 64)
	for i := range batch {
		batch[i] = &Message{Topic: "bulk", Body: []byte(fmt.Sprint(i))}
	}
	res, err := p.SendBatch(ctx, batch)
	require.NoError(t, err)
	stored := drain(t, env, "bulk")
	require.Len(t, stored, len(batch))
	offsets := map[[2]int64]bool{}
	for i, r := range res {
		m := stored[r.MessageID]
		require.NotNil(t, m, "message %d", i)
		require.Equal(t, fmt.Sprint(i), string(m.Body))
		require.Equal(t, r.Offset, m.QueueOffset)
		require.Equal(t, r.QueueID, m.QueueID)
		offsets[[2]int64{int64(r.QueueID), r.Offset}] = true
	}
	require.Len(t, offsets, len(batch), "every message has its own offset")

	mfs, err := reg.Gather()
	require.NoError(t, err)
	var items, flushes float64
	for _, mf := range mfs {
		if mf.GetName() == "twinmq_batch_size_items" {
			for _, m := range mf.GetMetric() {
				items += m.GetHistogram().GetSampleSum()
				flushes += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	require.Equal(t, float64(len(batch)), items)
	require.Less(t, flushes, items, "requests carried several messages each")
}

// A remoting broker that does not answer in time reads as over gRPC: the
// producer's own request timeout is the broker's timeout (ErrTimeout, "got
// no answer within", retried until the caller's deadline), and a request
// the caller's deadline cut "may have been stored".
func TestRemotingTimeoutReadsAsOverGRPC(t *testing.T) {
	env := startOneCluster(t, "classic", embedded.Options{BrokersPerCluster: 1}, "slow")
	cfg := config.Default()
	cfg.Topics = map[string]config.Topic{"slow": {Clusters: []config.Cluster{remotingCluster(env, "slow")}}}
	cfg.Timeouts.Request = config.Duration(300 * time.Millisecond)
	p := newProducer(t, WithConfig(cfg))
	_, err := p.Send(testCtx(t), &Message{Topic: "slow", Body: []byte("warm-up")})
	require.NoError(t, err)

	b := env.Clusters()[0].Brokers()[0]
	b.SetLatency(5 * time.Second)
	defer b.SetLatency(0)

	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	_, err = p.Send(ctx, &Message{Topic: "slow", Body: []byte("cut by the caller")})
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorContains(t, err, "may have been stored")

	ctx, cancel = context.WithTimeout(context.Background(), 1500*time.Millisecond)
	_, err = p.Send(ctx, &Message{Topic: "slow", Body: []byte("no answer in time")})
	cancel()
	require.ErrorIs(t, err, ErrTimeout)
	require.ErrorContains(t, err, "got no answer within 300ms")
}
