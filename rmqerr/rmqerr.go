// Package rmqerr names what can go wrong between this SDK and a RocketMQ
// server, so that code using package producer or consumer can tell the
// failures apart with errors.Is and errors.As, whatever wording the error
// text has.
//
// Two kinds of values:
//
//   - Classes (ErrTimeout, ErrUnavailable, ErrThrottled, ErrNotFound, ...):
//     sentinels that every failure of a call to a server matches, whether
//     it came from the network (a connection refused, no answer in time) or
//     from the server's answer. Test them with errors.Is.
//   - Refusals: when a server answered with a status code other than OK,
//     the error chain holds an *Error carrying that code (the number and
//     name of apache.rocketmq.v2.Code, as Code), the server's message and
//     its address. An *Error matches the class of its code (Code.Class),
//     so errors.Is works on refusals as on network failures.
//
// Get the *Error with errors.As to act on one code:
//
//	var re *rmqerr.Error
//	if errors.As(err, &re) && re.Code == rmqerr.CodeTopicNotFound {
//		// the physical topic is missing on re.Endpoint's cluster
//	}
//
// # Decisions
//
//   - The package is public and small, with no dependency, so that the
//     producer, the consumer and a user's code share one vocabulary; the
//     RocketMQ client inside the SDK maps its failures onto it. Package
//     producer re-exports the classes a sender meets most (ErrTimeout,
//     ErrUnavailable, ErrThrottled) under its own name; they are the same
//     values.
//   - A failure that produced no status code (the network, or the SDK's
//     own request timeout) matches its class only: there is no *Error to
//     find, since there is no code to carry.
//   - Codes follow the RocketMQ 5 gRPC protocol. Its numbers group like
//     HTTP statuses (4xxxx: the request is at fault, 5xxxx: the server is),
//     and Class maps each group to a class. A code this package does not
//     know keeps its number (Error.Code) and is ErrUnsupported.
//   - A send the server answered MASTER_PERSISTENCE_TIMEOUT,
//     SLAVE_PERSISTENCE_TIMEOUT or HA_NOT_AVAILABLE was written but not
//     confirmed durable or replicated: the classes say timeout and internal
//     error, but the producer does not resend such a message (a resend
//     would store it twice). Code.Stored reports these codes.
package rmqerr

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Classes of failure. Every failure of a call to a RocketMQ server matches
// exactly one of them with errors.Is.
var (
	// ErrBadRequest: the server refused the request as malformed or naming
	// something invalid (topic, group, tag, message type, receipt handle).
	// Sending it again cannot help.
	ErrBadRequest = errors.New("bad request")
	// ErrUnauthorized: credentials are missing or wrong.
	ErrUnauthorized = errors.New("unauthorized")
	// ErrForbidden: the credentials are valid but lack the permission.
	ErrForbidden = errors.New("forbidden")
	// ErrNotFound: the topic, group or message does not exist on that
	// server.
	ErrNotFound = errors.New("not found")
	// ErrTooLarge: a body, the properties or the whole request is larger
	// than the server accepts.
	ErrTooLarge = errors.New("too large")
	// ErrThrottled: the server is shedding load (TOO_MANY_REQUESTS, or the
	// transport's resource exhaustion); back off and try again.
	ErrThrottled = errors.New("throttled")
	// ErrInternal: the server failed while handling the call.
	ErrInternal = errors.New("internal server error")
	// ErrTimeout: no answer in time, from the network's side (the SDK's
	// request timeout, timeouts.request) or the server's (PROXY_TIMEOUT).
	ErrTimeout = errors.New("timeout")
	// ErrUnavailable: the server cannot be reached (connection refused or
	// reset, no route, TLS handshake failure).
	ErrUnavailable = errors.New("unavailable")
	// ErrUnsupported: the server does not implement what was asked, or
	// answered a code this package does not know.
	ErrUnsupported = errors.New("unsupported")
)

// Error is a refusal: a RocketMQ server answered a call with a status code
// other than OK. It matches the class of its code with errors.Is.
type Error struct {
	// Code is the status code the server answered.
	Code Code
	// Message is the server's explanation, as it sent it.
	Message string
	// Endpoint is the address ("host:port") of the server that answered.
	Endpoint string
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("rocketmq refused: ")
	b.WriteString(e.Code.String())
	b.WriteString(" (")
	b.WriteString(strconv.Itoa(int(e.Code)))
	b.WriteByte(')')
	if e.Endpoint != "" {
		b.WriteString(" from ")
		b.WriteString(e.Endpoint)
	}
	if e.Message != "" {
		b.WriteString(": ")
		b.WriteString(e.Message)
	}
	return b.String()
}

// Is reports whether target is the class of e's code.
func (e *Error) Is(target error) bool {
	c := e.Code.Class()
	return c != nil && target == c
}

// Code is a status code of the RocketMQ 5 protocol (apache.rocketmq.v2.Code).
type Code int32

