package consumer

import (
	"context"
	"time"
)

// Hook observes a consumer's work, for tracing and the like (the
// OpenTelemetry module, contrib/otel, is one). A Hook is any value that
// implements one or more of ReceiveHook and HandleHook; WithHooks ignores
// the interfaces a value does not implement. Hooks are called on the
// consumer's goroutines, synchronously: they must be quick and must not
// block. The core of the SDK has no tracing of its own, so it imports no
// tracing library; a hook brings one.
type Hook any

// ReceiveHook is told of every receive call that brought messages from a
// broker, before any of their handlers runs.
type ReceiveHook interface {
	OnReceive(ctx context.Context, r *Receive)
}

// Receive is one receive call's answer. The hook may read it, and the
// Messages in it, only until OnReceive returns, and must not change them:
// they are the handlers' messages.
type Receive struct {
	// Group is the consumer group.
	Group string
	// Topic is the logic topic, PhysicalTopic the RocketMQ topic read.
	Topic         string
	PhysicalTopic string
	// Cluster and Endpoint are where the messages came from.
	Cluster  string
	Endpoint string
	// Start is when the receive call was made (a long poll may wait in
	// it); the answer arrived just before OnReceive.
	Start time.Time
	// Messages are the messages received, in order.
	Messages []*Message
}

// HandleHook is told of every run of the handler: a message received here,
// a message another consumer of the group forwarded here (m.Forwarded), a
// redelivery, or a broker's request to verify a message.
type HandleHook interface {
	// OnHandle is called before the handler runs. The context it returns
	// is the one the handler gets (return ctx to leave it as it is), so a
	// tracing hook puts the handling span in it and what the handler sends
	// continues the trace. done is called once, after the handler
	// returned, with its error (a panic is an error wrapping
	// ErrHandlerPanic); it may be nil.
	OnHandle(ctx context.Context, h *Handling) (hctx context.Context, done func(err error))
}

// Handling is one run of the handler. The hook must not change Message.
type Handling struct {
	// Group is the consumer group.
	Group string
	// Lane is the lane this consumer serves ("" = base).
	Lane string
	// Message is the message the handler gets. Its TraceContext is the
	// producer's trace context, as received, forwarded ones included.
	Message *Message
}

// WithHooks adds hooks, called in the order given (and, for the end of a
// handling, in the reverse order). The option may be given more than once.
func WithHooks(hooks ...Hook) Option {
	return func(o *options) {
		for _, h := range hooks {
			if r, ok := h.(ReceiveHook); ok {
				o.hooks.receive = append(o.hooks.receive, r)
			}
			if x, ok := h.(HandleHook); ok {
				o.hooks.handle = append(o.hooks.handle, x)
			}
		}
	}
}

// hooks are the hooks of WithHooks, sorted by interface.
type hooks struct {
	receive []ReceiveHook
	handle  []HandleHook
}

// received tells the receive hooks of a batch dispatch took over. deadline
// is the one dispatch got: the receive's start plus the invisible duration.
func (c *Consumer) received(bl *brokerLoop, ds []*delivery, deadline time.Time) {
	if len(c.opts.hooks.receive) == 0 {
		return
	}
	r := &Receive{
		Group:    c.group,
		Topic:    c.topic,
		Cluster:  bl.cr.name,
		Endpoint: bl.endpoint,
		Start:    deadline.Add(-c.opts.invisible),
		Messages: make([]*Message, len(ds)),
	}
	for i, d := range ds {
		r.Messages[i] = d.msg
		r.PhysicalTopic = d.msg.PhysicalTopic
	}
	for _, h := range c.opts.hooks.receive {
		h.OnReceive(bl.cr.ctx, r)
	}
}

// handling runs the handle hooks' starts and returns the handler's context
// and a function that runs their ends (nil when there are no hooks).
func (c *Consumer) handling(ctx context.Context, m *Message) (context.Context, func(error)) {
	if len(c.opts.hooks.handle) == 0 {
		return ctx, nil
	}
	h := &Handling{Group: c.group, Lane: c.live.Load().lane, Message: m}
	dones := make([]func(error), 0, len(c.opts.hooks.handle))
	for _, x := range c.opts.hooks.handle {
		var done func(error)
		ctx, done = x.OnHandle(ctx, h)
		if done != nil {
			dones = append(dones, done)
		}
	}
	return ctx, func(err error) {
		for i := len(dones) - 1; i >= 0; i-- {
			dones[i](err)
		}
	}
}
