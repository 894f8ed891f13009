// Package broker serves the RocketMQ 5 gRPC protocol (apache.rocketmq.v2
// MessagingService) over the storage core of internal/store, and, with
// Config.RemotingListen, the classic remoting protocol beside it from the
// same store (remoting.go; NameServer is the in-process name server). One Broker is
// one gRPC endpoint with its own store, as a RocketMQ 5 broker running the
// proxy in Local mode; a cluster is several brokers that list each other
// (Peers) in QueryRoute answers. The public starter package embedded builds
// clusters of them for tests; cmd/twinmq-broker runs one standalone.
//
// # What it mirrors
//
// The protocol outcome model of the proxy: every RPC answers gRPC OK with a
// Status{code,message} in the body; validation uses the proxy's rules and
// codes (topic and group names, message id, tag, keys, message group, user
// property count, reserved keys, property size, body empty or too large,
// delivery time, topic type against message content, invisible and polling
// times, CLIENT_ID_REQUIRED without x-mq-client-id, an internal error when
// x-mq-language is not a remoting language code such as GO, BAD_REQUEST
// instead of ILLEGAL_POLLING_TIME for clients older than 5.0.3 or that send
// no x-mq-client-version). Telemetry stores the
// client's Settings per client id and echoes the merged Settings the proxy
// sends (producer: 3 attempts, exponential 10ms..1s backoff, 4 MiB body
// limit, type validation on; consumer: batch 32, long polling 20 s, the
// group's fifo flag and retry policy). ReceiveMessage streams exactly the
// proxy's shape: status, one response per message, delivery_timestamp; or
// MESSAGE_NOT_FOUND then delivery_timestamp; or an error status then
// delivery_timestamp.
//
// # Where it differs from the proxy, or follows it where one might not expect
//
//   - SendMessage honours the queue id the client puts in message 0's
//     system properties when it is a valid queue of the topic (the proxy
//     ignores it). An out-of-range id such as -1 lets the broker choose: the
//     message group's hash for a single FIFO message, else round robin. The
//     whole request lands contiguously in that one queue.
//   - SendMessage returns one SendResultEntry per message, each with its own
//     message id (the client's) and queue offset; the proxy returns one
//     entry for a whole batch.
//   - ReceiveMessage without a gRPC deadline answers BAD_REQUEST (the proxy
//     fails with an internal error). Settings are not required before
//     ReceiveMessage: the group's configuration supplies fifo and the
//     maximum attempts. A batch size <= 0 is BAD_REQUEST.
//   - Received user properties omit the system keys the proxy leaves in
//     them (__SHARDINGKEY, TRACE_CONTEXT, CHECK_IMMUNITY_TIME_IN_SECONDS):
//     they are in the system properties already.
//   - A send to a topic that does not exist answers
//     MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, as the proxy does (its type check
//     runs first and a missing topic has no type); QueryRoute answers
//     TOPIC_NOT_FOUND.
//   - SQL92 filters are refused (ILLEGAL_FILTER_EXPRESSION).
//   - EndTransaction of an already resolved transaction answers OK, and an
//     id naming no half message INVALID_TRANSACTION_ID (the proxy keeps
//     transaction data 30 s in memory and answers INTERNAL_SERVER_ERROR
//     without it).
//   - ReceiveMessage ignores attempt_id: a re-poll after an answer lost in
//     transit gets new messages, not the lost ones, which come back when
//     their invisible time ends (the broker's pop returns the same messages
//     for a repeated attempt id).
//   - Limits.MinInvisible and Limits.MinLongPolling may be lowered below the
//     proxy's 10 s and 5 s so that tests of redelivery run fast.
//   - A message read from a dead-letter topic carries dead_letter_queue
//     (origin topic and message id), an extension: the proxy leaves it
//     unset on what it reads from %DLQ%<group>. Clients that ignore the
//     field see no difference.
//
// # Pop consumption
//
// Each (group, topic, queue) has a committed offset (everything before it is
// done), a next offset (never delivered from there on), the set of offsets
// acked ahead of an older message still in flight, and the in-flight
// deliveries with their attempt count and invisibility deadline, kept in a
// heap by deadline. A receive takes due redeliveries first, then new
// messages; a message whose invisible time passed without an ack is
// delivered again with delivery_attempt + 1, in place (no retry topic is
// needed because the state is per group). A nack is a
// ChangeInvisibleDuration to a short time. delivery_attempt is the group's
// delivery count plus the reconsume count the stored message carries (0
// for a fresh send), and the group's maximum attempts are counted against
// it. When a message about to be delivered already had the group's maximum
// attempts, it is appended to the dead-letter topic %DLQ%<group> (one
// queue, routable and receivable like any topic) instead, and acked. The
// copy's reconsume count follows the proxy, so a reader of the dead-letter
// topic sees the same delivery_attempt as on RocketMQ: attempts made + 2
// after an automatic move (the pop that found the attempts used up counts,
// as the proxy's), attempts made + 1 after ForwardMessageToDeadLetterQueue.
// A group reading its own dead-letter topic is the exception: its messages
// are delivered whatever their attempts, and never dead-lettered again
// (into the topic being read, each pop would append them once more). A
// ForwardMessageToDeadLetterQueue of such a message answers OK and appends
// nothing: the delivery stays in flight and comes back when its invisible
// time ends, as a nack would.
// A FIFO group's queue delivers nothing while
// one of its messages is in flight, and redelivers strictly by offset.
// Messages the tag filter excludes are acked on the way, as the proxy does.
// A message with a future delivery time is held invisible until then
// without counting an attempt; only batches get there, as a single
// delayed message waits in the timer store (below). Long polls wake on the
// store's arrivals, on acks and nacks of the group, and at the earliest
// in-flight deadline.
//
// The receive and ack paths are kept cheap because consumption has to keep
// up with batched production: a pop hands out the messages the store read
// without copying them; a receive converts its whole batch (the MD5 body
// digest included, computed per delivery as the proxy does) before writing
// the first message, so gRPC coalesces the responses into few socket
// writes while the frames stay one message each; an AckMessage decodes
// every handle first and then acks all entries of one group state under a
// single hold of its lock. Progress is never written on the ack path: acks
// only bump a version that the checkpoint loop looks at.
//
// Receipt handles are opaque base64url records (broker, topic, queue,
// offset, delivery nonce, pop time, deadline, CRC32). A handle acts only
// while its nonce is the one recorded for the message in flight (the
// current delivery): an ack, a re-delivery or a ChangeInvisibleDuration
// makes older handles stale. Status codes follow the proxy, which judges a
// handle by its own invisible time only (we apply the same rule to
// ForwardMessageToDeadLetterQueue):
//
//   - Past its deadline (the current delivery's deadline, auto renewals
//     included, for the current handle; the deadline it was issued with for
//     a stale one) a handle is INVALID_RECEIPT_HANDLE for Ack,
//     ChangeInvisibleDuration and ForwardMessageToDeadLetterQueue. A
//     handle that does not decode is INTERNAL_SERVER_ERROR; one never
//     issued to the group (no state for its queue, or an offset the group
//     was never given) is INVALID_RECEIPT_HANDLE.
//   - Within its deadline a stale handle answers OK and changes nothing.
//     So acks are idempotent (a retried ack succeeds; so does an ack with
//     the handle a ChangeInvisibleDuration replaced), and an old handle
//     never acks, hides or dead-letters a newer delivery of the message,
//     which stays with whoever received it: at worst the message is
//     delivered again, never lost. The real broker does the same for acks
//     (an ack names one pop check point; one that was already acked,
//     changed or revived is ignored).
//   - ChangeInvisibleDuration with a stale handle returns a fresh handle
//     that names nothing (acking it is a no-op as well). Here we differ in
//     effect, not in code: the real broker writes a new check point for
//     any handle it is given, so it delivers an acked message once more
//     after the new invisible time; we do not resurrect a message that is
//     done. Likewise a stale ForwardMessageToDeadLetterQueue writes no
//     second dead-letter copy.
//
// Receives with
// auto_renew get the proxy's 60 s slices renewed while the client lives
// (Telemetry open or heard of within 120 s), up to 3 h.
//
// Progress persists as an atomically replaced checkpoint (see progress.go):
// written when changed every CheckpointInterval and on Close. After a crash
// the acks of the last interval may be redelivered (at-least-once); after a
// clean Close nothing acked is redelivered, and handles issued before the
// restart stay valid.
//
// # Delay, transactions, security (features.go)
//
// A single message with a delivery time goes to the timer store (package
// timer: system topic rmq_sys_wheel_timer, timing wheel, timer log,
// DataDir/timer) and is appended to its topic and queue at that time,
// keeping its delivery time; the send result's offset is its offset in the
// timer topic. A transactional message is stored as a half message (package
// txn: RMQ_SYS_TRANS_HALF_TOPIC and RMQ_SYS_TRANS_OP_HALF_TOPIC) and the
// result carries its transaction id; EndTransaction commits it to its topic
// or drops it; an orphan is checked back with a
// RecoverOrphanedTransactionCommand on the Telemetry stream of a live
// producer of the topic. Consumers never see the system topics: their
// names are refused as user topics. Both survive restarts.
//
// Security.TLS serves TLS instead of plaintext (the proxy accepts both on
// one port). Security.Auth checks every request with the access-key scheme
// and ACL of package auth before the broker looks at it, answering
// UNAUTHORIZED or FORBIDDEN in the body as the proxy with ACL 2.0. Both
// apply to the remoting port too (remoting_security.go): TLS on its
// listener (and on StartNameServerTLS's), and the classic remoting
// signature (AccessKey, Signature) checked on every request, a refusal
// answered NO_PERMISSION as a RocketMQ broker with ACL 2.0 answers it.
//
// # Decoding SendMessage (send_wire.go, send_form.go)
//
// SendMessage is the hot path of batched production, one serial chain per
// batch, so the broker decodes its request itself instead of through the
// generated types: the registered service is the generated description
// with a SendMessage handler that hands the codec a sendRequest
// (pbcodec.BufferUnmarshaler). It takes ownership of the received buffer,
// reads it with protowire and keeps each body as a view of it; the store
// copies the bodies into its record when it appends, and the buffer goes
// back to the codec's pool once the handler and the interceptors around it
// return. Nothing after the send refers to a body: the timer and the
// transaction manager keep only strings, which the decoder copies (into
// one arena per request, never aliasing the buffer). The decoder follows
// protobuf's rules wherever they change the outcome (any field order,
// unknown fields skipped, repeated singular messages merged, last scalar
// wins, proto3 strings must be UTF-8) and refuses whatever proto.Unmarshal
// refuses, which gRPC answers with INTERNAL as it did before; a
// differential test and a fuzz target hold it to that. Both decoders fill
// one form (sendMsg), and one validation (planSend) applies the proxy's
// rules to it, so the generated path (decodeSend, still served by
// service.SendMessage) and the wire path cannot drift apart. The
// interceptors see the sendRequest: auth reads its topic through
// auth.Publisher. The response of the wire path encodes itself as well
// (sendReply: the bytes proto.Marshal writes, at half its cost for a batch).
//
// The remoting server reads each connection in one goroutine and hands its
// requests to workers of the connection: an idle one, or a new one when
// none is idle, so a request that waits (a send held for a flush or by a
// fault) never stops the read loop or delays the answers behind it. Up to
// 16 workers stay for the next requests (their stacks grown); the rest end
// after their request. Answers are encoded into the connection's write
// queue and coalesced as the remoting client's requests are (one writer at
// a time writes all that is queued), and send properties are read into
// pairs, not a map. Every worker ends with its connection, which Close
// waits for.
//
// # Fault injection
//
// Faults (pause, added latency, fail the next N calls with gRPC UNAVAILABLE
// or an in-body status) wrap every RPC, and every send over remoting (an
// injected failure answers SERVICE_NOT_AVAILABLE there), for the failover
// tests of the starter package; Close and a new Broker on the same Config
// restart a broker on the same port and data dir. The remoting answers
// carry RocketMQ 5.4.0's version by default; SetRemotingVersion makes them
// say another (a 4.x broker's, to a client that must then do without the
// timer).
package broker
