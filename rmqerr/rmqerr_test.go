package rmqerr_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/twinmq/twinmq/internal/pb/rmqpb"
	"github.com/twinmq/twinmq/rmqerr"
)

// Every code of the protocol has its number and name here, and no other.
func TestCodesFollowTheProtocol(t *testing.T) {
	for n, name := range rmqpb.Code_name {
		assert.Equal(t, name, rmqerr.Code(n).String(), "code %d", n)
	}
	named := 0
	for n := int32(0); n < 70000; n++ {
		if s := rmqerr.Code(n).String(); s != fmt.Sprintf("CODE_%d", n) {
			named++
			assert.Equal(t, rmqpb.Code_name[n], s, "code %d is not in the protocol", n)
		}
	}
	assert.Equal(t, len(rmqpb.Code_name), named)
	assert.Equal(t, "CODE_49999", rmqerr.Code(49999).String())
}

func TestRefusalMatchesTheClassOfItsCode(t *testing.T) {
	cases := []struct {
		code  rmqerr.Code
		class error
	}{
		{rmqerr.CodeBadRequest, rmqerr.ErrBadRequest},
		{rmqerr.CodeMessagePropertyConflictWithType, rmqerr.ErrBadRequest},
		{rmqerr.CodeMessageBodyEmpty, rmqerr.ErrBadRequest},
		{rmqerr.CodePreconditionFailed, rmqerr.ErrBadRequest},
		{rmqerr.CodeUnauthorized, rmqerr.ErrUnauthorized},
		{rmqerr.CodePaymentRequired, rmqerr.ErrForbidden},
		{rmqerr.CodeForbidden, rmqerr.ErrForbidden},
		{rmqerr.CodeTopicNotFound, rmqerr.ErrNotFound},
		{rmqerr.CodeRequestTimeout, rmqerr.ErrTimeout},
		{rmqerr.CodeMessageBodyTooLarge, rmqerr.ErrTooLarge},
		{rmqerr.CodeMessagePropertiesTooLarge, rmqerr.ErrTooLarge},
		{rmqerr.CodeTooManyRequests, rmqerr.ErrThrottled},
		{rmqerr.CodeInternalServerError, rmqerr.ErrInternal},
		{rmqerr.CodeHANotAvailable, rmqerr.ErrInternal},
		{rmqerr.CodeProxyTimeout, rmqerr.ErrTimeout},
		{rmqerr.CodeMasterPersistenceTimeout, rmqerr.ErrTimeout},
		{rmqerr.CodeNotImplemented, rmqerr.ErrUnsupported},
		{rmqerr.CodeVersionUnsupported, rmqerr.ErrUnsupported},
		{rmqerr.CodeFailedToConsumeMessage, rmqerr.ErrInternal},
		{rmqerr.Code(49999), rmqerr.ErrUnsupported},
	}
	classes := []error{rmqerr.ErrBadRequest, rmqerr.ErrUnauthorized, rmqerr.ErrForbidden, rmqerr.ErrNotFound,
		rmqerr.ErrTooLarge, rmqerr.ErrThrottled, rmqerr.ErrInternal, rmqerr.ErrTimeout, rmqerr.ErrUnavailable,
		rmqerr.ErrUnsupported}
	for _, tc := range cases {
		err := fmt.Errorf("send: %w", &rmqerr.Error{Code: tc.code, Message: "m", Endpoint: "h:1"})
		for _, c := range classes {
			assert.Equal(t, c == tc.class, errors.Is(err, c), "%v is %v", tc.code, c) //nolint:errorlint // the sentinels themselves are compared, not errors
		}
		var re *rmqerr.Error
		require.ErrorAs(t, err, &re)
		assert.Equal(t, tc.code, re.Code)
	}
	for _, c := range []rmqerr.Code{rmqerr.CodeOK, rmqerr.CodeMultipleResults, rmqerr.CodeUnspecified} {
		assert.NoError(t, c.Class(), "%v is no failure", c)
	}
	assert.True(t, rmqerr.CodeSlavePersistenceTimeout.Stored())
	assert.False(t, rmqerr.CodeProxyTimeout.Stored())
}

func TestErrorText(t *testing.T) {
	err := &rmqerr.Error{Code: rmqerr.CodeTopicNotFound, Message: "topic orders not found", Endpoint: "10.0.0.1:8081"}
	assert.Equal(t, "rocketmq refused: TOPIC_NOT_FOUND (40402) from 10.0.0.1:8081: topic orders not found", err.Error())
	assert.Equal(t, "rocketmq refused: CODE_49999 (49999)", (&rmqerr.Error{Code: 49999}).Error())
}
