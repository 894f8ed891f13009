package driver

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/twinmq/twinmq/internal/pb/rmqpb"
	"github.com/twinmq/twinmq/rmqerr"
)

// Error classes. Every error the driver returns for a failed call is an
// *Error whose class is one of these, so callers test the class with
// errors.Is and read the details (status code, RPC, endpoint) with errors.As.
// The classes of a server's or the network's failure are the public ones of
// package rmqerr (the same values), so that what reaches a user through the
// producer or the consumer matches an exported sentinel; an *Error for a
// refusal (a status code) also unwraps to an *rmqerr.Error.
var (
	// ErrBadRequest: the request is malformed or names something invalid
	// (topic, group, tag, receipt handle, ...). Retrying cannot help.
	ErrBadRequest = rmqerr.ErrBadRequest
	// ErrUnauthorized: credentials are missing or wrong.
	ErrUnauthorized = rmqerr.ErrUnauthorized
	// ErrForbidden: the credentials are valid but lack the permission.
	ErrForbidden = rmqerr.ErrForbidden
	// ErrNotFound: the topic, group or message does not exist on that server.
	ErrNotFound = rmqerr.ErrNotFound
	// ErrTooLarge: a body, the properties or the whole request is too large.
	ErrTooLarge = rmqerr.ErrTooLarge
	// ErrTooManyRequests: the server throttled the call; back off and retry.
	ErrTooManyRequests = rmqerr.ErrThrottled
	// ErrInternal: the server failed while handling the call.
	ErrInternal = rmqerr.ErrInternal
	// ErrTimeout: the server or the per-call request timeout gave up.
	ErrTimeout = rmqerr.ErrTimeout
	// ErrUnavailable: the endpoint cannot be reached (transport failure).
	ErrUnavailable = rmqerr.ErrUnavailable
	// ErrUnsupported: the server does not implement what was asked, or it
	// answered a status code this driver does not know.
	ErrUnsupported = rmqerr.ErrUnsupported
	// ErrCorrupted: a received message failed its body digest check or could
	// not be decoded.
	ErrCorrupted = errors.New("message corrupted")
	// ErrClosed: the Client was closed.
	ErrClosed = errors.New("driver client closed")
	// ErrInvalidConfig: Config.validate rejected the configuration.
	ErrInvalidConfig = errors.New("invalid driver config")
)

// Error describes one failed call: the RocketMQ status code (or the gRPC
// code for transport failures), the server's message, the RPC and the
// endpoint. errors.Is(err, ErrX) matches its class.
type Error struct {
	// Code is the protocol status code; CODE_UNSPECIFIED for failures that
	// never produced a status (transport errors, client-side checks).
	Code rmqpb.Code
	// GRPCCode is the gRPC status code when the failure was on the
	// transport or the server rejected the call before answering in-body.
	GRPCCode codes.Code
	// Message is the server's explanation, or the client-side one.
	Message string
	// RPC is the method name, e.g. "SendMessage".
	RPC string
	// Endpoint is the "host:port" the call went to.
	Endpoint string

	class error
	// stored: the server said it wrote the request, so sending it again
	// stores it twice (see Retryable).
	stored bool
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("rocketmq ")
	b.WriteString(e.RPC)
	if e.Endpoint != "" {
		b.WriteString(" to ")
		b.WriteString(e.Endpoint)
	}
	b.WriteString(": ")
	switch {
	case e.Code != rmqpb.Code_CODE_UNSPECIFIED:
		fmt.Fprintf(&b, "%s (%d)", e.Code.String(), int32(e.Code))
	case e.GRPCCode != codes.OK:
		fmt.Fprintf(&b, "grpc %s", e.GRPCCode.String())
	default:
		b.WriteString(e.class.Error())
	}
	if e.Message != "" {
		b.WriteString(": ")
		b.WriteString(e.Message)
	}
	return b.String()
}

// Is reports whether target is the class of e.
func (e *Error) Is(target error) bool { return e.class != nil && target == e.class }

// Class returns the sentinel class of e (ErrBadRequest, ...).
func (e *Error) Class() error { return e.class }

// Unwrap returns, for a refusal (the server answered a status code that
// is not a success), the public *rmqerr.Error with the code, the server's
// message and the endpoint, so that errors.As finds it through any
// wrapping; nil for a failure without such a code.
func (e *Error) Unwrap() error {
	if e.class == nil || codeClass(e.Code) == nil {
		return nil
	}
	return &rmqerr.Error{Code: rmqerr.Code(e.Code), Message: e.Message, Endpoint: e.Endpoint}
}

