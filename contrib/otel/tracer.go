package otel

import (
	"context"
	"net"
	"strconv"
	"time"

	otelglobal "go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/twinmq/twinmq/consumer"
	"github.com/twinmq/twinmq/producer"
)

// ScopeName is the instrumentation scope of the spans (the tracer's name).
const ScopeName = "github.com/twinmq/twinmq/contrib/otel"

// Attributes of this SDK beside the semantic conventions' own.
const (
	// AttrLane is the message's lane (absent for the base lane).
	AttrLane = attribute.Key("twinmq.lane")
	// AttrCluster is the cluster a message was stored in or came from.
	AttrCluster = attribute.Key("twinmq.cluster")
	// AttrPhysicalTopic is the RocketMQ topic behind the logic topic.
	AttrPhysicalTopic = attribute.Key("twinmq.physical_topic")
	// AttrForwarded marks a handling of a message that another consumer
	// of the group received and forwarded to this consumer's lane.
	AttrForwarded = attribute.Key("twinmq.forwarded")
	// AttrDeliveryAttempt is the delivery attempt, 1 on the first.
	AttrDeliveryAttempt = attribute.Key("twinmq.delivery_attempt")
	// AttrAttempts is the number of send attempts a send took.
	AttrAttempts = attribute.Key("twinmq.send_attempts")
)

// traceparent is the W3C Trace Context header that RocketMQ 5 clients
// carry in a message's trace-context system property.
const traceparent = "traceparent"

// Tracer makes the spans of the producers and consumers it is given to as
// a hook (producer.WithHooks, consumer.WithHooks). It is safe for
// concurrent use, and one Tracer may serve any number of them.
type Tracer struct {
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
}

// Option configures New.
type Option func(*Tracer)

// WithTracerProvider sets the provider of the tracer. Without it the
// global provider (otel.GetTracerProvider, a no-op until the service sets
// one) serves, as OpenTelemetry asks of instrumentation libraries.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(t *Tracer) { t.tracer = tp.Tracer(ScopeName) }
}

// WithPropagator replaces the propagator, W3C Trace Context by default.
// Its traceparent field goes into the message's trace-context property
// (so it should include propagation.TraceContext for RocketMQ's other
// clients to read the trace); its other fields (tracestate, baggage)
// travel as user properties of their names.
func WithPropagator(p propagation.TextMapPropagator) Option {
	return func(t *Tracer) { t.prop = p }
}

// New returns a Tracer.
func New(opts ...Option) *Tracer {
	t := &Tracer{prop: propagation.TraceContext{}}
	for _, o := range opts {
		o(t)
	}
	if t.tracer == nil {
		t.tracer = globalTracer()
	}
	return t
}

var (
	_ producer.SendHook    = (*Tracer)(nil)
	_ consumer.ReceiveHook = (*Tracer)(nil)
	_ consumer.HandleHook  = (*Tracer)(nil)
)

// OnSend starts the span of a send (kind producer, a child of ctx's span)
// and stamps its context on the message; the span ends with the send's
// outcome, after all its attempts.
func (t *Tracer) OnSend(ctx context.Context, s *producer.Send) func(*producer.SendResult, error) {
	m := s.Message
	attrs := []attribute.KeyValue{
		semconv.MessagingSystemRocketMQ,
		semconv.MessagingOperationTypeSend,
		semconv.MessagingOperationName("send"),
		semconv.MessagingDestinationName(m.Topic),
		semconv.MessagingMessageID(s.MessageID),
		semconv.MessagingMessageBodySize(len(m.Body)),
		messageType(s),
	}
	attrs = appendMessageAttrs(attrs, m.Tag, m.Keys, m.MessageGroup, s.Lane)
	if !m.DeliveryTime.IsZero() {
		attrs = append(attrs, semconv.MessagingRocketMQMessageDeliveryTimestamp(int(m.DeliveryTime.UnixMilli())))
	}
	ctx, span := t.tracer.Start(ctx, "send "+m.Topic,
		trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attrs...))
	t.prop.Inject(ctx, sendCarrier{s})
	return func(r *producer.SendResult, err error) {
		if r != nil {
			span.SetAttributes(
				AttrCluster.String(r.Cluster),
				AttrPhysicalTopic.String(r.PhysicalTopic),
				AttrAttempts.Int(r.Attempts),
			)
			span.SetAttributes(serverAttrs(r.Endpoint)...)
		}
		endWith(span, err)
	}
}

// OnReceive records a span for one receive call that brought messages
// (kind consumer, from the call to its answer), linked to the producers'
// span of each message. It has no parent: a receive serves many traces.
func (t *Tracer) OnReceive(ctx context.Context, r *consumer.Receive) {
	links := make([]trace.Link, 0, len(r.Messages))
	for _, m := range r.Messages {
		sc := trace.SpanContextFromContext(t.prop.Extract(context.Background(), messageCarrier{m}))
		if sc.IsValid() {
			links = append(links, trace.Link{SpanContext: sc,
				Attributes: []attribute.KeyValue{semconv.MessagingMessageID(m.ID)}})
		}
	}
	attrs := []attribute.KeyValue{
		semconv.MessagingSystemRocketMQ,
		semconv.MessagingOperationTypeReceive,
		semconv.MessagingOperationName("receive"),
		semconv.MessagingDestinationName(r.Topic),
		semconv.MessagingConsumerGroupName(r.Group),
		semconv.MessagingBatchMessageCount(len(r.Messages)),
		AttrCluster.String(r.Cluster),
		AttrPhysicalTopic.String(r.PhysicalTopic),
	}
	attrs = append(attrs, serverAttrs(r.Endpoint)...)
	_, span := t.tracer.Start(ctx, "receive "+r.Topic,
		trace.WithNewRoot(), trace.WithSpanKind(trace.SpanKindConsumer), trace.WithTimestamp(r.Start),
		trace.WithLinks(links...), trace.WithAttributes(attrs...))
	span.End(trace.WithTimestamp(time.Now()))
}

