// Package remotingsuite is the wire suite of the remoting driver
// (internal/remoting): one set of cases, written against the driver and the
// name server only, run unchanged against the embedded broker (in `go
// test`, see embedded_test.go) and against real RocketMQ brokers, 5.4.0 and
// 4.9.7, through their name servers (internal/interop, `make interop`). It
// covers route lookup through the name server (the fastjson route data
// included), heartbeat and unregister, a single send and a batch send with
// each message's id and queue offset, refusals mapped to the rmqerr
// classes, and, read back from the broker, what was sent with its tag,
// keys, message group, trace context and user properties; FIFO (a message
// group's messages in one queue, in order); transactions committed, rolled
// back, and resolved by the broker's check-back through the client's
// handler; and delivery times: honoured by a broker with the timer (5.x),
// ignored by one without (4.x), as the version field of its responses says.
//
// Reading back goes through the gRPC driver where the backend has a gRPC
// endpoint over the same store (the embedded broker, which serves no
// PULL_MESSAGE), else through PULL_MESSAGE (Client.Pull).
package remotingsuite

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/twinmq/twinmq/internal/driver"
	"github.com/twinmq/twinmq/internal/remoting"
	"github.com/twinmq/twinmq/internal/remoting/wire"
	"github.com/twinmq/twinmq/rmqerr"
)

// Backend describes one server set the suite runs against.
type Backend struct {
	Name string
	// NameServers are the name server addresses routes are asked from.
	NameServers []string
	// GRPCEndpoint, when set, is a gRPC access point over the same store:
	// the suite then reads what it sent back through the gRPC driver.
	GRPCEndpoint string
	// Serialize is the header serialization the client sends.
	Serialize wire.SerializeType
	// Pull reads back with PULL_MESSAGE instead (brokers without gRPC).
	Pull bool
	// CheckBackWithin bounds how long the broker takes to check an
	// unresolved half message back; 0 skips the check-back case.
	CheckBackWithin time.Duration
	// Timer says the broker honours an arbitrary delivery time
	// (TIMER_DELIVER_MS: 5.x); without it the broker must deliver such a
	// message at once, the property kept as a plain one (4.x).
	Timer bool
	// Version, when set, is the version field every response of the
	// broker must carry; its HasTimer must agree with Timer.
	Version remoting.Version
	Logger  *zap.Logger
}

// Topics and groups a backend must provide: TopicNormal and TopicBatch of
// type NORMAL, TopicFIFO of type FIFO, TopicTxn of type TRANSACTION,
// TopicDelay of type DELAY (types matter to the embedded broker and the
// 5.x proxy, not to a broker spoken to over remoting); GroupRead a
// consumer group (created on first use by the real brokers).
const (
	TopicNormal = "remoting_normal"
	TopicBatch  = "remoting_batch"
	TopicFIFO   = "remoting_fifo"
	TopicTxn    = "remoting_txn"
	TopicDelay  = "remoting_delay"
	GroupRead   = "remoting_read_group"
	// ProducerGroup is the prefix of the producer group of a run: each
	// backend gets its own (ProducerGroup plus its name), so that two
	// runs against one broker at once never receive each other's
	// check-backs.
	ProducerGroup = "remoting_producer_group"

	topicMissing   = "remoting_no_such_topic"
	requestTimeout = 10 * time.Second
)

// Run runs every case against b.
func Run(t *testing.T, b Backend) {
	require.NotEmpty(t, b.NameServers, "backend %s: no name server", b.Name)
	if b.Logger == nil {
		b.Logger = zap.NewNop()
	}
	s := &suite{b: b, group: ProducerGroup + "_" + groupSafe.Replace(b.Name)}
	t.Run("Route", s.testRoute)
	t.Run("HeartbeatUnregister", s.testHeartbeat)
	t.Run("SendSingle", s.testSendSingle)
	t.Run("SendBatch", s.testSendBatch)
	t.Run("Refusals", s.testRefusals)
	if b.Version != remoting.VersionUnknown {
		t.Run("BrokerVersion", s.testVersion)
	}
	if b.GRPCEndpoint != "" || b.Pull {
		t.Run("ConsumeWhatWasSent", s.testConsume)
		t.Run("FIFO", s.testFIFO)
		t.Run("Transactions", s.testTransactions)
		t.Run("DeliveryTime", s.testDeliveryTime)
	}
}

type suite struct {
	b     Backend
	group string
}

