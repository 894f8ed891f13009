//go:build interop

package interop

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/twinmq/twinmq/config"
	"github.com/twinmq/twinmq/internal/remoting"
	"github.com/twinmq/twinmq/internal/remoting/remotingsuite"
	"github.com/twinmq/twinmq/internal/remoting/wire"
	"github.com/twinmq/twinmq/lane"
	"github.com/twinmq/twinmq/producer"
	"github.com/twinmq/twinmq/rmqerr"
)

// The SDK producer (producer.New) against the real brokers over remoting,
// through their name servers: the cases producer/remoting_test.go runs
// against the embedded broker, each once per backend. Everything a test
// sends is read back from the broker itself with PULL_MESSAGE, from every
// queue of the topic, starting at the offsets the queues had before the
// test, so a message stored twice or not at all shows.
//
// The tests are not parallel at the top level: the remoting suite
// (TestRemotingSuiteRocketMQ5/4, parallel) uses the same topics, and the
// delay case on 4.9.7 asserts that no queue of remoting_delay moved. The two
// backends of one test run side by side.

// remBackend is one real broker reached over remoting.
type remBackend struct {
	name    string
	env     string // the variable holding its name server
	cluster string // the cluster's name in the producer's configuration
	timer   bool   // 5.x: honours an arbitrary delivery time
}

var remBackends = []remBackend{
	{name: "rocketmq-5.4.0", env: "TWINMQ_INTEROP_NAMESRV", cluster: "v5", timer: true},
	{name: "rocketmq-4.9.7", env: "TWINMQ_INTEROP_V4_NAMESRV", cluster: "v4", timer: false},
}

// remNameServer reads a name server address from env, failing (never
// skipping) when it is unset.
func remNameServer(t *testing.T, env string) string {
	t.Helper()
	addr := os.Getenv(env)
	if addr == "" {
		t.Fatalf("%s is not set: run through interop/run.sh (make interop)", env)
	}
	return addr
}

// forEachRemBackend runs fn once per backend, the two in parallel.
func forEachRemBackend(t *testing.T, fn func(t *testing.T, b remBackend, namesrv string)) {
	for _, b := range remBackends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			fn(t, b, remNameServer(t, b.env))
		})
	}
}

// remCluster is a remoting cluster entry of a logic topic.
func remCluster(name, namesrv, physical string, weight int) config.Cluster {
	return config.Cluster{Name: name, Endpoints: []string{namesrv}, Topic: physical, Weight: weight,
		Protocol: config.ProtocolRemoting}
}

// remConfig maps logic onto clusters.
func remConfig(logic string, batching bool, clusters ...config.Cluster) *config.Config {
	cfg := config.Default()
	cfg.Batching.Enabled = batching
	cfg.Topics = map[string]config.Topic{logic: {Clusters: clusters}}
	return cfg
}

func remCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// remQueue is one readable queue of a topic on one broker.
type remQueue struct {
	addr string
	id   int32
}

// remStored is a message read back from a broker.
type remStored struct {
	wire.MessageExt
	Addr string
	// At is when the reader first saw it.
	At time.Time
}

func (m *remStored) ID() string { return m.Properties[wire.PropUniqKey] }

// remReader reads topics back from the brokers of one name server with
// PULL_MESSAGE (no offset commit, every tag).
type remReader struct {
	c  *remoting.Client
	ns *remoting.NameServer
}

func newRemReader(t *testing.T, namesrv string) *remReader {
	c := remoting.New()
	t.Cleanup(func() { _ = c.Close() })
	ns, err := remoting.NewNameServer(c, []string{namesrv})
	require.NoError(t, err)
	return &remReader{c: c, ns: ns}
}