// Retryable reports whether retrying the same request on another endpoint
// (or the same one later) can succeed: transport failures, timeouts,
// throttling and server-side internal errors. Caller mistakes (bad request,
// auth, too large, not found, unsupported) and the caller's own context
// ending are not retryable.
//
// Neither is a failure after which the server holds the message: a send
// answered MASTER_PERSISTENCE_TIMEOUT, SLAVE_PERSISTENCE_TIMEOUT or
// HA_NOT_AVAILABLE (the broker wrote it but could not confirm the flush or
// the replica; RocketMQ's own producers do not resend on these by default),
// or a success status whose result entries do not fit the request. Their
// classes stay ErrTimeout and ErrInternal; a retry would only store a
// second copy.
func Retryable(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var de *Error
	if errors.As(err, &de) && (de.stored || storedCode(de.Code)) {
		return false
	}
	// The same refusal from another driver (the remoting one) carries the
	// code in an *rmqerr.Error of its own.
	var re *rmqerr.Error
	if errors.As(err, &re) && re.Code.Stored() {
		return false
	}
	for _, c := range [...]error{ErrUnavailable, ErrTimeout, ErrTooManyRequests, ErrInternal} {
		if errors.Is(err, c) {
			return true
		}
	}
	return false
}

// storedCode reports the codes the proxy answers for a send that its broker
// wrote but could not confirm durable or replicated.
func storedCode(c rmqpb.Code) bool { return rmqerr.Code(c).Stored() }

// codeClass maps a protocol status code to its error class (see
// rmqerr.Code.Class). OK, MULTIPLE_RESULTS and CODE_UNSPECIFIED map to nil.
func codeClass(c rmqpb.Code) error { return rmqerr.Code(c).Class() }

// statusSucceeded reports whether a Status means success. A nil Status is
// treated as a failure by callers that require one.
func statusSucceeded(s *rmqpb.Status) bool {
	c := s.GetCode()
	return c == rmqpb.Code_OK || c == rmqpb.Code_MULTIPLE_RESULTS
}

// wireStatus is a Status as the send path decodes it: set tells a present
// status (possibly empty) from an absent one, which statusError reports
// differently.
type wireStatus struct {
	set     bool
	code    rmqpb.Code
	message string
}

func statusOf(s *rmqpb.Status) wireStatus {
	return wireStatus{set: s != nil, code: s.GetCode(), message: s.GetMessage()}
}

// statusError turns a non-success Status into an *Error. It returns nil for
// success codes.
func statusError(s *rmqpb.Status, rpc, endpoint string) error {
	return statusOf(s).err(rpc, endpoint)
}

// err is statusError of the status s was decoded from.
func (s wireStatus) err(rpc, endpoint string) error {
	if !s.set {
		return &Error{RPC: rpc, Endpoint: endpoint, Message: "response carries no status", class: ErrInternal}
	}
	class := codeClass(s.code)
	if class == nil {
		if s.code == rmqpb.Code_CODE_UNSPECIFIED {
			return &Error{RPC: rpc, Endpoint: endpoint, Message: "response status has no code", class: ErrInternal}
		}
		return nil
	}
	return &Error{Code: s.code, Message: s.message, RPC: rpc, Endpoint: endpoint, class: class}
}

// clientError builds an error found before anything was sent.
func clientError(class error, rpc, endpoint, format string, args ...any) error {
	return &Error{RPC: rpc, Endpoint: endpoint, Message: fmt.Sprintf(format, args...), class: class}
}

// transportError maps an error returned by a gRPC call. callerCtx is the
// caller's context: when it has ended, its own error is returned (wrapped),
// so that the caller's cancellation is not mistaken for a sick endpoint.
func transportError(callerCtx context.Context, err error, rpc, endpoint string) error {
	if err == nil {
		return nil
	}
	var de *Error
	if errors.As(err, &de) {
		return err
	}
	if cerr := callerCtx.Err(); cerr != nil {
		return fmt.Errorf("rocketmq %s to %s: %w", rpc, endpoint, context.Cause(callerCtx))
	}
	st, ok := status.FromError(err)
	if !ok {
		return &Error{RPC: rpc, Endpoint: endpoint, Message: err.Error(), class: ErrUnavailable}
	}
	return &Error{GRPCCode: st.Code(), Message: st.Message(), RPC: rpc, Endpoint: endpoint, class: grpcClass(st.Code(), st.Message())}
}

// grpcClass maps a gRPC status code to an error class.
func grpcClass(c codes.Code, msg string) error {
	switch c {
	case codes.InvalidArgument, codes.OutOfRange, codes.FailedPrecondition, codes.AlreadyExists:
		return ErrBadRequest
	case codes.Unauthenticated:
		return ErrUnauthorized
	case codes.PermissionDenied:
		return ErrForbidden
	case codes.NotFound:
		return ErrNotFound
	case codes.ResourceExhausted:
		if strings.Contains(msg, "larger than max") {
			return ErrTooLarge
		}
		return ErrTooManyRequests
	case codes.DeadlineExceeded:
		return ErrTimeout
	case codes.Unimplemented:
		return ErrUnsupported
	case codes.Internal, codes.Unknown, codes.DataLoss:
		return ErrInternal
	default: // Unavailable, Aborted, Canceled (not by the caller)
		return ErrUnavailable
	}
}