// groupSafe maps a backend's name to the characters RocketMQ allows in a
// group name.
var groupSafe = strings.NewReplacer(".", "_", " ", "_", "/", "_")

func (s *suite) ctx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// client returns a remoting client and a name server over it, closed at
// cleanup.
func (s *suite) client(t *testing.T) (*remoting.Client, *remoting.NameServer) {
	c := remoting.New(remoting.WithSerializeType(s.b.Serialize), remoting.WithLogger(s.b.Logger))
	t.Cleanup(func() { _ = c.Close() })
	ns, err := remoting.NewNameServer(c, s.b.NameServers)
	require.NoError(t, err)
	return c, ns
}

func (s *suite) queues(ctx context.Context, t *testing.T, ns *remoting.NameServer, topic string) []remoting.WriteQueue {
	t.Helper()
	r, err := ns.Route(ctx, topic)
	require.NoError(t, err, "backend %s must provide topic %s", s.b.Name, topic)
	qs := r.WriteQueues()
	require.NotEmpty(t, qs, "topic %s has no writable queue", topic)
	return qs
}

func (s *suite) target(q remoting.WriteQueue) remoting.SendTarget {
	return remoting.SendTarget{Addr: q.Addr, BrokerName: q.BrokerName, QueueID: q.QueueID, ProducerGroup: s.group}
}

func (s *suite) testRoute(t *testing.T) {
	ctx := s.ctx(t, 30*time.Second)
	_, ns := s.client(t)
	r, err := ns.Route(ctx, TopicNormal)
	require.NoError(t, err)
	require.NotEmpty(t, r.Brokers)
	for _, b := range r.Brokers {
		a, ok := b.Addrs[remoting.MasterID]
		require.True(t, ok, "broker %s has no master address", b.Name)
		require.NotEmpty(t, a)
	}
	qs := r.WriteQueues()
	require.NotEmpty(t, qs)
	_, err = ns.Route(ctx, topicMissing)
	require.ErrorIs(t, err, rmqerr.ErrNotFound)
	var re *rmqerr.Error
	require.ErrorAs(t, err, &re)
	require.Equal(t, rmqerr.CodeTopicNotFound, re.Code)
}

func (s *suite) testHeartbeat(t *testing.T) {
	ctx := s.ctx(t, 30*time.Second)
	c, ns := s.client(t)
	seen := map[string]bool{}
	for _, q := range s.queues(ctx, t, ns, TopicNormal) {
		if seen[q.Addr] {
			continue
		}
		seen[q.Addr] = true
		require.NoError(t, c.Heartbeat(ctx, q.Addr, "suite-client@1", []string{s.group}))
		require.NoError(t, c.Unregister(ctx, q.Addr, "suite-client@1", s.group))
	}
}

// Two single sends to one queue: each result names that queue, the
// message's own id, and consecutive offsets.
func (s *suite) testSendSingle(t *testing.T) {
	ctx := s.ctx(t, 30*time.Second)
	c, ns := s.client(t)
	ids := remoting.NewIDGenerator()
	q := s.queues(ctx, t, ns, TopicNormal)[0]
	var res []remoting.SendResult
	for i := range 2 {
		m := &remoting.Message{Topic: TopicNormal, Tag: "single", Body: []byte(fmt.Sprintf("single %d", i))}
		r, err := c.Send(ctx, ids, s.target(q), m)
		require.NoError(t, err)
		require.Equal(t, m.ID, r.ID)
		require.Len(t, r.ID, 32)
		require.Equal(t, q.QueueID, r.QueueID)
		require.NotEmpty(t, r.OffsetID)
		res = append(res, r)
	}
	require.Equal(t, res[0].QueueOffset+1, res[1].QueueOffset, "two sends in a row to one queue take consecutive offsets")
	require.NotEqual(t, res[0].ID, res[1].ID)
}

