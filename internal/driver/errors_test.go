package driver

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/twinmq/twinmq/internal/pb/rmqpb"
	"github.com/twinmq/twinmq/rmqerr"
)

func TestStatusCodesMapToClasses(t *testing.T) {
	cases := []struct {
		code      rmqpb.Code
		class     error
		retryable bool
	}{
		{rmqpb.Code_BAD_REQUEST, ErrBadRequest, false},
		{rmqpb.Code_ILLEGAL_TOPIC, ErrBadRequest, false},
		{rmqpb.Code_INVALID_RECEIPT_HANDLE, ErrBadRequest, false},
		{rmqpb.Code_CLIENT_ID_REQUIRED, ErrBadRequest, false},
		{rmqpb.Code_ILLEGAL_POLLING_TIME, ErrBadRequest, false},
		{rmqpb.Code_MESSAGE_BODY_EMPTY, ErrBadRequest, false},
		{rmqpb.Code_UNAUTHORIZED, ErrUnauthorized, false},
		{rmqpb.Code_PAYMENT_REQUIRED, ErrForbidden, false},
		{rmqpb.Code_FORBIDDEN, ErrForbidden, false},
		{rmqpb.Code_TOPIC_NOT_FOUND, ErrNotFound, false},
		{rmqpb.Code_CONSUMER_GROUP_NOT_FOUND, ErrNotFound, false},
		{rmqpb.Code_REQUEST_TIMEOUT, ErrTimeout, true},
		{rmqpb.Code_PAYLOAD_TOO_LARGE, ErrTooLarge, false},
		{rmqpb.Code_MESSAGE_BODY_TOO_LARGE, ErrTooLarge, false},
		{rmqpb.Code_MESSAGE_PROPERTIES_TOO_LARGE, ErrTooLarge, false},
		{rmqpb.Code_TOO_MANY_REQUESTS, ErrTooManyRequests, true},
		{rmqpb.Code_INTERNAL_SERVER_ERROR, ErrInternal, true},
		{rmqpb.Code_INTERNAL_ERROR, ErrInternal, true},
		{rmqpb.Code_PROXY_TIMEOUT, ErrTimeout, true},
		// Written on the master, durability or replication unconfirmed: a
		// resend would store a second copy.
		{rmqpb.Code_HA_NOT_AVAILABLE, ErrInternal, false},
		{rmqpb.Code_MASTER_PERSISTENCE_TIMEOUT, ErrTimeout, false},
		{rmqpb.Code_SLAVE_PERSISTENCE_TIMEOUT, ErrTimeout, false},
		{rmqpb.Code_NOT_IMPLEMENTED, ErrUnsupported, false},
		{rmqpb.Code_VERSION_UNSUPPORTED, ErrUnsupported, false},
		{rmqpb.Code(49999), ErrUnsupported, false},
	}
	for _, tc := range cases {
		err := statusError(&rmqpb.Status{Code: tc.code, Message: "m"}, "SendMessage", "h:1")
		assert.ErrorIs(t, err, tc.class, tc.code.String())
		assert.Equal(t, tc.retryable, Retryable(err), tc.code.String())
		var de *Error
		if assert.ErrorAs(t, err, &de) {
			assert.Equal(t, tc.code, de.Code)
			assert.Equal(t, "SendMessage", de.RPC)
			assert.Equal(t, "h:1", de.Endpoint)
		}
		wrapped := fmt.Errorf("producer: %w", err)
		assert.ErrorIs(t, wrapped, tc.class)
	}
	assert.NoError(t, statusError(ok(), "x", ""))
	assert.NoError(t, statusError(&rmqpb.Status{Code: rmqpb.Code_MULTIPLE_RESULTS}, "x", ""))
	assert.ErrorIs(t, statusError(nil, "x", ""), ErrInternal)
	assert.ErrorIs(t, statusError(&rmqpb.Status{}, "x", ""), ErrInternal)
}