// OnHandle starts the span of one handling (kind consumer, operation
// process), a child of the producer's span the message carries (else of
// ctx's span), and gives the handler a ctx holding it, so that what the
// handler sends continues the trace. The span ends with the handler.
func (t *Tracer) OnHandle(ctx context.Context, h *consumer.Handling) (context.Context, func(error)) {
	m := h.Message
	ctx = t.prop.Extract(ctx, messageCarrier{m})
	attrs := []attribute.KeyValue{
		semconv.MessagingSystemRocketMQ,
		semconv.MessagingOperationTypeProcess,
		semconv.MessagingOperationName("process"),
		semconv.MessagingDestinationName(m.Topic),
		semconv.MessagingConsumerGroupName(h.Group),
		semconv.MessagingMessageID(m.ID),
		semconv.MessagingMessageBodySize(len(m.Body)),
		semconv.MessagingRocketMQConsumptionModelClustering,
		AttrForwarded.Bool(m.Forwarded),
		AttrDeliveryAttempt.Int(m.DeliveryAttempt),
	}
	attrs = appendMessageAttrs(attrs, m.Tag, m.Keys, m.MessageGroup, m.Lane)
	if m.Cluster != "" {
		attrs = append(attrs, AttrCluster.String(m.Cluster))
	}
	if m.PhysicalTopic != "" {
		attrs = append(attrs, AttrPhysicalTopic.String(m.PhysicalTopic))
	}
	ctx, span := t.tracer.Start(ctx, "process "+m.Topic,
		trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attrs...))
	return ctx, func(err error) { endWith(span, err) }
}

// appendMessageAttrs adds the RocketMQ attributes that are set.
func appendMessageAttrs(attrs []attribute.KeyValue, tag string, keys []string, group, lane string) []attribute.KeyValue {
	if tag != "" {
		attrs = append(attrs, semconv.MessagingRocketMQMessageTag(tag))
	}
	if len(keys) > 0 {
		attrs = append(attrs, semconv.MessagingRocketMQMessageKeys(keys...))
	}
	if group != "" {
		attrs = append(attrs, semconv.MessagingRocketMQMessageGroup(group))
	}
	if lane != "" {
		attrs = append(attrs, AttrLane.String(lane))
	}
	return attrs
}

// messageType is the RocketMQ message type a message is sent as, with the
// protocol's precedence: transaction, delay, FIFO, normal.
func messageType(s *producer.Send) attribute.KeyValue {
	m := s.Message
	switch {
	case s.Transactional:
		return semconv.MessagingRocketMQMessageTypeTransaction
	case !m.DeliveryTime.IsZero():
		return semconv.MessagingRocketMQMessageTypeDelay
	case m.MessageGroup != "":
		return semconv.MessagingRocketMQMessageTypeFifo
	}
	return semconv.MessagingRocketMQMessageTypeNormal
}

// serverAttrs are server.address and server.port of a host:port endpoint.
func serverAttrs(endpoint string) []attribute.KeyValue {
	if endpoint == "" {
		return nil
	}
	host, port, err := net.SplitHostPort(endpoint)
	if err != nil {
		return []attribute.KeyValue{semconv.ServerAddress(endpoint)}
	}
	attrs := []attribute.KeyValue{semconv.ServerAddress(host)}
	if n, err := strconv.Atoi(port); err == nil {
		attrs = append(attrs, semconv.ServerPort(n))
	}
	return attrs
}

// endWith ends span, marking it failed when err is not nil.
func endWith(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		span.SetAttributes(semconv.ErrorTypeOther)
	}
	span.End()
}

// sendCarrier writes a propagator's fields into a message being sent: the
// traceparent into RocketMQ's trace-context property, the others as user
// properties.
type sendCarrier struct{ s *producer.Send }

func (c sendCarrier) Get(key string) string {
	if key == traceparent {
		return c.s.TraceContext
	}
	v, _ := c.s.Property(key)
	return v
}

func (c sendCarrier) Set(key, value string) {
	if key == traceparent {
		c.s.TraceContext = value
		return
	}
	// A propagator's field named like a reserved key cannot travel; the
	// trace itself (traceparent) is never refused.
	_ = c.s.SetProperty(key, value)
}

func (c sendCarrier) Keys() []string { return []string{traceparent} }

// messageCarrier reads a propagator's fields from a delivered message.
type messageCarrier struct{ m *consumer.Message }

func (c messageCarrier) Get(key string) string {
	if key == traceparent {
		return c.m.TraceContext
	}
	return c.m.Properties[key]
}

func (c messageCarrier) Set(string, string) {}

func (c messageCarrier) Keys() []string {
	keys := make([]string, 0, len(c.m.Properties)+1)
	keys = append(keys, traceparent)
	for k := range c.m.Properties {
		keys = append(keys, k)
	}
	return keys
}

// globalTracer is the tracer of the global provider.
func globalTracer() trace.Tracer { return otelglobal.GetTracerProvider().Tracer(ScopeName) }
