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
//   - NameServer: GET_ROUTEINFO_BY_TOPIC with a parser that accepts
//     fastjson's non-string map keys ({0:"host:port"}), failover across
//     several name servers, and a periodic refresh helper.
//   - Producer calls: HEART_BEAT for a producer group, UNREGISTER_CLIENT,
//     SEND_MESSAGE_V2 (single-letter header) and SEND_BATCH_MESSAGE (the
//     batch body), each message with its own id (the client's UNIQ_KEY)
//     and queue offset; properties as RocketMQ writes them (TAGS, KEYS,
//     __SHARDINGKEY for a message group, TRACE_CONTEXT, user properties
//     such as the lane's). Response codes map to the rmqerr classes
//     (ResponseError, CheckResponse).
//   - Transactions: half messages (Message.Transaction: TRAN_MSG, PGROUP,
//     the prepared sysFlag), END_TRANSACTION (oneway, as RocketMQ's
//     clients send it), and the broker's CHECK_TRANSACTION_STATE parsed
//     from its stored-message body (ParseTransactionCheck) for a Handler to
//     answer with EndTransaction.
//
// # What is not yet
//
// A transaction checker interface of the producer's shape (the Handler is
// the hook), delayed messages with a typed error on brokers without the
// timer (the property TIMER_DELIVER_MS can be set by hand), compression,
// the consumer half (pull, pop, rebalance), and the wiring into the
// producer and the configuration (a cluster's protocol). The producer,
// consumer and config packages do not use this package yet. Against a
// real RocketMQ (5.4.0, internal/interop) only the signature, TLS and the
// binary request header are checked so far; the suite
// (internal/remoting/remotingsuite) runs against the embedded broker.
package remoting