func TestErrorText(t *testing.T) {
	err := statusError(&rmqpb.Status{Code: rmqpb.Code_TOO_MANY_REQUESTS, Message: "flow limit"}, "SendMessage", "10.0.0.1:8081")
	assert.Equal(t, "rocketmq SendMessage to 10.0.0.1:8081: TOO_MANY_REQUESTS (42900): flow limit", err.Error())
}

func TestTransportErrorsMap(t *testing.T) {
	bg := context.Background()
	cases := map[codes.Code]error{
		codes.Unavailable:       ErrUnavailable,
		codes.DeadlineExceeded:  ErrTimeout,
		codes.Unimplemented:     ErrUnsupported,
		codes.PermissionDenied:  ErrForbidden,
		codes.Unauthenticated:   ErrUnauthorized,
		codes.InvalidArgument:   ErrBadRequest,
		codes.Internal:          ErrInternal,
		codes.ResourceExhausted: ErrTooManyRequests,
	}
	for c, class := range cases {
		err := transportError(bg, status.Error(c, "x"), "QueryRoute", "h:1")
		assert.ErrorIs(t, err, class, c.String())
		var de *Error
		if assert.ErrorAs(t, err, &de) {
			assert.Equal(t, c, de.GRPCCode)
		}
	}
	big := transportError(bg, status.Error(codes.ResourceExhausted, "grpc: received message larger than max (5 vs. 4)"), "SendMessage", "h:1")
	assert.ErrorIs(t, big, ErrTooLarge)
	assert.ErrorIs(t, transportError(bg, errors.New("dial refused"), "x", "h:1"), ErrUnavailable)
}

func TestCallerCancellationIsNotBlamedOnTheEndpoint(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := transportError(ctx, status.Error(codes.Canceled, "context canceled"), "SendMessage", "h:1")
	assert.ErrorIs(t, err, context.Canceled)
	assert.NotErrorIs(t, err, ErrUnavailable)
	assert.False(t, Retryable(err))
	assert.False(t, Retryable(nil))
}

// What reaches a user is public: a refusal unwraps to an *rmqerr.Error with
// the code, the server's message and the endpoint; the classes are
// rmqerr's; a failure without a status code has no *rmqerr.Error.
func TestErrorsArePublic(t *testing.T) {
	err := fmt.Errorf("producer: %w", statusError(&rmqpb.Status{Code: rmqpb.Code_TOPIC_NOT_FOUND, Message: "no topic t"}, "SendMessage", "h:1"))
	var re *rmqerr.Error
	if assert.ErrorAs(t, err, &re) {
		assert.Equal(t, rmqerr.CodeTopicNotFound, re.Code)
		assert.Equal(t, "no topic t", re.Message)
		assert.Equal(t, "h:1", re.Endpoint)
	}
	assert.ErrorIs(t, err, rmqerr.ErrNotFound)
	assert.Equal(t, "rocketmq SendMessage to h:1: TOPIC_NOT_FOUND (40402): no topic t", errors.Unwrap(err).Error(),
		"the driver's text is kept")

	throttled := statusError(&rmqpb.Status{Code: rmqpb.Code_TOO_MANY_REQUESTS}, "SendMessage", "h:1")
	assert.ErrorIs(t, throttled, rmqerr.ErrThrottled)

	for _, err := range []error{
		transportError(context.Background(), status.Error(codes.Unavailable, "down"), "SendMessage", "h:1"),
		transportError(context.Background(), status.Error(codes.DeadlineExceeded, "slow"), "SendMessage", "h:1"),
		noTransactionID(&sendAnswer{status: wireStatus{set: true, code: rmqpb.Code_OK}}, "h:1"),
	} {
		assert.False(t, errors.As(err, &re), "%v carries no refusal", err)
	}
	assert.ErrorIs(t, transportError(context.Background(), status.Error(codes.Unavailable, "down"), "x", "h:1"), rmqerr.ErrUnavailable)
	assert.ErrorIs(t, transportError(context.Background(), status.Error(codes.DeadlineExceeded, "slow"), "x", "h:1"), rmqerr.ErrTimeout)
}
