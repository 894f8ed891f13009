package producer

import (
	"context"
	"fmt"
	"maps"
)

// Hook observes a producer's sends, for tracing and the like (the
// OpenTelemetry module, contrib/otel, is one). A Hook is any value that
// implements SendHook; WithHooks ignores values that do not. Hooks are
// called on the goroutines of the sends, synchronously: they must be quick
// and must not block. The core of the SDK has no tracing of its own, so it
// imports no tracing library; a hook brings one.
type Hook any

// SendHook is told of every send that passed validation (Send, SendAsync,
// SendBatch and SendTransactional, one call per message), before the
// message is buffered or sent, and may stamp the message (see Send).
type SendHook interface {
	// OnSend is called when the send starts, with the sender's ctx. done
	// is called once with the send's outcome, as the sender gets it
	// (after all its attempts); it may be nil.
	OnSend(ctx context.Context, s *Send) (done func(r *SendResult, err error))
}

// Send is a send starting. The hook may read it, set TraceContext and call
// SetProperty, only until OnSend returns; it must not change Message.
type Send struct {
	// Message is the message as the caller gave it.
	Message *Message
	// MessageID is the id the message is sent with.
	MessageID string
	// Lane is the lane stamped on it ("" = base).
	Lane string
	// Transactional is set for SendTransactional.
	Transactional bool
	// TraceContext goes into RocketMQ's trace-context system property of
	// the message (where RocketMQ 5 clients carry a W3C traceparent), not
	// into its user properties. Consumers read it back as
	// consumer.Message.TraceContext.
	TraceContext string

	pd *pending
}

// Property returns a user property of the message as it will be sent
// (the lane included).
func (s *Send) Property(key string) (string, bool) {
	v, ok := s.pd.props[key]
	return v, ok
}

// SetProperty adds (or replaces) a user property of the message as sent;
// the caller's Message is left as it is. Keys reserved by RocketMQ or this
// SDK (IsReservedPropertyKey) are refused with ErrReservedProperty.
func (s *Send) SetProperty(key, value string) error {
	if IsReservedPropertyKey(key) {
		return fmt.Errorf("hook property %q: %w", key, ErrReservedProperty)
	}
	pd := s.pd
	if !pd.ownProps {
		pd.props = maps.Clone(pd.props)
		if pd.props == nil {
			pd.props = map[string]string{}
		}
		pd.ownProps = true
	}
	if old, ok := pd.props[key]; ok {
		pd.size -= len(key) + len(old)
	}
	pd.props[key] = value
	pd.size += len(key) + len(value)
	return nil
}

// WithHooks adds hooks, called in the order given at the start of a send
// (and in the reverse order at its end). The option may be given more than
// once.
func WithHooks(hooks ...Hook) Option {
	return func(o *options) {
		for _, h := range hooks {
			if s, ok := h.(SendHook); ok {
				o.sendHooks = append(o.sendHooks, s)
			}
		}
	}
}

// sendStarts runs the send hooks' starts for a prepared message and returns
// a function that runs their ends, or nil when there are no hooks.
func (p *Producer) sendStarts(ctx context.Context, pd *pending) func(*SendResult, error) {
	if len(p.opts.sendHooks) == 0 {
		return nil
	}
	s := &Send{Message: pd.msg, MessageID: pd.id, Lane: pd.lane, Transactional: pd.transactional, pd: pd}
	dones := make([]func(*SendResult, error), 0, len(p.opts.sendHooks))
	for _, h := range p.opts.sendHooks {
		if done := h.OnSend(ctx, s); done != nil {
			dones = append(dones, done)
		}
	}
	if s.TraceContext != "" {
		pd.size += len(s.TraceContext)
	}
	pd.trace = s.TraceContext
	s.pd = nil // the hooks may keep s; pd is recycled after the send
	return func(r *SendResult, err error) {
		for i := len(dones) - 1; i >= 0; i-- {
			dones[i](r, err)
		}
	}
}
