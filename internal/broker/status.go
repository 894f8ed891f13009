package broker

import (
	"context"
	"errors"
	"fmt"

	"github.com/twinmq/twinmq/internal/pb/rmqpb"
	"github.com/twinmq/twinmq/internal/store"
)

// StatusError is an outcome the broker answers with a protocol status code in
// the response body (the proxy's error model: gRPC OK, Status{code,message}).
type StatusError struct {
	Code    rmqpb.Code
	Message string
}

func (e *StatusError) Error() string { return fmt.Sprintf("%s: %s", e.Code, e.Message) }

func statusErr(code rmqpb.Code, format string, args ...any) *StatusError {
	return &StatusError{Code: code, Message: fmt.Sprintf(format, args...)}
}

func okStatus() *rmqpb.Status {
	return &rmqpb.Status{Code: rmqpb.Code_OK, Message: rmqpb.Code_OK.String()}
}

// toStatus maps any error to a protocol status. Store and context errors get
// the codes the proxy gives their broker-side equivalents; everything else is
// INTERNAL_SERVER_ERROR, as in the proxy.
func toStatus(err error) *rmqpb.Status {
	if err == nil {
		return okStatus()
	}
	var se *StatusError
	switch {
	case errors.As(err, &se):
		return &rmqpb.Status{Code: se.Code, Message: se.Message}
	case errors.Is(err, store.ErrMessageTooLarge):
		return &rmqpb.Status{Code: rmqpb.Code_MESSAGE_BODY_TOO_LARGE, Message: err.Error()}
	case errors.Is(err, store.ErrNotDurable):
		return &rmqpb.Status{Code: rmqpb.Code_MASTER_PERSISTENCE_TIMEOUT, Message: err.Error()}
	case errors.Is(err, context.DeadlineExceeded):
		return &rmqpb.Status{Code: rmqpb.Code_PROXY_TIMEOUT, Message: err.Error()}
	}
	return &rmqpb.Status{Code: rmqpb.Code_INTERNAL_SERVER_ERROR, Message: err.Error()}
}

// mergeCodes gives the top-level status of a response with several entries:
// the single distinct code, or MULTIPLE_RESULTS.
func mergeCodes(entries []*rmqpb.Status) *rmqpb.Status {
	if len(entries) == 0 {
		return &rmqpb.Status{Code: rmqpb.Code_INTERNAL_SERVER_ERROR, Message: "result is empty"}
	}
	first := entries[0]
	for _, s := range entries[1:] {
		if s.GetCode() != first.GetCode() {
			return &rmqpb.Status{Code: rmqpb.Code_MULTIPLE_RESULTS, Message: rmqpb.Code_MULTIPLE_RESULTS.String()}
		}
	}
	return &rmqpb.Status{Code: first.GetCode(), Message: first.GetCode().String()}
}
