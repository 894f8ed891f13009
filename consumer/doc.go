// Package consumer consumes a logic topic for a consumer group from both
// clusters behind it, runs a handler per message, retries and dead-letters
// what fails, and routes each message to the consumers of its lane.
//
//	c, err := consumer.New(ctx, "billing", "orders", handle,
//		consumer.WithSource(config.File("twinmq.json", config.FileOptions{})),
//		consumer.WithLaneRegistry(reg), consumer.WithForwardToken(token))
//	...
//	defer c.Close(ctx)
//
// # Receiving
//
// The API is push style (a handler is called), the wire is pop style: the
// only consumption a RocketMQ 5 proxy serves. For every cluster of the
// topic the consumer runs one RocketMQ client (its own client id, the
// cluster's physical topic in its subscription, the cluster's TLS and
// credentials) and, for every broker in the cluster's route, a few long
// polls at once (ReceiveMessage with an explicit invisible duration). A
// real proxy is one endpoint serving all its brokers, so a broker is its
// name at its endpoint; the embedded brokers have an endpoint each. All
// clusters are consumed whatever their producer weight: a drained cluster
// still holds messages. A cluster that is down only makes its loops back
// off (200 ms doubling to 5 s); the others go on. The route is looked at
// every 5 s, so brokers added to a cluster are picked up.
//
// The client registers as a SIMPLE_CONSUMER, not a PUSH_CONSUMER, because
// the consumer wants the invisible time in its own hands: with auto renew
// the proxy would extend it while the client lives, even for a message a
// stuck handler will never finish, and a nack could not choose its delay.
//
// # Settling
//
// A message is acked only after a handler succeeded, here or at the
// consumer of its lane. Acks of concurrent handlers to one broker share
// AckMessage calls (while one call is in flight the next ones gather), and
// a failed ack is retried twice; an ack that still fails means a
// redelivery, which at-least-once allows.
//
// While a message waits for a handler slot, runs, or is forwarded, its
// invisible time (WithInvisibleDuration, 30 s by default) is extended
// whenever less than two thirds of it are left, so a slow handler never
// sees its message redelivered to another consumer underneath it. Each
// extension returns a new receipt handle; the settle call that follows
// uses the newest one.
//
// A handler error or panic (recovered, logged with its stack, counted as
// "panic") is a failure: the message is made visible again after the
// backoff of its attempt (WithRetryBackoff, else the retry policy the
// server pushes for the group, else 1 s doubling to 60 s), and the broker
// delivers it again with the attempt counted up. A failure on the group's
// last attempt (consumers.<group>.maxAttempts, live) moves the message to
// the group's dead-letter topic instead; the broker's own maximum is a
// backstop behind it. A message whose body fails its digest or cannot be
// decompressed never reaches the handler: it goes to the dead-letter topic
// at once with an error log line, since no retry can mend it and it must
// not block its queue.
//
// # Order
//
// When the servers say the group is ordered (a FIFO group), or with
// WithOrdered, the messages of one message group are handled one after the
// other in the order received; messages without a group, and different
// groups, run in parallel. A failure is retried in place after its backoff
// (the invisible time extended meanwhile): handing it back to the broker
// would let nothing else of its group pass anyway, and in place the next
// attempt comes sooner. After the last attempt it is dead-lettered and the
// group moves on, as RocketMQ's own clients do. A message that must be
// left for redelivery (see lanes) stops its group: it and everything after
// it are nacked, and the broker, which serves an ordered queue by offset,
// delivers them again in order.
//
// # Limits and live settings
//
// The settings of a group are its entry in the configuration's consumers
// map. A group the map does not list runs on the defaults
// (config.DefaultConcurrency handlers, config.DefaultMaxAttempts attempts,
// the base lane unless WithLane pins one); New says so once, at Warn.
//
// consumers.<group>.concurrency bounds the handlers running at once, local
// and forwarded ones together. WithMaxInflight bounds the messages received
// and not yet settled (default four times the concurrency, at least 1024):
// no receive starts while it is reached, and a receive asks for no more
// than the room left. Concurrency, maximum attempts, this consumer's lane
// (unless pinned with WithLane) and the lane settings follow the
// configuration live; work in progress finishes under the settings it
// started with. The clusters of the topic follow too: an added cluster is
// consumed at once; a dropped or changed one (endpoints, physical topic,
// TLS, credentials) stops receiving, handles and settles what it received,
// and only then closes its client, so a reload loses nothing in flight.
//
// # Lanes
//
// With WithLaneRegistry every consumer registers (group, lane, forwarding
// address) under a lease of lanes.leaseTTL, renewed at a third of it, and
// watches the group's snapshot. Before the handler each message is routed
// by the lane package's rules (see its doc): the longest live prefix of its
// lane, else base. If that is this consumer's lane, the handler runs here.
// Otherwise the message is forwarded over twinmq.forward.v1.Forwarder to an
// instance of the target lane picked by failover (healthy instances first),
// while its invisible time keeps being extended, and acked only when the
// target answers HANDLED. A target's HANDLER_FAILED is a failure of the
// message like a local one (nack, or dead letter after the last attempt).
//
// What a forward proves decides what happens next, so that no message is
// handled by two lanes:
//
//   - Not delivered (the connection could not be made within 2 s or its
//     last attempt failed, gRPC refused the call before the service saw it
//     (a message over the peer's size limit, a peer without the service),
//     or the target answered NOT_MY_LANE: it is closing, moved lane, or the
//     caller lacked the token): the handler did not run there. Another
//     instance of the lane is tried, then the next fallback level with the
//     lane counted as dead, down to base. A connection whose last attempt
//     failed is tried again at once (at most every 100 ms), so the only
//     instance of a lane, back at the same address, takes the next
//     forwards; where the lane has others, failover keeps a failed
//     instance out until it is probed back (failover's quarantine). Forwarded
//     deliveries may be as large as the largest body the client decodes
//     (64 MiB).
//   - Unknown (the call failed after it may have reached the target, or
//     lanes.forwardTimeout passed): the target may have run the handler, so
//     no other lane is tried. The message is held: made visible again after
//     its backoff and routed afresh, by which time the registry's view has
//     usually settled.
//   - Nobody can take it (no live base instance for a message that resolves
//     to base): held as well, logged and counted; after the broker's maximum
//     attempts it lands in the dead-letter topic, never in a lane it does
//     not belong to.
//
// lanes.forwardTimeout therefore also bounds a forwarded handler: a handler
// slower than it is cut (its ctx ends) and its message redelivered.
// lanes.enabled=false is the kill switch: every consumer then handles what
// it receives, whatever the lane.
//
// The forwarding service runs the handler for messages of this consumer's
// lane, within the same concurrency limit. It refuses a caller without the
// group's token (metadata twinmq-forward-token, compared in constant time)
// with gRPC UNAUTHENTICATED; WithForwardTLS adds TLS, mutual with a
// server configuration that requires client certificates. It listens on
// loopback by default (WithForwardListen sets the address others dial).
//
// The handler's ctx carries the message's lane (lane.WithLane), here and at
// a forward target, so a producer called from the handler stamps the same
// lane on what it sends.
//
// # Shadow traffic
//
// When the configuration gives the topic shadow topics, names shadow
// groups (shadow.groupPrefix/groupSuffix) and has shadow.enabled on, a
// consumer of group G also consumes the shadow topics in G's shadow group,
// through a second consumer it owns and closes: its own RocketMQ clients,
// receive loops and limits (the group's settings), lane registration in
// the shadow group and forwarding service (WithShadowForwardListen). The
// handler is the same, with lane.WithShadow(ctx, true) in its ctx and
// Message.Shadow set, so what it sends downstream is shadow traffic too;
// on the production side the ctx is explicitly marked production. The
// topic a message was received from decides, not its property: a message
// of a production topic is production traffic whatever it carries.
// Offsets, retries and dead letters belong to the group on the broker, so
// a separate group keeps every one of them apart from production.
//
// The shadow side follows the document live: it starts when the three
// conditions hold (retrying every 5 s while it cannot, a shadow topic
// missing on the brokers say; ShadowState says why), takes every new
// version, and stops gracefully (what it received is handled and settled)
// when the kill switch goes off, the topic loses its shadow topics or the
// shadow group's name changes. Messages left in the shadow topics while it
// is off wait there for the next start. ShadowState returns its State.
//
// # State
//
// State returns what the consumer is doing, as plain data: the
// configuration revision it applied and the latest version refused (by the
// watcher as invalid, or by the consumer as impossible to apply, with the
// error), and per cluster of the topic whether its route is known or the
// servers refuse the consumer, and per broker whether the session is up
// (Connected), whether the latest receive did not fail (Receiving), the
// refusal in force (Refused: RocketMQ's code, its name and message, the
// call refused, since when) and the latest error. A misconfigured consumer
// is visible there even with the default logger, which discards
// everything: a group the brokers do not know, receive settings below
// their floors, credentials they reject. When every cluster refuses the
// consumer outright, New fails with ErrRefused instead.
//
// # Hooks
//
// WithHooks adds values implementing ReceiveHook or HandleHook, which the
// OpenTelemetry module (contrib/otel) implements; the consumer itself
// imports no tracing library. A receive hook hears of each receive call
// that brought messages, before their handlers run; a handle hook hears of
// each handler run (received here, forwarded here, redelivered, or a
// verification request), replaces the handler's ctx if it likes (a tracing
// hook puts the span there), and hears the handler's error. A Message's
// TraceContext is the producer's trace context, from RocketMQ's
// trace-context system property; lane forwarding carries it along.
//
// # Verification requests
//
// An operator can ask a broker to have a consumer consume a given message
// directly (RocketMQ's "consume message directly"). The consumer answers
// as RocketMQ's Java push consumer does: the message runs through the
// handler here, whatever its lane, within the concurrency limit, and the
// answer is the handler's outcome (a message that cannot be decoded is
// answered as corrupted without reaching the handler). Nothing is acked or
// nacked: the message is not this consumer's delivery. The run counts in
// handled_total like any other.
//
// # Close
//
// Close leaves the registry and refuses new forwarded deliveries (callers
// with a stale view try elsewhere at once), stops receiving (long polls
// are cancelled; a message a broker had already popped for a cancelled poll
// comes back after its invisible time), lets every received message run
// to its end and be settled, waits for the forwarded deliveries being
// served, and tells the brokers the client is gone. If Close's ctx ends
// first, handler contexts are cancelled, unsettled messages come back after
// their invisible time, and Close returns the ctx's error.
//
// # Errors
//
// New fails with an error that matches, with errors.Is:
//
//   - the context's error (context.Canceled, context.DeadlineExceeded)
//     when ctx ended before New or while it waited for the first version
//     of the configuration, however soon that version was there; never
//     ErrInvalidConfig for it;
//   - ErrInvalidConfig for bad options or arguments (group, topic,
//     handler), a configuration that is invalid, unreadable or missing (a
//     file source's file that does not exist; these also match
//     config.ErrInvalidConfig), a Registerer already holding a consumer's
//     metrics, or a forwarding address that cannot be listened on;
//   - ErrUnknownTopic when the configuration does not define the topic;
//   - ErrUnsupported (which also matches ErrInvalidConfig) when a cluster
//     of the topic speaks the remoting protocol (protocol "remoting"): the
//     producer sends to such clusters, the consumer does not consume them
//     yet. The error names the cluster's path in the document. A reload
//     that adds such a cluster is refused the same way, and the previous
//     configuration keeps serving;
//   - the lane registry's own error, wrapped, when it cannot be watched or
//     joined.
//
// The producer's New behaves the same. Close returns nil, or ctx's error
// when ctx ended before everything was settled. Failures after New (a
// broker that cannot be reached, a refused ack, a handler's panic) are
// retried or redelivered as above and reach the logger: the RocketMQ
// client's errors there match the classes of package rmqerr and carry a
// broker's refusal as an *rmqerr.Error (its status code and message), and
// a handler's panic wraps ErrHandlerPanic.
//
// # Metrics
//
// With WithRegisterer, every series labelled by group, topic and shadow
// ("true" for the shadow side, which counts under the production group's
// name, "false" otherwise):
//
//   - twinmq_consumer_received_total{cluster}: messages received.
//   - twinmq_consumer_redeliveries_total: received with an attempt above 1.
//   - twinmq_consumer_handled_total{result}: handler runs (ok, error, panic,
//     canceled).
//   - twinmq_consumer_handler_duration_seconds: time a handler ran.
//   - twinmq_consumer_forwarded_total{result}: messages forwarded to
//     another lane's consumer.
//   - twinmq_consumer_forward_duration_seconds: one forwarded delivery, the
//     remote handler included.
//   - twinmq_consumer_fallback_level_total{level}: routed messages by the
//     fallback level used (0 = the message's own lane).
//   - twinmq_consumer_forward_served_total{result}: forwarded deliveries
//     served here.
//   - twinmq_consumer_held_total: left for redelivery, no lane could take
//     them.
//   - twinmq_consumer_dead_letters_total{reason}: moved to the dead-letter
//     topic.
//   - twinmq_consumer_settle_errors_total{op}: failed ack, nack, renew or
//     dead-letter calls.
//   - twinmq_consumer_malformed_lane_total: lane property malformed,
//     handled as base.
//
// Plus the RocketMQ clients' twinmq_driver_*{cluster,client} series (one
// client per cluster) and, for a consumer that started its own
// configuration watcher,
// twinmq_config_reloads_total{watcher="consumer/<group>/<topic>"}. Close
// removes every series of the consumer.
package consumer