// Status codes, with the numbers of apache.rocketmq.v2.Code.
const (
	CodeUnspecified                     Code = 0
	CodeOK                              Code = 20000
	CodeMultipleResults                 Code = 30000
	CodeBadRequest                      Code = 40000
	CodeIllegalAccessPoint              Code = 40001
	CodeIllegalTopic                    Code = 40002
	CodeIllegalConsumerGroup            Code = 40003
	CodeIllegalMessageTag               Code = 40004
	CodeIllegalMessageKey               Code = 40005
	CodeIllegalMessageGroup             Code = 40006
	CodeIllegalMessagePropertyKey       Code = 40007
	CodeInvalidTransactionID            Code = 40008
	CodeIllegalMessageID                Code = 40009
	CodeIllegalFilterExpression         Code = 40010
	CodeIllegalInvisibleTime            Code = 40011
	CodeIllegalDeliveryTime             Code = 40012
	CodeInvalidReceiptHandle            Code = 40013
	CodeMessagePropertyConflictWithType Code = 40014
	CodeUnrecognizedClientType          Code = 40015
	CodeMessageCorrupted                Code = 40016
	CodeClientIDRequired                Code = 40017
	CodeIllegalPollingTime              Code = 40018
	CodeIllegalOffset                   Code = 40019
	CodeUnauthorized                    Code = 40100
	CodePaymentRequired                 Code = 40200
	CodeForbidden                       Code = 40300
	CodeNotFound                        Code = 40400
	CodeMessageNotFound                 Code = 40401
	CodeTopicNotFound                   Code = 40402
	CodeConsumerGroupNotFound           Code = 40403
	CodeOffsetNotFound                  Code = 40404
	CodeRequestTimeout                  Code = 40800
	CodePayloadTooLarge                 Code = 41300
	CodeMessageBodyTooLarge             Code = 41301
	CodeMessageBodyEmpty                Code = 41302
	CodePreconditionFailed              Code = 42800
	CodeTooManyRequests                 Code = 42900
	CodeRequestHeaderFieldsTooLarge     Code = 43100
	CodeMessagePropertiesTooLarge       Code = 43101
	CodeInternalError                   Code = 50000
	CodeInternalServerError             Code = 50001
	CodeHANotAvailable                  Code = 50002
	CodeNotImplemented                  Code = 50100
	CodeProxyTimeout                    Code = 50400
	CodeMasterPersistenceTimeout        Code = 50401
	CodeSlavePersistenceTimeout         Code = 50402
	CodeUnsupported                     Code = 50500
	CodeVersionUnsupported              Code = 50501
	CodeVerifyFIFOMessageUnsupported    Code = 50502
	CodeFailedToConsumeMessage          Code = 60000
)

var codeNames = map[Code]string{
	CodeUnspecified:                     "CODE_UNSPECIFIED",
	CodeOK:                              "OK",
	CodeMultipleResults:                 "MULTIPLE_RESULTS",
	CodeBadRequest:                      "BAD_REQUEST",
	CodeIllegalAccessPoint:              "ILLEGAL_ACCESS_POINT",
	CodeIllegalTopic:                    "ILLEGAL_TOPIC",
	CodeIllegalConsumerGroup:            "ILLEGAL_CONSUMER_GROUP",
	CodeIllegalMessageTag:               "ILLEGAL_MESSAGE_TAG",
	CodeIllegalMessageKey:               "ILLEGAL_MESSAGE_KEY",
	CodeIllegalMessageGroup:             "ILLEGAL_MESSAGE_GROUP",
	CodeIllegalMessagePropertyKey:       "ILLEGAL_MESSAGE_PROPERTY_KEY",
	CodeInvalidTransactionID:            "INVALID_TRANSACTION_ID",
	CodeIllegalMessageID:                "ILLEGAL_MESSAGE_ID",
	CodeIllegalFilterExpression:         "ILLEGAL_FILTER_EXPRESSION",
	CodeIllegalInvisibleTime:            "ILLEGAL_INVISIBLE_TIME",
	CodeIllegalDeliveryTime:             "ILLEGAL_DELIVERY_TIME",
	CodeInvalidReceiptHandle:            "INVALID_RECEIPT_HANDLE",
	CodeMessagePropertyConflictWithType: "MESSAGE_PROPERTY_CONFLICT_WITH_TYPE",
	CodeUnrecognizedClientType:          "UNRECOGNIZED_CLIENT_TYPE",
	CodeMessageCorrupted:                "MESSAGE_CORRUPTED",
	CodeClientIDRequired:                "CLIENT_ID_REQUIRED",
	CodeIllegalPollingTime:              "ILLEGAL_POLLING_TIME",
	CodeIllegalOffset:                   "ILLEGAL_OFFSET",
	CodeUnauthorized:                    "UNAUTHORIZED",
	CodePaymentRequired:                 "PAYMENT_REQUIRED",
	CodeForbidden:                       "FORBIDDEN",
	CodeNotFound:                        "NOT_FOUND",
	CodeMessageNotFound:                 "MESSAGE_NOT_FOUND",
	CodeTopicNotFound:                   "TOPIC_NOT_FOUND",
	CodeConsumerGroupNotFound:           "CONSUMER_GROUP_NOT_FOUND",
	CodeOffsetNotFound:                  "OFFSET_NOT_FOUND",
	CodeRequestTimeout:                  "REQUEST_TIMEOUT",
	CodePayloadTooLarge:                 "PAYLOAD_TOO_LARGE",
	CodeMessageBodyTooLarge:             "MESSAGE_BODY_TOO_LARGE",
	CodeMessageBodyEmpty:                "MESSAGE_BODY_EMPTY",
	CodePreconditionFailed:              "PRECONDITION_FAILED",
	CodeTooManyRequests:                 "TOO_MANY_REQUESTS",
	CodeRequestHeaderFieldsTooLarge:     "REQUEST_HEADER_FIELDS_TOO_LARGE",
	CodeMessagePropertiesTooLarge:       "MESSAGE_PROPERTIES_TOO_LARGE",
	CodeInternalError:                   "INTERNAL_ERROR",
	CodeInternalServerError:             "INTERNAL_SERVER_ERROR",
	CodeHANotAvailable:                  "HA_NOT_AVAILABLE",
	CodeNotImplemented:                  "NOT_IMPLEMENTED",
	CodeProxyTimeout:                    "PROXY_TIMEOUT",
	CodeMasterPersistenceTimeout:        "MASTER_PERSISTENCE_TIMEOUT",
	CodeSlavePersistenceTimeout:         "SLAVE_PERSISTENCE_TIMEOUT",
	CodeUnsupported:                     "UNSUPPORTED",
	CodeVersionUnsupported:              "VERSION_UNSUPPORTED",
	CodeVerifyFIFOMessageUnsupported:    "VERIFY_FIFO_MESSAGE_UNSUPPORTED",
	CodeFailedToConsumeMessage:          "FAILED_TO_CONSUME_MESSAGE",
}

