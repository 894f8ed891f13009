// Package remoting is a driver for RocketMQ's classic "remoting" protocol,
// the one every 4.x and 5.x broker and name server speaks on its own port
// (the gRPC driver in internal/driver reaches 5.x clusters through the
// proxy). The codec lives in internal/remoting/wire, shared with the
// embedded broker that serves the same protocol.
//
// # What is implemented
//
//   - Client: one multiplexed connection per address; requests matched to
//     responses by opaque; the caller's ctx bounds the dial, the backoff
//     wait and the response (its end is rmqerr.ErrTimeout wrapping the
//     context's error); a lost connection fails its pending requests with
//     rmqerr.ErrUnavailable and is dialled again after a backoff that
//     doubles with consecutive failures; requests a server sends on the
//     same connection (CHECK_TRANSACTION_STATE and the like) go to a
//     Handler; Close cuts the connections and waits for every goroutine.
//   - Access keys and TLS: WithCredentials (and WithSecurityToken) signs
//     every request the client sends, oneway included, as RocketMQ's
//     AclClientRPCHook does (wire.Signature); answers to a server's
//     requests are not signed, as in RocketMQ. A RocketMQ 5 broker with
//     ACL 2.0 and the embedded broker with Security.Auth refuse a missing
//     or wrong signature with NO_PERMISSION (rmqerr.ErrForbidden).
//     WithTLS dials TLS (RocketMQ serves it on the same port in tlsMode
//     permissive, its default, or enforcing).
//   - Speed: writes are coalesced. A caller appends its encoded frame
//     to the connection's queue; if no write is under way it writes the
//     queue itself (its frame and those before it) in one syscall under
//     its own ctx deadline, so alone it hands off to no goroutine; frames
//     queued during that write leave together in the next one, written by
//     a background flush (in the client's WaitGroup, each write bounded by
//     a 30 s stall), never by a caller past its own batch. A failed or
//     timed-out write drops the connection and fails the requests on it.
//     Responses are read through a buffer; headers are encoded straight
//     into the frame and JSON headers of the usual shape are read without
//     encoding/json (wire). JSON stays the default serialization, as
//     Java's: RocketMQ 5.4.0 accepts binary request headers but answers
//     in its own serialization (JSON), so the binary form saves little.
//     A batch body is encoded in one pooled buffer, each message's
//     properties written straight into it in key order (no map or string
//     per message; byte for byte what wire.EncodeProperties writes for the
//     same properties), and reused once its frame is queued (the queue
//     holds a copy).
//   - NameServer: GET_ROUTEINFO_BY_TOPIC with a parser that accepts
//     fastjson's non-string map keys ({0:"host:port"}), failover across
//     several name servers, and a periodic refresh helper.
//   - Producer calls: HEART_BEAT for a producer group, UNREGISTER_CLIENT,
//     SEND_MESSAGE_V2 (single-letter header) and SEND_BATCH_MESSAGE (the
//     batch body), each message with its own id (the client's UNIQ_KEY)
//     and queue offset; properties as RocketMQ writes them (TAGS, KEYS,
//     __SHARDINGKEY for a message group, TRACE_CONTEXT, user properties
//     such as the lane's). Response codes map to the rmqerr classes
//     (ResponseError, CheckResponse). A batch's own properties carry WAIT
//     only: brokers append them to each message they store, so anything
//     else there (a joined UNIQ_KEY) would overwrite every message's own.
//     A tag holding '|' is refused before sending (brokers store it, no
//     tag expression can select it). Each result carries the commit log
//     offset read from the broker's msgId (store host and offset) and the
//     version field of the broker's response (Version: the ordinal of its
//     release; V5_0_0 and later have the timer, a 4.x broker stores
//     TIMER_DELIVER_MS as a plain property and delivers at once).
//   - Transactions: half messages (Message.Transaction: TRAN_MSG, PGROUP,
//     the prepared sysFlag), END_TRANSACTION (oneway, as RocketMQ's
//     clients send it), and the broker's CHECK_TRANSACTION_STATE parsed
//     from its stored-message body (ParseTransactionCheck) for a Handler to
//     answer with EndTransaction. A RocketMQ broker finds the half message
//     by its commit log offset (SendResult.CommitLogOffset), and 4.x
//     brokers answer no transaction id: the message's id stands for it, as
//     the 5.x brokers' answer does.
//   - ProducerClient (driver.go): the producer's client of one remoting
//     cluster, in internal/driver's vocabulary (driver.Message,
//     driver.SendResult, driver.Route, driver.EndpointState,
//     driver.TransactionResolution), so that the producer drives it behind
//     the same unexported interface as the gRPC driver's Client. Routes
//     from the name servers (the access point first, then the cluster's
//     others), cached and refreshed every 30 s, masters only, each queue's
//     Endpoint the master's address; SEND_MESSAGE_V2 for one message and
//     SEND_BATCH_MESSAGE for several, to the queue the producer chose
//     (driver.AnyQueue: the broker's writable queues in turn), batches
//     split at MaxBody (4 MiB, RocketMQ's maxMessageSize) with a later
//     part's failure reported per message; HEART_BEAT for the producer
//     groups of its topics to every broker of its routes, every 30 s and
//     when a route names a new broker; UNREGISTER_CLIENT on Close.
//   - Producer groups: one per physical topic, ProducerGroupOf(topic) =
//     "twinmq-producer-<topic>", so that a broker asks only producers of
//     that topic about its half messages.
//   - Transactions in the producer's terms: a half message's
//     driver.SendResult.TransactionID is "<queueOffset>:<commitLogOffset>:
//     <broker's transaction id>" (the commit log offset read from the
//     broker's offset message id), what END_TRANSACTION needs besides the
//     message id; a CHECK_TRANSACTION_STATE goes to the producer's
//     driver.OrphanedTransactionFunc as a driver.ReceivedMessage (user
//     properties only) and a commit or rollback is answered with
//     END_TRANSACTION (fromTransactionCheck); unknown is not answered. At
//     most eight checks run the checker at once, each for at most a
//     minute, as over gRPC; a broker asking about more gets them answered
//     when it asks again.
//   - Delays: the broker's version is the MQVersion ordinal its answers
//     carry (learnt from a heartbeat before the first delayed send). From
//     5.0.0 (V5_0_0, ordinal 413) a DeliveryTime goes as
//     TIMER_DELIVER_MS; below it the send fails with ErrDelayUnsupported
//     (rmqerr.ErrUnsupported), never a delay level.
//   - Errors in the producer's classes: response codes as ResponseError
//     (FLUSH_DISK_TIMEOUT, FLUSH_SLAVE_TIMEOUT and SLAVE_NOT_AVAILABLE carry
//     a stored code, which driver.Retryable refuses to resend); the
//     caller's deadline as rmqerr.ErrTimeout wrapping
//     context.DeadlineExceeded, read as "may have been stored" as over
//     gRPC; a closed client as driver.ErrClosed; an oversized body as
//     rmqerr.ErrTooLarge before anything is sent.
//   - Reading back: PULL_MESSAGE of one queue from an offset, every tag,
//     no long polling (Pull), the stored messages decoded with their
//     properties. The minimum the suite needs; the consumer half builds on
//     it.
//
// # What is not yet
//
// Compression, slave brokers in routes, and the consumer half (long
// polling pulls with committed offsets, pop, rebalance): the consumer
// refuses a topic with a remoting cluster.
//
// # Proven against
//
// The suite (internal/remoting/remotingsuite) runs against the embedded
// broker in `go test` and, in `make interop`, against RocketMQ 5.4.0's
// broker and RocketMQ 4.9.7's broker through their name servers, with both
// header serializations. The signature, TLS and the binary request header
// are checked against 5.4.0's broker with ACL 2.0 on (internal/interop).
package remoting
