package remoting

import (
	"fmt"

	"github.com/twinmq/twinmq/internal/remoting/wire"
	"github.com/twinmq/twinmq/rmqerr"
)

// ResponseError is a response with a code other than SUCCESS. It unwraps to
// the error class the producer acts on: an *rmqerr.Error with the gRPC
// code of the same meaning (so errors.As finds it and errors.Is finds its
// class), or rmqerr.ErrUnavailable for SERVICE_NOT_AVAILABLE, which has no
// such code.
type ResponseError struct {
	Code   int32 // the remoting response code
	Remark string
	Addr   string
	class  error
}

func (e *ResponseError) Error() string {
	return fmt.Sprintf("remoting %s: response code %d: %s", e.Addr, e.Code, e.Remark)
}

func (e *ResponseError) Unwrap() error { return e.class }

// Stored reports a send the broker wrote although it answered an error: the
// flush or the replica did not confirm it in time. Sending it again would
// store a second copy.
func (e *ResponseError) Stored() bool {
	switch e.Code {
	case wire.RespFlushDiskTimeout, wire.RespFlushSlaveTimeout, wire.RespSlaveNotAvailable:
		return true
	}
	return false
}

// classCode maps a remoting response code to the rmqerr code of the same
// meaning; ok is false for SERVICE_NOT_AVAILABLE (see ResponseError).
func classCode(code int32) (rmqerr.Code, bool) {
	switch code {
	case wire.RespSystemBusy:
		return rmqerr.CodeTooManyRequests, true
	case wire.RespTopicNotExist:
		return rmqerr.CodeTopicNotFound, true
	case wire.RespMessageIllegal:
		return rmqerr.CodeBadRequest, true
	case wire.RespNoPermission:
		return rmqerr.CodeForbidden, true
	case wire.RespFlushDiskTimeout:
		return rmqerr.CodeMasterPersistenceTimeout, true
	case wire.RespFlushSlaveTimeout:
		return rmqerr.CodeSlavePersistenceTimeout, true
	case wire.RespSlaveNotAvailable:
		return rmqerr.CodeHANotAvailable, true
	case wire.RespRequestCodeNotSupported, wire.RespVersionNotSupported:
		return rmqerr.CodeNotImplemented, true
	case wire.RespServiceNotAvailable:
		return 0, false
	}
	return rmqerr.CodeInternalError, true
}

// CheckResponse returns nil for a SUCCESS response, else a *ResponseError.
func CheckResponse(addr string, resp *wire.Command) error {
	if resp.Code == wire.RespSuccess {
		return nil
	}
	e := &ResponseError{Code: resp.Code, Remark: resp.Remark, Addr: addr}
	if c, ok := classCode(resp.Code); ok {
		e.class = &rmqerr.Error{Code: c, Message: resp.Remark, Endpoint: addr}
	} else {
		e.class = rmqerr.ErrUnavailable
	}
	return e
}