// String returns the code's name in the protocol (TOPIC_NOT_FOUND), or
// CODE_<number> for a code this package does not know.
func (c Code) String() string {
	if s, ok := codeNames[c]; ok {
		return s
	}
	return "CODE_" + strconv.Itoa(int(c))
}

// Class returns the class a refusal with this code matches; nil for the
// codes that mean success (OK, MULTIPLE_RESULTS) and for CODE_UNSPECIFIED.
func (c Code) Class() error {
	n := int32(c)
	switch {
	case c == CodeOK || c == CodeMultipleResults || c == CodeUnspecified:
		return nil
	case c == CodeMessageBodyEmpty || c == CodePreconditionFailed:
		return ErrBadRequest
	case n >= 40000 && n < 40100:
		return ErrBadRequest
	case n == 40100:
		return ErrUnauthorized
	case n == 40200 || n == 40300:
		return ErrForbidden
	case n >= 40400 && n < 40500:
		return ErrNotFound
	case n == 40800:
		return ErrTimeout
	case n >= 41300 && n < 41400, n >= 43100 && n < 43200:
		return ErrTooLarge
	case n >= 42900 && n < 43000:
		return ErrThrottled
	case n >= 50000 && n < 50100:
		return ErrInternal
	case n >= 50400 && n < 50500:
		return ErrTimeout
	case c == CodeFailedToConsumeMessage:
		return ErrInternal
	default: // 501xx, 505xx and codes this package does not know
		return ErrUnsupported
	}
}

// Stored reports whether a send answered with this code was written by the
// broker although it failed: the durability or the replication of the
// message could not be confirmed (MASTER_PERSISTENCE_TIMEOUT,
// SLAVE_PERSISTENCE_TIMEOUT, HA_NOT_AVAILABLE). Sending it again would
// store a second copy.
func (c Code) Stored() bool {
	switch c {
	case CodeMasterPersistenceTimeout, CodeSlavePersistenceTimeout, CodeHANotAvailable:
		return true
	}
	return false
}

// Refusal is a broker's lasting refusal of a client, as RocketMQ worded it:
// what producer and consumer State report per broker and per cluster
// (producer.Refusal and consumer.Refusal are this type). Retrying at the
// same broker cannot mend it.
type Refusal struct {
	// Code is RocketMQ's status code (e.g. 40402) and CodeName its name
	// (TOPIC_NOT_FOUND, CONSUMER_GROUP_NOT_FOUND). When the server answered
	// with a gRPC status only, Code is 0 and CodeName names that status
	// ("grpc InvalidArgument").
	Code     int32
	CodeName string
	Message  string
	// RPC is the call refused (Telemetry for the client's settings,
	// QueryRoute, SendMessage, ReceiveMessage) and Endpoint where it went.
	RPC      string
	Endpoint string
	// Since is when this refusal was first seen; it has lasted since.
	Since time.Time
}

func (r *Refusal) Error() string {
	where := r.RPC
	if where == "" {
		where = "a call"
	}
	if r.Endpoint != "" {
		where += " to " + r.Endpoint
	}
	switch {
	case r.Code != 0:
		return fmt.Sprintf("broker refused %s: %s (%d): %s", where, r.CodeName, r.Code, r.Message)
	case r.CodeName != "":
		return fmt.Sprintf("broker refused %s: %s: %s", where, r.CodeName, r.Message)
	default:
		return fmt.Sprintf("broker refused %s: %s", where, r.Message)
	}
}
