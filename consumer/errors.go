package consumer

import (
	"errors"
	"fmt"
)

// Sentinel errors. Every error the consumer returns for bad input wraps one
// of these, so callers test them with errors.Is.
var (
	// ErrInvalidConfig means the options or the configuration given to New
	// are unusable; the message says which and how to mend it.
	ErrInvalidConfig = errors.New("consumer: invalid configuration")
	// ErrUnsupported means the configuration asks for something the
	// consumer does not do yet: consuming a cluster that speaks the
	// remoting protocol. New fails with it and a reload that asks for it
	// is refused (the previous configuration keeps serving). It wraps
	// ErrInvalidConfig.
	ErrUnsupported = fmt.Errorf("consumer: unsupported configuration: %w", ErrInvalidConfig)
	// ErrUnknownTopic means the subscribed logic topic is not in the
	// configuration document.
	ErrUnknownTopic = errors.New("consumer: unknown logic topic")
	// ErrHandlerPanic wraps the value of a handler's panic in the log line
	// and the failure it causes: the consumer recovers the panic and treats
	// the delivery as failed.
	ErrHandlerPanic = errors.New("consumer: handler panicked")
	// ErrUnauthenticated is wrapped in the logged error of a forward the
	// target refused because the caller lacked the group's forwarding token.
	ErrUnauthenticated = errors.New("consumer: forwarding caller not authenticated")

	// errClosed ends a settle call attempted after Close stopped the ack
	// senders (only when Close gave up waiting for a handler).
	errClosed = errors.New("consumer: closed")
)
