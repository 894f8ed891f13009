// Package driver is the client side of the RocketMQ 5 gRPC protocol
// (apache.rocketmq.v2.MessagingService): the only code in twinmq that knows
// the wire. The producer and the consumer are built on it; it talks to a
// real RocketMQ 5 proxy and to twinmq's embedded brokers through the same
// code path.
//
// # Model
//
// A Client is one client instance: one x-mq-client-id, one role (Producer,
// PushConsumer or SimpleConsumer), one consumer group for consumers. It
// talks to many endpoints ("host:port"): a real proxy is one endpoint per
// cluster, an embedded cluster is one endpoint per broker. Every call names
// its endpoint; the driver does not choose targets (failover does).
//
// Per endpoint the Client lazily creates a gRPC connection and a Telemetry
// stream. The stream sends this client's Settings and the first call to
// the endpoint waits (bounded by its ctx) for the server's Settings echo,
// because the proxy refuses receives and heartbeats of unknown clients.
// The stream stays open for the Client's life, is reopened with backoff
// (1 s doubling to 5 s, with jitter; the connection itself uses the same
// bounds instead of gRPC's two-minute default, so a restarted broker is
// usable again within seconds) after an error, and carries the
// server's commands: orphaned-transaction checks (answered through
// Config.OnOrphanedTransaction and EndTransaction with source
// SOURCE_SERVER_CHECK), thread-dump requests (answered with a goroutine
// dump) and message verification (an operator's "consume this message
// directly"): a consumer with Config.OnVerifyMessage runs the message
// through it, as RocketMQ's Java push consumer runs its listener, and
// answers OK, FAILED_TO_CONSUME_MESSAGE or, for a message that cannot be
// decoded, MESSAGE_CORRUPTED (the codes the proxy turns into the
// operator's result); other clients answer NOT_IMPLEMENTED, as the
// official producers and simple consumers do. Readiness is
// sticky after the first echo; before it, a failed attempt fails waiting
// calls at once with its error rather than letting them sit out their
// deadlines, so callers can fail over quickly. EndpointState tells whether
// an endpoint's current stream completed its handshake and why the latest
// attempt failed; a stream the server ended with a gRPC status whose text
// starts with a protocol code's name (how the embedded broker refuses
// Settings, e.g. "CONSUMER_GROUP_NOT_FOUND: ...") carries that code.
//
// Background work per Client: heartbeats every 10 s to every endpoint that
// completed its handshake, and a refresh every 30 s of every cached route.
// Close sends NotifyClientTermination to those endpoints, bounded by its
// ctx, then tears everything down.
//
// # Headers and signing
//
// Every call carries x-mq-client-id, x-mq-language=GO (a remoting language
// name; the proxy rejects GOLANG there), x-mq-protocol=v2,
// x-mq-client-version (ClientVersion, which must not be older than 5.0.3
// for the proxy's long-polling rules), x-mq-request-id, x-mq-date-time and,
// with Credentials, authorization: "MQv2-HMAC-SHA1 Credential=AK,
// SignedHeaders=x-mq-date-time, Signature=HEX(HMAC-SHA1(SK, date-time))".
// The date-time has second resolution, so the metadata (and signature) is
// built once per second and shared by all calls of that second; only the
// request id is added per call. Date-times are formatted in UTC.
//
// # Sends
//
// Send carries 1..N messages of one topic in one SendMessage request and
// returns one SendResult per message. The real proxy answers a batch with
// a single entry (the whole batch is stored contiguously in one queue,
// from the entry's offset); the embedded broker answers one entry per
// message. Both shapes are normalized to per-message results carrying the
// ids the client sent (generated in the official 34-hex-digit layout when
// the caller left them empty). Message.QueueID is honoured by the embedded
// broker (AnyQueue lets it choose) and ignored by the real proxy.
//
// The send path does not use the generated types. A batch is one serial
// chain (build, marshal, broker, reply, unmarshal, wake the senders), so
// the request encodes itself with protowire straight from the caller's
// messages (sendRequest, a pbcodec.WireMessage: sizes measured once, each
// length prefix written from them) and the response is decoded straight
// into the little normalization reads (sendResponse, a
// pbcodec.BufferUnmarshaler: no struct, Status or message id string per
// entry). Both follow protobuf to the letter and are tested against the
// generated types: the request parses to the message the generated
// builder made (byte for byte when no map order is involved); the decoder
// agrees with proto.Unmarshal on every input, including field order,
// merged occurrences, unknown fields, invalid UTF-8 and truncation. Strings
// a send carries are checked for UTF-8 before sending (ErrBadRequest), as
// the generated marshaller would have refused them during the call. The
// call goes through the connection's Invoke with the stub's options, so
// headers, signing and the user's interceptors see it as before; an
// interceptor receives the hand-coded request and response values, not
// generated messages. Ids generated for a batch share one clock reading,
// one allocation and one block of the sequence.
//
// # Receives
//
// Receive is a server-streaming call read to its end, with a deadline of
// the long polling time plus the request timeout. MESSAGE_NOT_FOUND is an
// empty result. Bodies are checked against the server's digest and
// decompressed when marked so (gzip or zlib); a failure marks the message
// with ErrCorrupted instead of failing the whole receive. Ack, Change
// invisible duration (which returns the new receipt handle), forward to the
// dead-letter queue and QueryAssignment complete the consumer side.
//
// # Errors
//
// Failures are *Error values carrying the protocol status code (or the gRPC
// code for transport failures), the RPC and the endpoint; errors.Is
// matches their class (ErrBadRequest, ErrUnauthorized, ErrForbidden,
// ErrNotFound, ErrTooLarge, ErrTooManyRequests, ErrInternal, ErrTimeout,
// ErrUnavailable, ErrUnsupported). Retryable says whether trying again,
// elsewhere or later, can help; it is false for a send the server wrote
// but could not confirm durable or replicated (MASTER_PERSISTENCE_TIMEOUT,
// SLAVE_PERSISTENCE_TIMEOUT, HA_NOT_AVAILABLE) and for a success whose
// result entries do not fit the request, because a resend duplicates. When the caller's own ctx ends, its error
// (context.Canceled / DeadlineExceeded) is returned wrapped instead, so a
// caller's cancellation is never blamed on an endpoint; the per-call
// request timeout expiring maps to ErrTimeout.
//
// # Costs
//
// The send path starts no goroutine and shares the per-second metadata;
// metrics (only with Config.Registerer) are a counter and a histogram per
// call.
//
// Connections use fixed HTTP/2 flow-control windows (8 MiB per stream, 16
// MiB per connection) and 256 KiB read and write buffers instead of gRPC's
// 64 KiB windows grown by a pinging estimator and 32 KiB buffers, so that a
// batched request or a receive of 32 messages is one write and one read
// each way, with no window updates or pings in between (see
// pbcodec.StreamWindow).
// Against RocketMQ 5.4.0's proxy this raised batched sends of 64 senders
// by a quarter and cut the proxy's CPU per message by a fifth. The codec
// and the transport share one buffer pool per Client that does not clear
// buffers before handing them out (pbcodec.Pool).
package driver
