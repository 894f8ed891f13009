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
//     answer with EndTransaction. A RocketMQ broker finds the half
//     message by its commit log offset (SendResult.CommitLogOffset), and
//     4.x brokers answer no transaction id: the message's id stands for it,
//     as the 5.x brokers' answer does.
//   - Reading back: PULL_MESSAGE of one queue from an offset, every tag,
//     no long polling (Pull), the stored messages decoded with their
//     properties. The minimum the suite needs; the consumer half builds on
//     it.
//
// # What is not yet
//
// A transaction checker interface of the producer's shape (the Handler is
// the hook), delayed messages with a typed error on brokers without the
// timer (the property TIMER_DELIVER_MS can be set by hand; a broker's
// Version, known from any earlier response, says whether it has the
// timer), the ACL signature, TLS, compression, the consumer half (long
// polling pulls with committed offsets, pop, rebalance),
// and the wiring into the producer and the configuration (a cluster's
// protocol).
//
// # Proven against
//
// The suite (internal/remoting/remotingsuite) runs against the embedded
// broker in `go test` and, in `make interop`, against RocketMQ 5.4.0's
// broker and RocketMQ 4.9.7's broker through their name servers, with both
// header serializations.
package remoting
