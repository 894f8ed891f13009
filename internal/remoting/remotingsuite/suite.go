// Package remotingsuite is the wire suite of the remoting driver
// (internal/remoting): one set of cases, written against the driver and the
// name server only, meant to run unchanged against the embedded broker (in
// `go test`, see embedded_test.go) and against real RocketMQ name servers
// and brokers. It covers route lookup through the name server (the fastjson
// route data included), heartbeat and unregister, a single send and a
// batch send with each message's id and queue offset, refusals mapped to
// the rmqerr classes, and, when the backend also has a gRPC endpoint over
// the same store, a consumer that reads the sent messages back with their
// tag, keys, message group, trace context and user properties, and the
// outcome of transactions: committed, rolled back, and resolved by the
// broker's check-back through the client's handler.
package remotingsuite

import (
	"context"
	"errors"
	"fmt"
	"sort"
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
	// CheckBackWithin bounds how long the broker takes to check an
	// unresolved half message back; 0 skips the check-back case.
	CheckBackWithin time.Duration
	Logger          *zap.Logger
}

// Topics and groups a backend must provide: TopicNormal and TopicBatch of
// type NORMAL, TopicFIFO of type FIFO, TopicTxn of type TRANSACTION;
// GroupRead a consumer group.
const (
	TopicNormal   = "remoting_normal"
	TopicBatch    = "remoting_batch"
	TopicFIFO     = "remoting_fifo"
	TopicTxn      = "remoting_txn"
	GroupRead     = "remoting_read_group"
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
	s := &suite{b: b}
	t.Run("Route", s.testRoute)
	t.Run("HeartbeatUnregister", s.testHeartbeat)
	t.Run("SendSingle", s.testSendSingle)
	t.Run("SendBatch", s.testSendBatch)
	t.Run("Refusals", s.testRefusals)
	if b.GRPCEndpoint != "" {
		t.Run("ConsumeWhatWasSent", s.testConsume)
		t.Run("Transactions", s.testTransactions)
	}
}

type suite struct{ b Backend }

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

func target(q remoting.WriteQueue) remoting.SendTarget {
	return remoting.SendTarget{Addr: q.Addr, BrokerName: q.BrokerName, QueueID: q.QueueID, ProducerGroup: ProducerGroup}
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
		require.NoError(t, c.Heartbeat(ctx, q.Addr, "suite-client@1", []string{ProducerGroup}))
		require.NoError(t, c.Unregister(ctx, q.Addr, "suite-client@1", ProducerGroup))
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
		r, err := c.Send(ctx, ids, target(q), m)
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
	res, err := c.SendBatch(ctx, ids, target(q), msgs)
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
	again, err := c.SendBatch(ctx, ids, target(q), []*remoting.Message{{Topic: TopicBatch, Body: []byte("after")}})
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
	tg := target(q)
	_, err := c.Send(ctx, ids, tg, &remoting.Message{Topic: topicMissing, Body: []byte("x")})
	require.ErrorIs(t, err, rmqerr.ErrNotFound)
	var re *remoting.ResponseError
	require.ErrorAs(t, err, &re)
	require.Equal(t, wire.RespTopicNotExist, re.Code)
	// A tag the broker refuses.
	_, err = c.Send(ctx, ids, tg, &remoting.Message{Topic: TopicNormal, Tag: "a|b", Body: []byte("x")})
	require.ErrorIs(t, err, rmqerr.ErrBadRequest)
	require.ErrorAs(t, err, &re)
	require.Equal(t, wire.RespMessageIllegal, re.Code)
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
	_, err := c.Send(ctx, ids, target(q), single)
	require.NoError(t, err)
	sent[single.ID] = single
	var batch []*remoting.Message
	for i := range 3 {
		batch = append(batch, &remoting.Message{Topic: TopicNormal, Tag: "tagB", Keys: []string{fmt.Sprintf("b%d", i)}, Properties: props, Body: []byte(fmt.Sprintf("b %d", i))})
	}
	_, err = c.SendBatch(ctx, ids, target(q), batch)
	require.NoError(t, err)
	for _, m := range batch {
		sent[m.ID] = m
	}
	fifo := &remoting.Message{Topic: TopicFIFO, Group: "order-42", Body: []byte("fifo")}
	fq := s.queues(ctx, t, ns, TopicFIFO)[0]
	_, err = c.Send(ctx, ids, target(fq), fifo)
	require.NoError(t, err)

	got := s.read(ctx, t, TopicNormal, func(id string) bool { _, ok := sent[id]; return ok }, len(sent))
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
	}
	gotFIFO := s.read(ctx, t, TopicFIFO, func(id string) bool { return id == fifo.ID }, 1)
	require.Equal(t, "order-42", gotFIFO[fifo.ID].Group)
}

