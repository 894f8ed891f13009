// Package auth authenticates and authorizes the broker's clients with the
// access-key scheme of RocketMQ 5 and rules in the spirit of its ACL 2.0.
//
// # Authentication
//
// A client signs each call: the gRPC metadata carries x-mq-date-time (any
// string, in practice yyyyMMdd'T'HHmmss'Z') and
//
//	authorization: MQv2-HMAC-SHA1 Credential=<AK>[/...], SignedHeaders=x-mq-date-time, Signature=<hex>
//
// where the signature is HMAC-SHA1 under the user's secret key of the
// x-mq-date-time value. The header is parsed as the proxy does: the scheme
// up to the first space, then comma-separated items, each trimmed and split
// at its first '='; the credential's first '/'-separated element is the
// access key (the Go client appends "//Rocketmq", the Java client nothing);
// the signature is hex in either case and is compared in constant time.
// SignedHeaders is not interpreted and there is no clock-skew check, exactly
// as in the proxy. A missing header, an unknown access key or a wrong
// signature is UNAUTHORIZED (40100). Unlike the proxy, a scheme other than
// MQv2-HMAC-SHA1 is refused rather than ignored.
//
// # Authorization
//
// Each user lists the topics it may publish to, the topics it may
// subscribe to and the consumer groups it may consume as (an exact name,
// "*", or a prefix ending in "*"); a super user may do everything. The
// permission each request needs follows RocketMQ's
// DefaultAuthorizationContextBuilder:
//
//	SendMessage, RecallMessage, EndTransaction   publish on the topic
//	QueryRoute                                   publish or subscribe on the topic
//	Heartbeat of a consumer, ChangeInvisibleDuration,
//	NotifyClientTermination with a group         subscribe on the group
//	ReceiveMessage, AckMessage, QueryAssignment,
//	ForwardMessageToDeadLetterQueue              subscribe on the group and the topic
//	Telemetry Settings                           publish on each publishing topic, or
//	                                             subscribe on the group and each topic
//
// A Settings with neither publishing nor subscription is refused. Denied
// requests get FORBIDDEN (40300). A request of another type that implements
// Publisher (the broker's own decoding of SendMessage) needs publish on the
// topic it names.
//
// # Where it runs
//
// Check does both steps for one request message. The interceptors run it
// on every unary request, on the ReceiveMessage request and on every
// inbound Telemetry command (with the stream's headers), and answer as the
// proxy with ACL 2.0: gRPC OK with the status in the response body; a
// refused ReceiveMessage streams the status then a delivery_timestamp; a
// refused Telemetry command gets one command carrying only the status and
// the stream completes. A refused request never reaches the broker, so no
// data leaves it.
package auth
