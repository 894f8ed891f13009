package otel_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/twinmq/twinmq/config"
	"github.com/twinmq/twinmq/consumer"
	tmqotel "github.com/twinmq/twinmq/contrib/otel"
	"github.com/twinmq/twinmq/embedded"
	"github.com/twinmq/twinmq/lane"
	"github.com/twinmq/twinmq/producer"
)

const (
	orders    = "orders"
	shipments = "shipments"
	group     = "billing"
	token     = "billing-forward-token"
)

// handledMsg is what a handler saw of an order.
type handledMsg struct {
	by        string
	forwarded bool
	trace     string
}

// TestTraceThroughForwarding follows one trace from a producer's send,
// through the broker, a forwarded delivery (the base consumer receives a
// message of lane "a" and forwards it to the consumer of lane "a") and the
// handler there, to the send the handler makes downstream: every span in
// one trace, each the child of the one before.
func TestTraceThroughForwarding(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	tr := tmqotel.New(tmqotel.WithTracerProvider(tp))

	env, err := embedded.Start(ctx, embedded.Options{
		ClusterNames:   []string{"dc1", "dc2"},
		Topics:         []embedded.Topic{{Name: orders, Queues: 2}, {Name: shipments, Queues: 2}},
		MinLongPolling: 100 * time.Millisecond,
	})
	require.NoError(t, err)
	defer func() { _ = env.Close(context.Background()) }()

	cfg := config.Default()
	cfg.Topics = map[string]config.Topic{orders: env.TopicConfig(orders), shipments: env.TopicConfig(shipments)}
	cfg.Consumers = map[string]config.Consumer{group: {Concurrency: 4, MaxAttempts: 5, Mode: config.ModeDirect}}
	reg := lane.NewMemoryRegistry(lane.MemoryOptions{})
	defer reg.Close()

	p, err := producer.New(ctx, producer.WithConfig(cfg), producer.WithHooks(tr))
	require.NoError(t, err)
	defer func() { _ = p.Close(context.Background()) }()

	var (
		mu      sync.Mutex
		handled = map[string]handledMsg{} // by message id
	)
	handler := func(name string) consumer.Handler {
		return func(ctx context.Context, m *consumer.Message) error {
			// The service's own work: a shipment for the order, sent
			// with the handler's ctx.
			if _, err := p.Send(ctx, &producer.Message{Topic: shipments, Body: m.Body}); err != nil {
				return err
			}
			mu.Lock()
			handled[m.ID] = handledMsg{by: name, forwarded: m.Forwarded, trace: m.TraceContext}
			mu.Unlock()
			return nil
		}
	}
	for _, ln := range []string{lane.Base, "a"} {
		c, err := consumer.New(ctx, group, orders, handler("lane "+ln),
			consumer.WithConfig(cfg), consumer.WithLane(ln), consumer.WithLaneRegistry(reg),
			consumer.WithForwardToken(token), consumer.WithLongPolling(time.Second),
			consumer.WithHooks(tr))
		require.NoError(t, err)
		defer func() { _ = c.Close(context.Background()) }()
	}
	require.Eventually(t, func() bool {
		lanes, err := reg.Lanes(ctx, group)
		return err == nil && len(lanes) == 2
	}, 10*time.Second, 10*time.Millisecond, "both consumers registered")

	// Both consumers receive from the brokers, so a message of lane "a"
	// is forwarded only when the base consumer got it: send, one at a
	// time, each under a root span of its own (the inbound request of a
	// service), until one was.
	var (
		root trace.SpanContext
		id   string
		got  handledMsg
	)
	for i := 0; i < 60 && id == ""; i++ {
		rctx, rootSpan := tp.Tracer("test").Start(lane.WithLane(ctx, "a"), fmt.Sprintf("request %d", i))
		res, err := p.Send(rctx, &producer.Message{Topic: orders, Body: []byte(fmt.Sprintf("order-%d", i)),
			Tag: "paid", Keys: []string{fmt.Sprintf("k%d", i)}})
		rootSpan.End()
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			mu.Lock()
			defer mu.Unlock()
			_, ok := handled[res.MessageID]
			return ok
		}, 30*time.Second, 5*time.Millisecond, "order %d handled", i)
		mu.Lock()
		h := handled[res.MessageID]
		mu.Unlock()
		require.Equal(t, "lane a", h.by, "a message of lane a is handled by the consumer of lane a")
		if h.forwarded {
			root, id, got = rootSpan.SpanContext(), res.MessageID, h
		}
	}
	require.NotEmpty(t, id, "no message of 60 was forwarded")

	// The process span ends when the handler returned, just after it
	// recorded the message: wait for it.
	var spans tracetest.SpanStubs
	require.Eventually(t, func() bool {
		spans = exp.GetSpans()
		return find(spans, "process "+orders, id) != nil
	}, 10*time.Second, 5*time.Millisecond, "process span of the forwarded message")

	send := find(spans, "send "+orders, id)
	require.NotNil(t, send, "send span of the message")
	process := find(spans, "process "+orders, id)
	var downstream *tracetest.SpanStub
	for i := range spans {
		s := &spans[i]
		if s.Name == "send "+shipments && s.Parent.SpanID() == process.SpanContext.SpanID() {
			downstream = s
		}
	}
	require.NotNil(t, downstream, "the handler's send is a child of the process span")

	// One trace, parent links from the request to the downstream send.
	traceID := root.TraceID()
	for _, s := range []*tracetest.SpanStub{send, process, downstream} {
		assert.Equal(t, traceID, s.SpanContext.TraceID(), "span %q in the request's trace", s.Name)
	}
	assert.Equal(t, root.SpanID(), send.Parent.SpanID(), "send is a child of the request")
	assert.Equal(t, send.SpanContext.SpanID(), process.Parent.SpanID(), "process is a child of the send")
	assert.True(t, process.Parent.IsRemote(), "process's parent came in the message")
	require.Len(t, got.trace, 55, "the forwarded message carries a W3C traceparent")
	assert.Equal(t, send.SpanContext.SpanID().String(), got.trace[36:52],
		"the message carries the send span in its W3C traceparent (00-trace-span-flags)")

	// Kinds and the semantic conventions' attributes.
	assert.Equal(t, trace.SpanKindProducer, send.SpanKind)
	assert.Equal(t, trace.SpanKindConsumer, process.SpanKind)
	assert.Equal(t, trace.SpanKindProducer, downstream.SpanKind)
	assertAttrs(t, send, map[string]any{
		"messaging.system": "rocketmq", "messaging.operation.type": "send", "messaging.destination.name": orders,
		"messaging.message.id": id, "messaging.rocketmq.message.tag": "paid",
		"messaging.rocketmq.message.type": "normal", "twinmq.lane": "a",
	})
	assertAttrs(t, process, map[string]any{
		"messaging.system": "rocketmq", "messaging.operation.type": "process", "messaging.destination.name": orders,
		"messaging.message.id": id, "messaging.consumer.group.name": group, "twinmq.forwarded": true,
		"twinmq.lane": "a",
	})
	assertAttrs(t, downstream, map[string]any{
		"messaging.destination.name": shipments, "twinmq.lane": "a",
	})

	// The base consumer's receive span is a root of its own, linked to
	// the message's send span.
	var linked bool
	for _, s := range spans {
		if s.Name != "receive "+orders {
			continue
		}
		assert.Equal(t, trace.SpanKindConsumer, s.SpanKind)
		assert.False(t, s.Parent.IsValid(), "a receive span has no parent")
		for _, l := range s.Links {
			if l.SpanContext.SpanID() == send.SpanContext.SpanID() {
				linked = true
				assertAttrs(t, &s, map[string]any{"messaging.operation.type": "receive", "messaging.consumer.group.name": group})
			}
		}
	}
	assert.True(t, linked, "a receive span links to the send span")
}

// find returns the span named name whose messaging.message.id is id.
func find(spans tracetest.SpanStubs, name, id string) *tracetest.SpanStub {
	for i := range spans {
		if spans[i].Name != name {
			continue
		}
		for _, a := range spans[i].Attributes {
			if a.Key == "messaging.message.id" && a.Value.AsString() == id {
				return &spans[i]
			}
		}
	}
	return nil
}

func assertAttrs(t *testing.T, s *tracetest.SpanStub, want map[string]any) {
	t.Helper()
	got := map[attribute.Key]attribute.Value{}
	for _, a := range s.Attributes {
		got[a.Key] = a.Value
	}
	for k, v := range want {
		a, ok := got[attribute.Key(k)]
		if assert.True(t, ok, "span %q has %s", s.Name, k) {
			assert.Equal(t, v, a.AsInterface(), "span %q: %s", s.Name, k)
		}
	}
}