// A batch lands contiguously in the queue it was sent to; message i has
// its own id and the first offset plus i.
func (s *suite) testSendBatch(t *testing.T) {
	ctx := s.ctx(t, 30*time.Second)
	c, ns := s.client(t)
	ids := remoting.NewIDGenerator()
	qs := s.queues(ctx, t, ns, TopicBatch)
	q := qs[len(qs)-1]
	var msgs []*remoting.Message
	for i := range 5 {
		msgs = append(msgs, &remoting.Message{Topic: TopicBatch, Keys: []string{fmt.Sprintf("k%d", i)}, Body: []byte(fmt.Sprintf("batch %d", i))})
	}
	res, err := c.SendBatch(ctx, ids, s.target(q), msgs)
	require.NoError(t, err)
	require.Len(t, res, 5)
	seen := map[string]bool{}
	for i, r := range res {
		require.Equal(t, msgs[i].ID, r.ID)
		require.False(t, seen[r.ID], "ids are distinct")
		seen[r.ID] = true
		require.Equal(t, q.QueueID, r.QueueID)
		require.Equal(t, res[0].QueueOffset+int64(i), r.QueueOffset)
	}
	again, err := c.SendBatch(ctx, ids, s.target(q), []*remoting.Message{{Topic: TopicBatch, Body: []byte("after")}})
	require.NoError(t, err)
	require.Equal(t, res[4].QueueOffset+1, again[0].QueueOffset)
}

// What the broker refuses comes back in the rmqerr classes.
func (s *suite) testRefusals(t *testing.T) {
	ctx := s.ctx(t, 30*time.Second)
	c, ns := s.client(t)
	ids := remoting.NewIDGenerator()
	q := s.queues(ctx, t, ns, TopicNormal)[0]
	// A topic the broker does not have.
	tg := s.target(q)
	_, err := c.Send(ctx, ids, tg, &remoting.Message{Topic: topicMissing, Body: []byte("x")})
	require.ErrorIs(t, err, rmqerr.ErrNotFound)
	var re *remoting.ResponseError
	require.ErrorAs(t, err, &re)
	require.Equal(t, wire.RespTopicNotExist, re.Code)
	// A tag no tag expression could select: real brokers store it as is,
	// so it never leaves the client.
	_, err = c.Send(ctx, ids, tg, &remoting.Message{Topic: TopicNormal, Tag: "a|b", Body: []byte("x")})
	require.ErrorIs(t, err, rmqerr.ErrBadRequest)
	require.False(t, errors.As(err, &re))
	// An empty body never leaves the client.
	_, err = c.Send(ctx, ids, tg, &remoting.Message{Topic: TopicNormal})
	require.ErrorIs(t, err, rmqerr.ErrBadRequest)
	require.False(t, errors.As(err, &re))
}

