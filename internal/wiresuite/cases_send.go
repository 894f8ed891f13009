package wiresuite

import (
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/twinmq/twinmq/internal/driver"
)

// testRoute: a topic's route lists writable and readable master queues of
// the topic, each with a usable endpoint and a broker name, accepting
// NORMAL messages.
func (s *suite) testRoute(t *testing.T) {
	ctx := s.ctx(t, time.Minute)
	p := s.producer(t, TopicSend)
	r := s.route(ctx, t, p, TopicSend)
	require.Equal(t, TopicSend, r.Topic)
	require.Equal(t, s.b.Endpoint, r.AccessPoint)
	require.NotEmpty(t, r.Endpoints())
	for _, q := range append(r.WritableQueues(), r.ReadableQueues()...) {
		require.Equal(t, TopicSend, q.Topic)
		require.NotEmpty(t, q.Broker, "queue %d has no broker name", q.ID)
		require.GreaterOrEqual(t, q.ID, int32(0))
		host, port, err := net.SplitHostPort(q.Endpoint)
		require.NoError(t, err, "queue %d endpoint %q", q.ID, q.Endpoint)
		require.NotEmpty(t, host)
		n, err := strconv.Atoi(port)
		require.NoError(t, err)
		require.Positive(t, n)
		require.True(t, q.Accepts(driver.TypeNormal), "queue %d of a NORMAL topic must accept NORMAL messages", q.ID)
	}
	// Every endpoint of the route answers for the same topic.
	for _, ep := range r.Endpoints() {
		again, err := p.QueryRoute(ctx, ep, TopicSend)
		require.NoError(t, err, "route through %s", ep)
		require.NotEmpty(t, again.WritableQueues())
	}
}

// testSendSingle: one message per request, with the caller's id and with a
// driver-generated one.
func (s *suite) testSendSingle(t *testing.T) {
	ctx := s.ctx(t, time.Minute)
	p := s.producer(t, TopicSend)
	id := p.NewMessageID()
	res := s.send(ctx, t, p, TopicSend, &driver.Message{
		ID: id, Tag: "single", Keys: []string{"k-" + id}, Body: []byte("single"),
		Properties: map[string]string{"origin": "wiresuite"},
	})
	require.Equal(t, id, res[0].MessageID)
	require.GreaterOrEqual(t, res[0].Offset, int64(0))

	// Left empty, the id is generated in the official layout.
	r := s.route(ctx, t, p, TopicSend)
	q := r.WritableQueues()[0]
	res2, err := p.Send(ctx, q.Endpoint, []*driver.Message{{Topic: TopicSend, QueueID: driver.AnyQueue, Body: []byte("generated id")}})
	require.NoError(t, err)
	require.Len(t, res2, 1)
	require.NoError(t, res2[0].Err)
	_, err = driver.ParseMessageID(res2[0].MessageID)
	require.NoError(t, err, "generated id %q", res2[0].MessageID)
	require.NotEqual(t, id, res2[0].MessageID)
}

// testSendBatch: a request of several messages gets one result per message
// with the caller's ids and contiguous offsets, and a receive confirms
// them: the batch sits in one queue at exactly those offsets.
func (s *suite) testSendBatch(t *testing.T) {
	t.Parallel()
	ctx := s.ctx(t, 2*time.Minute)
	p := s.producer(t, TopicBatch)
	const n = 5
	msgs := make([]*driver.Message, n)
	for i := range msgs {
		msgs[i] = &driver.Message{Tag: "batch", Body: body("batch", i, 100+i)}
	}
	res := s.send(ctx, t, p, TopicBatch, msgs...)
	for i := range res {
		require.Equal(t, res[0].Offset+int64(i), res[i].Offset, "offsets of a batch are contiguous")
	}

	c := s.consumer(t, GroupBatch, driver.Filter{}, TopicBatch)
	rd := s.reader(ctx, t, c, TopicBatch, driver.Filter{})
	want := ids(msgs)
	got := map[string]delivery{}
	invisible := max(s.b.MinInvisible, 30*time.Second)
	rd.until(ctx, t, invisible, func(d delivery) {
		if _, ok := want[d.ID]; ok {
			got[d.ID] = d
		}
	}, func() bool { return len(got) == n }, func() string { return strconv.Itoa(n-len(got)) + " of the batch not received" })

	first := got[msgs[0].ID]
	for i, m := range msgs {
		d := got[m.ID]
		require.Equal(t, m.Body, d.Body)
		require.Equal(t, first.QueueID, d.QueueID, "a batch lands in one queue")
		require.Equal(t, first.Endpoint, d.Endpoint, "a batch lands on one broker")
		require.Equal(t, res[i].Offset, d.QueueOffset, "message %d is stored at the offset its send result reported", i)
	}
	for _, d := range got {
		rd.ack(ctx, t, d)
	}
}