// queues lists the readable queues of topic on the masters of its route.
func (r *remReader) queues(ctx context.Context, t *testing.T, topic string) []remQueue {
	t.Helper()
	rt, err := r.ns.Route(ctx, topic)
	require.NoError(t, err, "route of %s", topic)
	var out []remQueue
	for _, qd := range rt.Queues {
		addr, ok := rt.BrokerAddr(qd.BrokerName)
		if !ok || qd.Perm&remoting.PermRead == 0 {
			continue
		}
		for i := range qd.ReadQueueNums {
			out = append(out, remQueue{addr, int32(i)})
		}
	}
	require.NotEmpty(t, out, "topic %s has no readable queue", topic)
	return out
}

// masters is the set of broker addresses of topic's route.
func (r *remReader) masters(ctx context.Context, t *testing.T, topic string) map[string]bool {
	out := map[string]bool{}
	for _, q := range r.queues(ctx, t, topic) {
		out[q.addr] = true
	}
	return out
}

// marks returns where every queue of topic ends now: the offset the next
// message stored in it gets.
func (r *remReader) marks(ctx context.Context, t *testing.T, topic string) map[remQueue]int64 {
	t.Helper()
	out := map[remQueue]int64{}
	for _, q := range r.queues(ctx, t, topic) {
		res, err := r.c.Pull(ctx, remoting.PullRequest{Addr: q.addr, Topic: topic, QueueID: q.id, Offset: 0,
			MaxMessages: 1, ConsumerGroup: remotingsuite.GroupRead})
		require.NoError(t, err, "pull %s queue %d", topic, q.id)
		out[q] = res.MaxOffset
	}
	return out
}

// remRead is a read of a topic from given offsets on: what was seen, by
// message id, every copy.
type remRead struct {
	r     *remReader
	topic string
	next  map[remQueue]int64
	got   map[string][]*remStored
}

func (r *remReader) from(topic string, marks map[remQueue]int64) *remRead {
	next := make(map[remQueue]int64, len(marks))
	for q, o := range marks {
		next[q] = o
	}
	return &remRead{r: r, topic: topic, next: next, got: map[string][]*remStored{}}
}

// pass pulls every queue up to its current end once.
func (rd *remRead) pass(ctx context.Context, t *testing.T) {
	t.Helper()
	for q, off := range rd.next {
		for {
			res, err := rd.r.c.Pull(ctx, remoting.PullRequest{Addr: q.addr, Topic: rd.topic, QueueID: q.id, Offset: off,
				ConsumerGroup: remotingsuite.GroupRead})
			require.NoError(t, err, "pull %s queue %d at %d", rd.topic, q.id, off)
			now := time.Now()
			for _, m := range res.Messages {
				s := &remStored{MessageExt: m, Addr: q.addr, At: now}
				rd.got[s.ID()] = append(rd.got[s.ID()], s)
			}
			moved := res.NextOffset != off
			off = res.NextOffset
			if !moved || res.Status != remoting.PullFound || off >= res.MaxOffset {
				break
			}
		}
		rd.next[q] = off
	}
}