// Messages sent over remoting are read back through the gRPC path from the
// same store, each with what was sent.
func (s *suite) testConsume(t *testing.T) {
	ctx := s.ctx(t, 60*time.Second)
	c, ns := s.client(t)
	ids := remoting.NewIDGenerator()
	props := map[string]string{"color": "blue", "twinmq_lane": "canary"}
	sent := map[string]*remoting.Message{}
	single := &remoting.Message{Topic: TopicNormal, Tag: "tagA", Keys: []string{"order-1", "user-7"},
		TraceContext: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", Properties: props, Body: []byte("one")}
	q := s.queues(ctx, t, ns, TopicNormal)[0]
	_, err := c.Send(ctx, ids, s.target(q), single)
	require.NoError(t, err)
	sent[single.ID] = single
	var batch []*remoting.Message
	for i := range 3 {
		batch = append(batch, &remoting.Message{Topic: TopicNormal, Tag: "tagB", Keys: []string{fmt.Sprintf("b%d", i)}, Properties: props, Body: []byte(fmt.Sprintf("b %d", i))})
	}
	_, err = c.SendBatch(ctx, ids, s.target(q), batch)
	require.NoError(t, err)
	for _, m := range batch {
		sent[m.ID] = m
	}

	got := s.read(ctx, t, c, ns, TopicNormal, func(id string) bool { _, ok := sent[id]; return ok }, len(sent))
	for id, m := range sent {
		r := got[id]
		require.NotNil(t, r, "message %s not received", id)
		require.Equal(t, m.Body, r.Body)
		require.Equal(t, m.Tag, r.Tag)
		keys := append([]string(nil), r.Keys...)
		sort.Strings(keys)
		want := append([]string(nil), m.Keys...)
		sort.Strings(want)
		require.Equal(t, want, keys)
		require.Equal(t, "blue", r.Properties["color"])
		require.Equal(t, "canary", r.Properties["twinmq_lane"])
		require.Equal(t, m.TraceContext, r.TraceContext)
		require.Equal(t, q.QueueID, r.QueueID)
	}
}

// A message group's messages sent to one queue are stored there in order,
// each with its group (the sharding key) read back.
func (s *suite) testFIFO(t *testing.T) {
	ctx := s.ctx(t, 60*time.Second)
	c, ns := s.client(t)
	ids := remoting.NewIDGenerator()
	qs := s.queues(ctx, t, ns, TopicFIFO)
	q := qs[len(qs)/2]
	group := "order-" + ids.Next()[24:]
	var res []remoting.SendResult
	want := map[string]int{}
	for i := range 3 {
		m := &remoting.Message{Topic: TopicFIFO, Group: group, Body: []byte(fmt.Sprintf("step %d", i))}
		r, err := c.Send(ctx, ids, s.target(q), m)
		require.NoError(t, err)
		require.Equal(t, q.QueueID, r.QueueID)
		if i > 0 {
			require.Equal(t, res[i-1].QueueOffset+1, r.QueueOffset, "a group's messages follow each other in its queue")
		}
		res = append(res, r)
		want[m.ID] = i
	}
	got := s.read(ctx, t, c, ns, TopicFIFO, func(id string) bool { _, ok := want[id]; return ok }, len(want))
	for id, i := range want {
		r := got[id]
		require.Equal(t, group, r.Group)
		require.Equal(t, q.QueueID, r.QueueID)
		require.Equal(t, res[i].QueueOffset, r.QueueOffset)
		require.Equal(t, []byte(fmt.Sprintf("step %d", i)), r.Body)
	}
}

// Every response of the broker carries its version; whether that version
// has the timer agrees with what the broker does with a delivery time
// (DeliveryTime). This is what lets a producer refuse a delivery time on a
// broker that would deliver it at once.
func (s *suite) testVersion(t *testing.T) {
	ctx := s.ctx(t, 30*time.Second)
	c, ns := s.client(t)
	q := s.queues(ctx, t, ns, TopicNormal)[0]
	r, err := c.Send(ctx, remoting.NewIDGenerator(), s.target(q), &remoting.Message{Topic: TopicNormal, Body: []byte("version")})
	require.NoError(t, err)
	require.Equal(t, s.b.Version, r.BrokerVersion, "version field of %s's send response", s.b.Name)
	require.Equal(t, s.b.Timer, r.BrokerVersion.HasTimer())
	rs, err := c.SendBatch(ctx, remoting.NewIDGenerator(), s.target(q), []*remoting.Message{{Topic: TopicNormal, Body: []byte("version")}})
	require.NoError(t, err)
	require.Equal(t, s.b.Version, rs[0].BrokerVersion)
}

// A delivery time (TIMER_DELIVER_MS) is honoured by a broker with the
// timer: the message is not readable before it. A broker without the timer
// stores the property as a plain one and delivers at once, which is why
// the producer must refuse a delivery time there rather than send it.
func (s *suite) testDeliveryTime(t *testing.T) {
	ctx := s.ctx(t, 60*time.Second)
	c, ns := s.client(t)
	ids := remoting.NewIDGenerator()
	q := s.queues(ctx, t, ns, TopicDelay)[0]
	delay := 3 * time.Second
	if !s.b.Timer {
		delay = time.Hour
	}
	at := time.Now().Add(delay).Truncate(time.Millisecond)
	m := &remoting.Message{Topic: TopicDelay, Body: []byte("later"),
		Properties: map[string]string{wire.PropDeliverMS: strconv.FormatInt(at.UnixMilli(), 10)}}
	_, err := c.Send(ctx, ids, s.target(q), m)
	require.NoError(t, err)
	got := s.read(ctx, t, c, ns, TopicDelay, func(id string) bool { return id == m.ID }, 1)[m.ID]
	require.Equal(t, []byte("later"), got.Body)
	if s.b.Timer {
		require.False(t, got.At.Before(at), "read at %v, delivery time %v", got.At, at)
	} else {
		require.True(t, got.At.Before(at), "a broker without the timer delivers at once")
		require.Equal(t, strconv.FormatInt(at.UnixMilli(), 10), got.Properties[wire.PropDeliverMS], "kept as a plain property")
	}
}

// received is a message read back, from either reader.
type received struct {
	ID           string
	Tag          string
	Keys         []string
	Group        string
	TraceContext string
	Properties   map[string]string
	Body         []byte
	QueueID      int32
	QueueOffset  int64
	// At is when the reader first saw it.
	At time.Time
}

// read reads topic back until n messages that want accepts have come.
func (s *suite) read(ctx context.Context, t *testing.T, c *remoting.Client, ns *remoting.NameServer, topic string, want func(string) bool, n int) map[string]*received {
	t.Helper()
	if s.b.GRPCEndpoint != "" {
		return s.readGRPC(ctx, t, topic, want, n)
	}
	return s.readPull(ctx, t, c, ns, topic, want, n)
}

// readPull pulls every queue of topic from its first offset, as GroupRead,
// until n wanted messages have come.
func (s *suite) readPull(ctx context.Context, t *testing.T, c *remoting.Client, ns *remoting.NameServer, topic string, want func(string) bool, n int) map[string]*received {
	t.Helper()
	r, err := ns.Route(ctx, topic)
	require.NoError(t, err)
	type queue struct {
		addr string
		id   int32
	}
	offsets := map[queue]int64{}
	for _, qd := range r.Queues {
		addr, ok := r.BrokerAddr(qd.BrokerName)
		if !ok || qd.Perm&remoting.PermRead == 0 {
			continue
		}
		for i := range qd.ReadQueueNums {
			offsets[queue{addr, int32(i)}] = 0
		}
	}
	require.NotEmpty(t, offsets, "topic %s has no readable queue", topic)
	got := map[string]*received{}
	for len(got) < n {
		require.NoError(t, ctx.Err(), "read %d of %d messages of %s", len(got), n, topic)
		progress := false
		for q, off := range offsets {
			res, err := c.Pull(ctx, remoting.PullRequest{Addr: q.addr, Topic: topic, QueueID: q.id, Offset: off, ConsumerGroup: GroupRead})
			if err != nil && ctx.Err() != nil {
				break
			}
			require.NoError(t, err)
			now := time.Now()
			for _, m := range res.Messages {
				id := m.Properties[wire.PropUniqKey]
				if !want(id) || got[id] != nil {
					continue
				}
				var keys []string
				if k := m.Properties[wire.PropKeys]; k != "" {
					keys = strings.Split(k, " ")
				}
				got[id] = &received{ID: id, Tag: m.Properties[wire.PropTags], Keys: keys,
					Group: m.Properties[wire.PropShardingKey], TraceContext: m.Properties[wire.PropTraceContext],
					Properties: m.Properties, Body: m.Body, QueueID: m.QueueID, QueueOffset: m.QueueOffset, At: now}
			}
			if res.NextOffset != off {
				progress = true
			}
			offsets[q] = res.NextOffset
		}
		if !progress && len(got) < n {
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return got
}

// readGRPC receives topic as GroupRead through the gRPC endpoint until n
// messages that want accepts have come, acking everything it receives.
func (s *suite) readGRPC(ctx context.Context, t *testing.T, topic string, want func(string) bool, n int) map[string]*received {
	t.Helper()
	dc, err := driver.New(driver.Config{Type: driver.SimpleConsumer, Group: GroupRead, RequestTimeout: requestTimeout,
		Subscriptions: []driver.Subscription{{Topic: topic}}, Logger: s.b.Logger})
	require.NoError(t, err)
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = dc.Close(cctx)
	}()
	r, err := dc.Route(ctx, s.b.GRPCEndpoint, topic)
	require.NoError(t, err)
	perBroker := map[string]driver.Queue{}
	for _, q := range r.ReadableQueues() {
		perBroker[q.Endpoint] = q
	}
	got := map[string]*received{}
	for len(got) < n {
		require.NoError(t, ctx.Err(), "received %d of %d messages of %s", len(got), n, topic)
		for _, q := range perBroker {
			msgs, err := dc.Receive(ctx, driver.ReceiveRequest{Queue: q, BatchSize: 32,
				InvisibleDuration: 20 * time.Second, LongPollingTimeout: time.Second})
			if err != nil && ctx.Err() == nil && !errors.Is(err, rmqerr.ErrNotFound) {
				require.NoError(t, err)
			}
			now := time.Now()
			for _, m := range msgs {
				if want(m.ID) && got[m.ID] == nil {
					got[m.ID] = &received{ID: m.ID, Tag: m.Tag, Keys: m.Keys, Group: m.Group, TraceContext: m.TraceContext,
						Properties: m.Properties, Body: m.Body, QueueID: m.QueueID, QueueOffset: m.QueueOffset, At: now}
				}
				_, err := dc.Ack(ctx, m.Endpoint, topic, []driver.AckEntry{{MessageID: m.ID, ReceiptHandle: m.ReceiptHandle}})
				require.NoError(t, err)
			}
		}
	}
	return got
}

// A committed half message is delivered, a rolled back one is not, and one
// left unresolved is checked back on the producer's connection and
// delivered once the handler commits it. The handler answers each message
// as the test resolved it, so a check-back that overtakes an
// END_TRANSACTION (a loaded machine, a short check timeout) changes
// nothing.
func (s *suite) testTransactions(t *testing.T) {
	ctx := s.ctx(t, 90*time.Second)
	checked := make(chan *remoting.TransactionCheck, 16)
	var mu sync.Mutex
	resolution := map[string]remoting.Resolution{}
	var c *remoting.Client
	c = remoting.New(remoting.WithSerializeType(s.b.Serialize), remoting.WithLogger(s.b.Logger),
		remoting.WithHandler(func(hctx context.Context, addr string, req *wire.Command) (*wire.Header, []byte) {
			tc, err := remoting.ParseTransactionCheck(addr, req)
			if err != nil {
				t.Errorf("check-back: %v", err)
				return nil, nil
			}
			mu.Lock()
			res, ok := resolution[tc.MessageID]
			mu.Unlock()
			if !ok {
				return nil, nil // not this test's: the broker asks again later
			}
			select {
			case checked <- tc:
			default:
			}
			err = c.EndTransaction(hctx, remoting.EndTransaction{Addr: addr, ProducerGroup: s.group, Topic: tc.Message.Topic,
				MessageID: tc.MessageID, TransactionID: tc.TransactionID, QueueOffset: tc.QueueOffset,
				CommitLogOff: tc.CommitLogOff, Resolution: res, FromCheck: true})
			if err != nil {
				t.Errorf("end transaction from check-back: %v", err)
			}
			return nil, nil
		}))
	t.Cleanup(func() { _ = c.Close() })
	ns, err := remoting.NewNameServer(c, s.b.NameServers)
	require.NoError(t, err)
	ids := remoting.NewIDGenerator()
	q := s.queues(ctx, t, ns, TopicTxn)[0]
	tg := s.target(q)
	require.NoError(t, c.Heartbeat(ctx, q.Addr, "suite-txn@"+ids.Next()[24:], []string{s.group}))
	// send sends a half message. Only the orphan's check-back is answered
	// (and reported on checked): a check of a message this test ends itself
	// can race its oneway END_TRANSACTION on a loaded machine, and is left
	// for the broker to ask again, by when the test's own answer landed.
	send := func(body string, res remoting.Resolution, answerChecks bool) (*remoting.Message, remoting.SendResult) {
		m := &remoting.Message{Topic: TopicTxn, Transaction: true, Tag: "txn", Body: []byte(body), ID: ids.Next()}
		if answerChecks {
			mu.Lock()
			resolution[m.ID] = res
			mu.Unlock()
		}
		r, err := c.Send(ctx, ids, tg, m)
		require.NoError(t, err)
		require.NotEmpty(t, r.TransactionID)
		return m, r
	}
	end := func(m *remoting.Message, r remoting.SendResult, res remoting.Resolution) {
		require.NoError(t, c.EndTransaction(ctx, remoting.EndTransaction{Addr: q.Addr, ProducerGroup: s.group, Topic: TopicTxn,
			MessageID: m.ID, TransactionID: r.TransactionID, QueueOffset: r.QueueOffset, CommitLogOff: r.CommitLogOffset, Resolution: res}))
	}
	rolled, rr := send("rolled back", remoting.Rollback, false)
	end(rolled, rr, remoting.Rollback)
	committed, cr := send("committed", remoting.Commit, false)
	end(committed, cr, remoting.Commit)
	want := map[string]bool{committed.ID: true}
	var orphan *remoting.Message
	if s.b.CheckBackWithin > 0 {
		orphan, _ = send("checked back", remoting.Commit, true)
		want[orphan.ID] = true
	}
	got := s.read(ctx, t, c, ns, TopicTxn, func(id string) bool { return want[id] || id == rolled.ID }, len(want))
	require.NotContains(t, got, rolled.ID, "a rolled back transaction must not be delivered")
	require.Equal(t, []byte("committed"), got[committed.ID].Body)
	if orphan != nil {
		select {
		case tc := <-checked:
			require.Equal(t, orphan.ID, tc.MessageID, "only the orphan's checks are answered")
			require.Equal(t, []byte("checked back"), tc.Message.Body)
			require.Equal(t, TopicTxn, tc.Message.Topic)
		default:
			t.Fatal("the orphan was delivered without a check-back")
		}
		require.Equal(t, []byte("checked back"), got[orphan.ID].Body)
	}
}
