package producer

import (
	"errors"
	"fmt"
	"strings"

	"github.com/twinmq/twinmq/batch"
	"github.com/twinmq/twinmq/internal/remoting"
	"github.com/twinmq/twinmq/rmqerr"
)

// Sentinel errors. Every error the producer returns wraps one of these, a
// class of package rmqerr, or the context's error, so callers test them
// with errors.Is; a broker's refusal also carries an *rmqerr.Error (see the
// package doc, "Errors").
var (
	// ErrClosed is returned by every send once Close has been called.
	ErrClosed = errors.New("producer: closed")
	// ErrUnknownTopic means the message names a logic topic that the
	// current configuration does not define.
	ErrUnknownTopic = errors.New("producer: unknown logic topic")
	// ErrEmptyBody means the message has no body; RocketMQ refuses empty
	// bodies.
	ErrEmptyBody = errors.New("producer: empty message body")
	// ErrBodyTooLarge means the body exceeds DefaultMaxBodyBytes (a RocketMQ
	// proxy's default limit), or the message, properties and lane
	// included, exceeds batching.totalBatchMaxBytes.
	ErrBodyTooLarge = errors.New("producer: message body too large")
	// ErrReservedProperty means a user property uses a key that RocketMQ or
	// this SDK reserves for itself.
	ErrReservedProperty = errors.New("producer: reserved property key")
	// ErrInvalidMessage covers the other malformed-message cases (nil
	// message, bad tag, key, message group, property or delivery time).
	ErrInvalidMessage = errors.New("producer: invalid message")
	// ErrMalformedLane means the lane carried by the context is not a
	// well-formed lane name. It also matches the lane package's own error.
	ErrMalformedLane = errors.New("producer: malformed lane")
	// ErrInvalidConfig means the configuration given to New is unusable.
	ErrInvalidConfig = errors.New("producer: invalid configuration")
	// ErrBufferFull is returned, with WithFailFast, by a send that found
	// batching.totalBatchMaxBytes reached. It is batch.ErrBufferFull.
	ErrBufferFull = batch.ErrBufferFull
	// ErrNoTarget means no cluster of the logic topic currently has a
	// broker that can take the message (no route, or every target failed
	// within the caller's deadline). The error also wraps the last
	// failure, and the context's error when the deadline ended the wait.
	ErrNoTarget = errors.New("producer: no target available")
	// ErrTimeout: a broker did not answer within timeouts.request (or
	// answered that it timed out). It is rmqerr.ErrTimeout.
	ErrTimeout = rmqerr.ErrTimeout
	// ErrUnavailable: a broker could not be reached (connection refused or
	// reset, TLS handshake failed). It is rmqerr.ErrUnavailable.
	ErrUnavailable = rmqerr.ErrUnavailable
	// ErrDelayUnsupported: a message with a DeliveryTime was sent to a
	// broker of a remoting cluster that has no timer (RocketMQ 4.x knows
	// only its fixed delay levels, and the producer never falls back to
	// one). It matches rmqerr.ErrUnsupported. The send goes on to the
	// topic's other brokers (another cluster may have the timer) and fails
	// with it once every broker of a round refused.
	ErrDelayUnsupported = remoting.ErrDelayUnsupported
	// ErrThrottled: a broker is shedding load (TOO_MANY_REQUESTS). It is
	// rmqerr.ErrThrottled.
	ErrThrottled = rmqerr.ErrThrottled
)

// sendError is the error of a failed send: a text that says what happened
// to the message in the caller's terms, and underneath it, for errors.Is
// and errors.As, the errors that led there.
type sendError struct {
	msg  string
	errs []error
}

func (e *sendError) Error() string   { return e.msg }
func (e *sendError) Unwrap() []error { return e.errs }

// BatchError is returned by SendBatch when at least one message failed. Errs
// has one entry per input message, nil for those that were sent.
type BatchError struct {
	Errs []error
}

func (e *BatchError) Error() string {
	var b strings.Builder
	failed := 0
	for _, err := range e.Errs {
		if err != nil {
			failed++
		}
	}
	fmt.Fprintf(&b, "producer: %d of %d messages failed", failed, len(e.Errs))
	for i, err := range e.Errs {
		if err != nil {
			fmt.Fprintf(&b, "; first failure at index %d: %v", i, err)
			break
		}
	}
	return b.String()
}

// Unwrap exposes the per-message errors to errors.Is and errors.As.
func (e *BatchError) Unwrap() []error {
	out := make([]error, 0, len(e.Errs))
	for _, err := range e.Errs {
		if err != nil {
			out = append(out, err)
		}
	}
	return out
}