// until reads until done says so, failing when ctx ends first.
func (rd *remRead) until(ctx context.Context, t *testing.T, what string, done func() bool) {
	t.Helper()
	for {
		rd.pass(ctx, t)
		if done() {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: reading %s: %v", what, rd.topic, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// all says every id of want was seen.
func (rd *remRead) all(want map[string]remSent) func() bool {
	return func() bool {
		for id := range want {
			if len(rd.got[id]) == 0 {
				return false
			}
		}
		return true
	}
}

// remSent is a message the producer acknowledged.
type remSent struct {
	res  *producer.SendResult
	msg  *producer.Message
	lane string
}

// storedAt says which of a result's coordinates a stored message must
// match: the queue and broker the request named (a proxy may pick another
// queue), and the offset (a committed transactional message gets a new one:
// the result's is its half message's).
type storedAt struct{ queue, offset bool }

var atResult = storedAt{queue: true, offset: true}

// checkStored asserts that every acknowledged message of sent is stored
// exactly once where its result says, with what was sent.
func checkStored(t *testing.T, rd *remRead, sent map[string]remSent, at storedAt) {
	t.Helper()
	for id, s := range sent {
		copies := rd.got[id]
		require.Len(t, copies, 1, "message %s (%.24s) is stored exactly once", id, s.msg.Body)
		m := copies[0]
		require.Equal(t, rd.topic, m.Topic)
		require.Equal(t, s.msg.Body, m.Body, "body of %s", id)
		require.Equal(t, s.msg.Tag, m.Properties[wire.PropTags], "tag of %s", id)
		require.Equal(t, strings.Join(s.msg.Keys, " "), m.Properties[wire.PropKeys], "keys of %s", id)
		require.Equal(t, s.lane, m.Properties[lane.PropertyLane], "lane of %s", id)
		for k, v := range s.msg.Properties {
			require.Equal(t, v, m.Properties[k], "property %s of %s", k, id)
		}
		require.Equal(t, s.msg.MessageGroup, m.Properties[wire.PropShardingKey], "group of %s", id)
		if at.offset {
			require.Equal(t, s.res.Offset, m.QueueOffset, "offset of %s", id)
		}
		if at.queue {
			require.Equal(t, s.res.QueueID, m.QueueID, "queue of %s", id)
			require.Equal(t, s.res.Endpoint, m.Addr, "broker of %s", id)
		}
	}
}

// checkResult asserts what a remoting send's result says.
func checkResult(t *testing.T, r *producer.SendResult, logic, cluster, physical string, brokers map[string]bool, laneName string) {
	t.Helper()
	require.NotEmpty(t, r.MessageID)
	require.Equal(t, logic, r.Topic)
	require.Equal(t, cluster, r.Cluster)
	require.Equal(t, physical, r.PhysicalTopic)
	require.True(t, brokers[r.Endpoint], "result endpoint %s is a broker of the route %v", r.Endpoint, brokers)
	require.Equal(t, laneName, r.Lane)
	require.GreaterOrEqual(t, r.Offset, int64(0))
}

// Single sends, one at a time, some on a lane: each acknowledged message
// is stored once, at the queue and offset its result names, with its body,
// tag, keys, properties and lane.
func TestRemotingProducerNormal(t *testing.T) {
	forEachRemBackend(t, func(t *testing.T, b remBackend, namesrv string) {
		ctx := remCtx(t, 2*time.Minute)
		const logic, physical = "rp_normal", remotingsuite.TopicNormal
		rdr := newRemReader(t, namesrv)
		marks := rdr.marks(ctx, t, physical)
		brokers := rdr.masters(ctx, t, physical)
		p := sdkProducer(t, producer.WithConfig(remConfig(logic, false, remCluster(b.cluster, namesrv, physical, 100))))

		sent := map[string]remSent{}
		for i := range 40 {
			laneName, sctx := "", ctx
			if i%2 == 1 {
				laneName = "rp.normal"
				sctx = lane.WithLane(ctx, laneName)
			}
			m := &producer.Message{Topic: logic, Body: sdkBody("rp-normal-"+b.cluster, i), Tag: "rp-normal",
				Keys: []string{fmt.Sprintf("k%d", i), "rp"}, Properties: map[string]string{"idx": strconv.Itoa(i)}}
			r, err := p.Send(sctx, m)
			require.NoError(t, err, "send %d", i)
			checkResult(t, r, logic, b.cluster, physical, brokers, laneName)
			require.Equal(t, 1, r.Attempts)
			require.NotContains(t, sent, r.MessageID)
			sent[r.MessageID] = remSent{res: r, msg: m, lane: laneName}
		}
		rd := rdr.from(physical, marks)
		rd.until(ctx, t, "every acknowledged message", rd.all(sent))
		checkStored(t, rd, sent, atResult)
	})
}

// Batching on, concurrent senders and a SendBatch: every acknowledged id
// is stored exactly once where its result says, and the requests carried
// several messages each (SEND_BATCH_MESSAGE), as the producer's batch size
// histogram shows.
func TestRemotingProducerBatched(t *testing.T) {
	forEachRemBackend(t, func(t *testing.T, b remBackend, namesrv string) {
		ctx := remCtx(t, 2*time.Minute)
		const logic, physical = "rp_batch", remotingsuite.TopicBatch
		rdr := newRemReader(t, namesrv)
		marks := rdr.marks(ctx, t, physical)
		brokers := rdr.masters(ctx, t, physical)
		reg := prometheus.NewRegistry()
		p := sdkProducer(t, producer.WithConfig(remConfig(logic, true, remCluster(b.cluster, namesrv, physical, 100))),
			producer.WithRegisterer(reg))

		const senders, perSender = 32, 20
		type outcome struct {
			res *producer.SendResult
			msg *producer.Message
			err error
		}
		out := make([]outcome, senders*perSender)
		var wg sync.WaitGroup
		for g := range senders {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range perSender {
					n := g*perSender + i
					m := &producer.Message{Topic: logic, Body: sdkBody("rp-batch-"+b.cluster, n), Tag: "rp-batch",
						Keys: []string{fmt.Sprintf("k%d", n)}}
					r, err := p.Send(ctx, m)
					out[n] = outcome{res: r, msg: m, err: err}
				}
			}()
		}
		wg.Wait()
		sent := map[string]remSent{}
		for i, o := range out {
			require.NoError(t, o.err, "send %d", i)
			checkResult(t, o.res, logic, b.cluster, physical, brokers, "")
			require.NotContains(t, sent, o.res.MessageID)
			sent[o.res.MessageID] = remSent{res: o.res, msg: o.msg}
		}
		requests, items, alone := sdkHistogram(t, reg, "twinmq_batch_size_items", 1)
		t.Logf("concurrent senders: %d messages in %d requests (%d of one message)", senders*perSender, requests, alone)
		require.Equal(t, float64(senders*perSender), items)
		require.Less(t, alone, requests, "most requests of %d concurrent senders carried several messages", senders)

		var batch []*producer.Message
		for i := range 100 {
			batch = append(batch, &producer.Message{Topic: logic, Body: sdkBody("rp-sendbatch-"+b.cluster, i), Tag: "rp-sendbatch"})
		}
		res, err := p.SendBatch(lane.WithLane(ctx, "rp.batch"), batch)
		require.NoError(t, err)
		require.Len(t, res, len(batch))
		for i, r := range res {
			checkResult(t, r, logic, b.cluster, physical, brokers, "rp.batch")
			require.NotContains(t, sent, r.MessageID)
			sent[r.MessageID] = remSent{res: r, msg: batch[i], lane: "rp.batch"}
		}
		requests2, items2, _ := sdkHistogram(t, reg, "twinmq_batch_size_items", 1)
		require.Equal(t, float64(len(batch)), items2-items)
		require.Less(t, requests2-requests, uint64(len(batch)), "a SendBatch goes as requests of several messages")

		rd := rdr.from(physical, marks)
		rd.until(ctx, t, "every acknowledged message", rd.all(sent))
		checkStored(t, rd, sent, atResult)
	})
}

// The messages of a FIFO group, sent asynchronously (several in flight at
// once), land in one queue in the order they were sent; two groups
// interleaved keep each its own order.
func TestRemotingProducerFIFO(t *testing.T) {
	forEachRemBackend(t, func(t *testing.T, b remBackend, namesrv string) {
		ctx := remCtx(t, 2*time.Minute)
		const logic, physical = "rp_fifo", remotingsuite.TopicFIFO
		rdr := newRemReader(t, namesrv)
		marks := rdr.marks(ctx, t, physical)
		brokers := rdr.masters(ctx, t, physical)
		p := sdkProducer(t, producer.WithConfig(remConfig(logic, true, remCluster(b.cluster, namesrv, physical, 100))))

		groups := []string{"rp-g1-" + b.cluster, "rp-g2-" + b.cluster}
		const perGroup = 60
		type outcome struct {
			res *producer.SendResult
			err error
		}
		msgs := make([]*producer.Message, 0, perGroup*len(groups))
		out := make([]outcome, perGroup*len(groups))
		var wg sync.WaitGroup
		for i := range perGroup * len(groups) {
			m := &producer.Message{Topic: logic, MessageGroup: groups[i%len(groups)], Tag: "rp-fifo",
				Body: sdkBody("rp-fifo-"+b.cluster, i)}
			msgs = append(msgs, m)
			wg.Add(1)
			p.SendAsync(ctx, m, func(r *producer.SendResult, err error) {
				out[i] = outcome{res: r, err: err}
				wg.Done()
			})
		}
		wg.Wait()
		sent := map[string]remSent{}
		for i, o := range out {
			require.NoError(t, o.err, "send %d", i)
			checkResult(t, o.res, logic, b.cluster, physical, brokers, "")
			sent[o.res.MessageID] = remSent{res: o.res, msg: msgs[i]}
		}
		rd := rdr.from(physical, marks)
		rd.until(ctx, t, "every acknowledged message", rd.all(sent))
		checkStored(t, rd, sent, atResult)
		for gi, g := range groups {
			var first *remStored
			var last int64 = -1
			for i := gi; i < len(out); i += len(groups) {
				m := rd.got[out[i].res.MessageID][0]
				if first == nil {
					first = m
				}
				require.Equal(t, first.Addr, m.Addr, "group %s, message %d: one broker", g, i)
				require.Equal(t, first.QueueID, m.QueueID, "group %s, message %d: one queue", g, i)
				require.Greater(t, m.QueueOffset, last, "group %s, message %d is stored after the one sent before it", g, i)
				last = m.QueueOffset
			}
		}
	})
}

// Transactions: a commit is readable, a rollback never; half messages left
// open by a producer that closed are resolved by the checker of another
// producer of the topic, which the broker asks with CHECK_TRANSACTION_STATE
// (5.4.0 checks a half message once it is 6 s old, 4.9.7 here once it is
// 1 s old); the one it commits becomes readable, the one it rolls back
// never does.
func TestRemotingProducerTransactions(t *testing.T) {
	forEachRemBackend(t, func(t *testing.T, b remBackend, namesrv string) {
		ctx := remCtx(t, 3*time.Minute)
		const logic, physical = "rp_txn", remotingsuite.TopicTxn
		rdr := newRemReader(t, namesrv)
		marks := rdr.marks(ctx, t, physical)
		brokers := rdr.masters(ctx, t, physical)
		cfg := remConfig(logic, true, remCluster(b.cluster, namesrv, physical, 100))

		sender, err := producer.New(ctx, producer.WithConfig(cfg))
		require.NoError(t, err)
		t.Cleanup(func() { _ = sender.Close(context.Background()) })
		body := func(s string) []byte { return []byte(s + " " + b.cluster) }
		commit, err := sender.SendTransactional(ctx, &producer.Message{Topic: logic, Body: body("commit me"), Tag: "rp-txn"})
		require.NoError(t, err)
		checkResult(t, commit.Result, logic, b.cluster, physical, brokers, "")
		require.NotEmpty(t, commit.Result.TransactionID)
		rollback, err := sender.SendTransactional(ctx, &producer.Message{Topic: logic, Body: body("roll me back"), Tag: "rp-txn"})
		require.NoError(t, err)
		require.NoError(t, commit.Commit(ctx))
		require.NoError(t, rollback.Rollback(ctx))

		orphanCommit, err := sender.SendTransactional(lane.WithLane(ctx, "rp.txn"), &producer.Message{Topic: logic,
			Body: body("orphan commit"), Tag: "rp-txn", Keys: []string{"ok"}, Properties: map[string]string{"order": "42"}})
		require.NoError(t, err)
		orphanRollback, err := sender.SendTransactional(ctx, &producer.Message{Topic: logic, Body: body("orphan rollback"), Tag: "rp-txn"})
		require.NoError(t, err)
		require.NoError(t, sender.Close(ctx))
		closedAt := time.Now()

		var mu sync.Mutex
		checked := map[string]*producer.CheckedMessage{}
		checker := func(_ context.Context, m *producer.CheckedMessage) producer.TransactionResolution {
			mu.Lock()
			defer mu.Unlock()
			if checked[m.MessageID] == nil {
				checked[m.MessageID] = m
			}
			if string(m.Body) == string(body("orphan commit")) || string(m.Body) == string(body("commit me")) {
				return producer.TransactionCommit
			}
			return producer.TransactionRollback
		}
		sdkProducer(t, producer.WithConfig(cfg), producer.WithTransactionChecker(checker))

		rd := rdr.from(physical, marks)
		rd.until(ctx, t, "the commit", func() bool { return len(rd.got[commit.Result.MessageID]) > 0 })

		require.Eventually(t, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return checked[orphanCommit.Result.MessageID] != nil && checked[orphanRollback.Result.MessageID] != nil
		}, 90*time.Second, 50*time.Millisecond, "the broker asks the checker of the topic's other producer")
		t.Logf("both orphans checked back %v after their producer closed", time.Since(closedAt).Round(100*time.Millisecond))
		mu.Lock()
		c := checked[orphanCommit.Result.MessageID]
		mu.Unlock()
		require.Equal(t, physical, c.Topic)
		require.Equal(t, b.cluster, c.Cluster)
		require.True(t, brokers[c.Endpoint], "checked on a broker of the route: %s", c.Endpoint)
		require.Equal(t, "rp.txn", c.Lane)
		require.Equal(t, "42", c.Properties["order"])
		require.Equal(t, []string{"ok"}, c.Keys)
		require.Equal(t, "rp-txn", c.Tag)
		require.Equal(t, body("orphan commit"), c.Body)
		require.True(t, strings.HasSuffix(orphanCommit.Result.TransactionID, ":"+c.TransactionID),
			"the result's transaction id %q ends with the broker's %q", orphanCommit.Result.TransactionID, c.TransactionID)

		rd.until(ctx, t, "the orphan the checker committed", func() bool { return len(rd.got[orphanCommit.Result.MessageID]) > 0 })
		rd.pass(ctx, t)
		sent := map[string]remSent{
			commit.Result.MessageID:       {res: commit.Result, msg: &producer.Message{Body: body("commit me"), Tag: "rp-txn"}},
			orphanCommit.Result.MessageID: {res: orphanCommit.Result, lane: "rp.txn", msg: &producer.Message{Body: body("orphan commit"), Tag: "rp-txn", Keys: []string{"ok"}, Properties: map[string]string{"order": "42"}}},
		}
		// A commit stores the message anew in its topic: the result's
		// offset is the half message's, in the broker's half topic.
		checkStored(t, rd, sent, storedAt{queue: true})
		require.Empty(t, rd.got[rollback.Result.MessageID], "a rolled back message is never readable")
		require.Empty(t, rd.got[orphanRollback.Result.MessageID], "an orphan the checker rolled back is never readable")
	})
}

// A delivery time: on 5.4.0 the message goes to the timer's topic first
// (rmq_sys_wheel_timer, queue 0, at the offset the result names), is not in
// the topic's queues before its time and is there after it, with its id;
// on 4.9.7 the send fails with ErrDelayUnsupported and nothing is stored.
func TestRemotingProducerDelay(t *testing.T) {
	forEachRemBackend(t, func(t *testing.T, b remBackend, namesrv string) {
		ctx := remCtx(t, 2*time.Minute)
		const logic, physical = "rp_delay", remotingsuite.TopicDelay
		rdr := newRemReader(t, namesrv)
		marks := rdr.marks(ctx, t, physical)
		brokers := rdr.masters(ctx, t, physical)
		p := sdkProducer(t, producer.WithConfig(remConfig(logic, true, remCluster(b.cluster, namesrv, physical, 100))))
		m := &producer.Message{Topic: logic, Body: []byte("later " + b.cluster), Tag: "rp-delay", Keys: []string{"d"}}

		if !b.timer {
			m.DeliveryTime = time.Now().Add(3 * time.Second)
			_, err := p.Send(ctx, m)
			require.ErrorIs(t, err, producer.ErrDelayUnsupported)
			require.ErrorIs(t, err, rmqerr.ErrUnsupported)
			require.ErrorContains(t, err, "1 attempt")
			require.Equal(t, marks, rdr.marks(ctx, t, physical), "nothing was stored: no queue of %s moved", physical)
			return
		}

		sentAt := time.Now()
		m.DeliveryTime = sentAt.Add(3 * time.Second).Truncate(time.Millisecond)
		r, err := p.Send(ctx, m)
		require.NoError(t, err)
		checkResult(t, r, logic, b.cluster, physical, brokers, "")

		// Where it waits: the timer's topic, queue 0, at the result's offset,
		// with the topic and queue it is due in.
		tres, err := rdr.c.Pull(ctx, remoting.PullRequest{Addr: r.Endpoint, Topic: timerTopic, QueueID: 0, Offset: r.Offset,
			MaxMessages: 1, ConsumerGroup: remotingsuite.GroupRead})
		require.NoError(t, err)
		require.Equal(t, remoting.PullFound, tres.Status, "the message waits in %s at offset %d", timerTopic, r.Offset)
		w := tres.Messages[0]
		require.Equal(t, r.MessageID, w.Properties[wire.PropUniqKey])
		require.Equal(t, physical, w.Properties["REAL_TOPIC"])
		require.Equal(t, strconv.Itoa(int(r.QueueID)), w.Properties["REAL_QID"])
		require.Equal(t, strconv.FormatInt(m.DeliveryTime.UnixMilli(), 10), w.Properties[wire.PropDeliverMS])
		t.Logf("waiting in %s: TIMER_OUT_MS %s for a delivery time of %d", timerTopic, w.Properties["TIMER_OUT_MS"], m.DeliveryTime.UnixMilli())

		rd := rdr.from(physical, marks)
		rd.pass(ctx, t)
		// The broker's timer ticks every second (timerPrecisionMs) and
		// rounds a delivery time down to a tick, so the message may come
		// up to a second early, never earlier.
		if time.Now().Before(m.DeliveryTime.Add(-time.Second)) {
			require.Empty(t, rd.got[r.MessageID], "not in %s's queues before its time", physical)
		}
		rd.until(ctx, t, "the delayed message", func() bool { return len(rd.got[r.MessageID]) > 0 })
		got := rd.got[r.MessageID][0]
		t.Logf("delayed message readable %v after its send, %v after its delivery time", got.At.Sub(sentAt).Round(time.Millisecond),
			got.At.Sub(m.DeliveryTime).Round(time.Millisecond))
		require.False(t, got.At.Before(m.DeliveryTime.Add(-time.Second)), "read at %v, delivery time %v", got.At, m.DeliveryTime)
		require.Equal(t, m.Body, got.Body)
		require.Equal(t, "rp-delay", got.Properties[wire.PropTags])
		require.Equal(t, "d", got.Properties[wire.PropKeys])
		require.Equal(t, r.QueueID, got.QueueID, "due in the queue the send named")
		require.Len(t, rd.got[r.MessageID], 1)
	})
}

// timerTopic is where a 5.x broker keeps a message until its delivery time.
const timerTopic = "rmq_sys_wheel_timer"

// One logic topic on two clusters at once, the migration from 4.x to 5.x:
// a 4.9.7 cluster over remoting and a 5.4.0 cluster, over remoting or over
// gRPC through the proxy, weighted 1 to 3. Concurrent sends, batched, go
// to both; every acknowledged id is read back from the cluster its result
// names, exactly once, and from no other.
func TestRemotingProducerMigration(t *testing.T) {
	v5ns := remNameServer(t, "TWINMQ_INTEROP_NAMESRV")
	v4ns := remNameServer(t, "TWINMQ_INTEROP_V4_NAMESRV")
	proxy := endpointFromEnv(t)
	const logic, physical = "rp_migration", remotingsuite.TopicNormal
	for _, c := range []struct {
		name string
		v5   config.Cluster
	}{
		{"v5-remoting", remCluster("v5", v5ns, physical, 300)},
		{"v5-grpc", config.Cluster{Name: "v5", Endpoints: []string{proxy}, Topic: physical, Weight: 300}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := remCtx(t, 3*time.Minute)
			readers := map[string]*remReader{"v5": newRemReader(t, v5ns), "v4": newRemReader(t, v4ns)}
			marks := map[string]map[remQueue]int64{}
			for name, rdr := range readers {
				marks[name] = rdr.marks(ctx, t, physical)
			}
			v4brokers := readers["v4"].masters(ctx, t, physical)
			p := sdkProducer(t, producer.WithConfig(remConfig(logic, true, c.v5, remCluster("v4", v4ns, physical, 100))))

			var mu sync.Mutex
			sent := map[string]remSent{}
			perCluster := map[string]int{}
			// Paced senders, for long enough: the producer sticks to a
			// pick for 50 ms, so the shares follow the weights over many
			// picks, and at a steady rate a pick holds about as many
			// messages whichever cluster it chose (a closed loop as fast
			// as it can go gives the faster cluster more per pick).
			const senders, pace, span = 8, 10 * time.Millisecond, 4 * time.Second
			began := time.Now()
			var wg sync.WaitGroup
			for s := range senders {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; ; i++ {
						mu.Lock()
						enough := time.Since(began) > span && perCluster["v4"] >= 20 && perCluster["v5"] >= 20
						mu.Unlock()
						if enough || ctx.Err() != nil {
							return
						}
						m := &producer.Message{Topic: logic, Tag: "rp-migration", Keys: []string{c.name},
							Body: sdkBody(fmt.Sprintf("rp-migration-%s-s%d", c.name, s), i)}
						r, err := p.Send(ctx, m)
						if err != nil {
							t.Errorf("send: %v", err)
							return
						}
						mu.Lock()
						sent[r.MessageID] = remSent{res: r, msg: m}
						perCluster[r.Cluster]++
						mu.Unlock()
						time.Sleep(pace)
					}
				}()
			}
			wg.Wait()
			require.False(t, t.Failed())
			require.NoError(t, ctx.Err(), "both clusters take sends: %v", perCluster)
			t.Logf("%d messages: v5 (weight 300) %d, v4 (weight 100) %d", len(sent), perCluster["v5"], perCluster["v4"])
			retried := map[string]int{}
			for _, s := range sent {
				if s.res.Attempts > 1 {
					retried[s.res.Cluster]++
				}
			}
			for _, cs := range p.State().Topics[0].Clusters {
				for _, b := range cs.Brokers {
					t.Logf("cluster %s broker %s: weight %.1f of %.1f, down %t; %d messages took more than one attempt",
						cs.Name, b.Endpoint, b.Weight, b.MaxWeight, b.Down, retried[cs.Name])
				}
			}
			require.Greater(t, perCluster["v5"], perCluster["v4"], "the cluster of three times the weight takes more: %v", perCluster)

			byCluster := map[string]map[string]remSent{"v5": {}, "v4": {}}
			for id, s := range sent {
				require.Equal(t, physical, s.res.PhysicalTopic)
				if s.res.Cluster == "v4" {
					require.True(t, v4brokers[s.res.Endpoint], "v4 result names a 4.9.7 broker: %s", s.res.Endpoint)
				}
				byCluster[s.res.Cluster][id] = s
			}
			reads := map[string]*remRead{}
			for name, rdr := range readers {
				rd := rdr.from(physical, marks[name])
				rd.until(ctx, t, "every message sent to "+name, rd.all(byCluster[name]))
				reads[name] = rd
			}
			for name, rd := range reads {
				// The proxy may store a gRPC request in another queue than
				// the one it named; over remoting the named queue is used.
				checkStored(t, rd, byCluster[name], storedAt{offset: true, queue: name == "v4" || c.v5.Protocol == config.ProtocolRemoting})
				for other := range reads {
					if other == name {
						continue
					}
					for id := range byCluster[name] {
						require.Empty(t, reads[other].got[id], "message %s sent to %s is not stored on %s", id, name, other)
					}
				}
			}
		})
	}
}