// read receives topic as GroupRead through the gRPC endpoint until n
// messages that want accepts have come, acking everything it receives.
func (s *suite) read(ctx context.Context, t *testing.T, topic string, want func(string) bool, n int) map[string]*driver.ReceivedMessage {
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
	got := map[string]*driver.ReceivedMessage{}
	for len(got) < n {
		require.NoError(t, ctx.Err(), "received %d of %d messages of %s", len(got), n, topic)
		for _, q := range perBroker {
			msgs, err := dc.Receive(ctx, driver.ReceiveRequest{Queue: q, BatchSize: 32,
				InvisibleDuration: 20 * time.Second, LongPollingTimeout: time.Second})
			if err != nil && ctx.Err() == nil && !errors.Is(err, rmqerr.ErrNotFound) {
				require.NoError(t, err)
			}
			for _, m := range msgs {
				if want(m.ID) {
					got[m.ID] = m
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
// delivered once the handler commits it.
func (s *suite) testTransactions(t *testing.T) {
	ctx := s.ctx(t, 90*time.Second)
	checked := make(chan *remoting.TransactionCheck, 4)
	var c *remoting.Client
	c = remoting.New(remoting.WithSerializeType(s.b.Serialize), remoting.WithLogger(s.b.Logger),
		remoting.WithHandler(func(hctx context.Context, addr string, req *wire.Command) (*wire.Header, []byte) {
			tc, err := remoting.ParseTransactionCheck(addr, req)
			if err != nil {
				t.Errorf("check-back: %v", err)
				return nil, nil
			}
			checked <- tc
			err = c.EndTransaction(hctx, remoting.EndTransaction{Addr: addr, ProducerGroup: ProducerGroup, Topic: tc.Message.Topic,
				MessageID: tc.MessageID, TransactionID: tc.TransactionID, QueueOffset: tc.QueueOffset,
				CommitLogOff: tc.CommitLogOff, Resolution: remoting.Commit, FromCheck: true})
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
	tg := target(q)
	require.NoError(t, c.Heartbeat(ctx, q.Addr, "suite-txn@1", []string{ProducerGroup}))
	send := func(body string) (*remoting.Message, remoting.SendResult) {
		m := &remoting.Message{Topic: TopicTxn, Transaction: true, Tag: "txn", Body: []byte(body)}
		r, err := c.Send(ctx, ids, tg, m)
		require.NoError(t, err)
		require.NotEmpty(t, r.TransactionID)
		return m, r
	}
	end := func(m *remoting.Message, r remoting.SendResult, res remoting.Resolution) {
		require.NoError(t, c.EndTransaction(ctx, remoting.EndTransaction{Addr: q.Addr, ProducerGroup: ProducerGroup, Topic: TopicTxn,
			MessageID: m.ID, TransactionID: r.TransactionID, QueueOffset: r.QueueOffset, Resolution: res}))
	}
	rolled, rr := send("rolled back")
	end(rolled, rr, remoting.Rollback)
	committed, cr := send("committed")
	end(committed, cr, remoting.Commit)
	want := map[string]bool{committed.ID: true}
	var orphan *remoting.Message
	if s.b.CheckBackWithin > 0 {
		orphan, _ = send("checked back")
		want[orphan.ID] = true
	}
	got := s.read(ctx, t, TopicTxn, func(id string) bool { return want[id] || id == rolled.ID }, len(want))
	require.NotContains(t, got, rolled.ID, "a rolled back transaction must not be delivered")
	require.Equal(t, []byte("committed"), got[committed.ID].Body)
	if orphan != nil {
		select {
		case tc := <-checked:
			require.Equal(t, orphan.ID, tc.MessageID)
			require.Equal(t, []byte("checked back"), tc.Message.Body)
			require.Equal(t, TopicTxn, tc.Message.Topic)
		default:
			t.Fatal("the orphan was delivered without a check-back")
		}
		require.Equal(t, []byte("checked back"), got[orphan.ID].Body)
	}
}
