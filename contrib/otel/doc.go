// Package otel traces twinmq producers and consumers with OpenTelemetry:
// a span per send, per receive and per handled message, following
// OpenTelemetry's semantic conventions for messaging, with the trace
// context carried in the message the way RocketMQ 5 clients carry it, so
// that a trace goes from a producer to the consumer of the message, across
// lanes and lane forwarding, and on into what the handler sends.
//
//	tr := otel.New(otel.WithTracerProvider(tp))
//	p, err := producer.New(ctx, producer.WithSource(src), producer.WithHooks(tr))
//	c, err := consumer.New(ctx, group, topic, handle, consumer.WithSource(src), consumer.WithHooks(tr))
//
// It is a module of its own, like franz-go's kotel, so that OpenTelemetry
// stays out of the dependency graph of services that do not trace: the
// core SDK imports no tracing library and only calls the hooks it exposes
// (producer.SendHook, consumer.ReceiveHook, consumer.HandleHook), which
// Tracer implements.
//
// # The trace context in the message
//
// RocketMQ 5's protocol has a trace-context field among a message's system
// properties (SystemProperties.trace_context; TRACE_CONTEXT in a broker's
// store), and RocketMQ's Java client, traced by OpenTelemetry's agent,
// writes a W3C traceparent there and reads it back on delivery. This
// package does the same, so a trace continues between twinmq and Java (or
// other RocketMQ 5) services in either direction. A send's span is the
// parent of the message's handlings. Fields of the propagator other than
// traceparent (tracestate, baggage with WithPropagator) travel as user
// properties of their names, since the protocol has no place for them.
//
// The forwarding of lane routing carries the trace context along with the
// message, so a message handled by the consumer of its lane, whichever
// consumer of the group received it, continues its producer's trace.
//
// # Spans
//
//   - "send <topic>", kind producer, a child of the span in the sender's
//     ctx: one per message (Send, SendAsync, each message of SendBatch,
//     SendTransactional), from the start of the send to its outcome, over
//     batching, retries and failover; its context is the one stamped on the
//     message. Attributes: messaging.system=rocketmq,
//     messaging.operation.type=send, messaging.destination.name (the logic
//     topic), messaging.message.id, messaging.message.body.size,
//     messaging.rocketmq.message.{type,tag,keys,group,delivery_timestamp}
//     where set, twinmq.lane; at the end twinmq.cluster,
//     twinmq.physical_topic, twinmq.send_attempts and server.address/port
//     of the broker that stored it, or the error.
//   - "receive <topic>", kind consumer, operation receive: one per receive
//     call that brought messages, from the call (a long poll) to its
//     answer. A receive serves many traces, so it is a root, with a link to
//     each message's send span. Attributes: messaging.consumer.group.name,
//     messaging.batch.message_count, the cluster and broker.
//   - "process <topic>", kind consumer, operation process: one per run of
//     the handler (a redelivery runs it again and gets a span again),
//     received here or forwarded here (twinmq.forwarded=true). Its parent
//     is the send span the message carries (else the span in the ctx the
//     handler would get), and the handler's ctx holds it, so what the
//     handler sends is its child. Attributes: messaging.message.id,
//     messaging.consumer.group.name, messaging.rocketmq.consumption_model,
//     messaging.rocketmq.message.{tag,keys,group}, twinmq.lane,
//     twinmq.delivery_attempt, twinmq.cluster; the handler's error marks it
//     failed.
//
// The semantic conventions let a process span either be a child of the
// producer's span or only link to it; a child makes one trace of the whole
// flow, which is what an operator following a request wants, and one
// message per handling makes that unambiguous.
//
// Not traced: acknowledgements and redelivery requests, the forwarding
// call itself (the process span at the target says it was forwarded), and
// the commit or rollback of a transaction.
//
// # Defaults
//
// Without WithTracerProvider the global provider serves (a no-op until the
// service installs one), as OpenTelemetry asks of instrumentation; the
// propagator is W3C Trace Context whatever the global one is, because the
// format in the message is fixed by what RocketMQ's clients read.
package otel
