// Package producer sends messages to logic topics: one name that the
// configuration maps onto a physical topic on each of several RocketMQ
// clusters (two data centres, usually), each reached through a gRPC proxy
// or straight over the classic remoting protocol. A plain Send is batched behind the
// caller's back, steered away from sick brokers, retried on another cluster
// when one fails, and follows configuration changes without a restart.
//
//	p, err := producer.New(ctx, producer.WithSource(config.File("twinmq.json", config.FileOptions{})))
//	...
//	res, err := p.Send(lane.WithLane(ctx, "gray"), &producer.Message{Topic: "orders", Body: b})
//	...
//	err = p.Close(ctx)
//
// # The path of a message
//
//  1. Validate at once, against the configuration in force: a known logic
//     topic, a body neither empty nor larger than 4 MiB, no property key
//     RocketMQ or this SDK reserves, a well-formed lane, and the limits a
//     RocketMQ proxy enforces (tag, keys, message group, property sizes,
//     delivery time at most a day ahead). Bad input gets a typed error
//     before anything is buffered.
//  2. Stamp: a message id generated here (the official 34-hex-digit layout;
//     it stays the same across retries, so a consumer can deduplicate), and
//     the lane of the context (lane.WithLane) as the lane property. The
//     caller's Message and its Properties map are never modified.
//  3. Pick a target with the topic's failover picker. Its resources are the
//     brokers of every cluster of the topic, as the clusters' routes list
//     them; a cluster's configured weight is split evenly over its brokers
//     and multiplied by each broker's health. Cluster priority forms
//     failover priority groups (the local data centre first, spilling to
//     the other by health). Picks are sticky: a topic keeps the broker
//     failover chose for 50 ms or sixteen batches' worth of bytes
//     (16 x batchMaxBytes), whichever ends first, then picks again; within
//     the broker, messages likewise stick to one queue for sixteen batches'
//     worth of bytes. Every change of broker or queue starts a new batch
//     key, whose first message leaves alone and whose batches take a few
//     round trips to grow back, so a pick lasts long enough for that to be
//     rare (at 64 synchronous senders, 20 ms and four batches' worth cost
//     about a tenth of the throughput). Over time the shares follow
//     weights and health as with a pick per message, but concurrent
//     messages meet in one batch instead of one small batch per broker and
//     queue: with 16 and 64 synchronous senders that cuts the CPU per
//     message of client and brokers together by two to three times
//     (BenchmarkProduce reports cpu-us/msg). Once a topic's batches
//     average 24 messages or more it
//     may keep two sticky picks and alternate between them, so that two
//     requests (two brokers, when failover picks two) are in flight side
//     by side instead of one serial chain. That is faster where the chain
//     is the limit and slower where the CPU is, so the producer measures:
//     it starts with two, tries the other width for a moment every 200 ms
//     (less often, down to every 3.2 s, while the trials confirm the
//     choice) and keeps whichever delivered more messages per second;
//     below 8 messages per batch it returns to one. A
//     failed request, a broker going down and a reload end the stickiness
//     at once.
//  4. Accumulate under the key (cluster, broker endpoint, physical topic,
//     queue), plus the message group for FIFO messages (package batch). A
//     key with nothing in flight sends at once, so a lone synchronous sender
//     never waits for a timer; while a request of the key is in flight, new
//     messages gather and leave together when it completes, or when the
//     batch is full, or after batching.maxDelay. batching.totalBatchMaxBytes
//     caps everything buffered or in flight, messages that go alone
//     included; senders wait (ctx-aware) while it is reached, or fail at
//     once with WithFailFast.
//  5. One SendMessage request per batch; every message gets its own result
//     (id, queue, offset: a proxy that answers a batch with one entry gives
//     message i the first offset plus i). A request is bounded by
//     timeouts.request and by its senders: a lone message's request ends
//     with its send's context, a batch's at the latest deadline of its
//     messages.
//  6. Report the outcome of the request to failover (one report per
//     request: it is the request that succeeded or failed at that broker).
//     A failed message is retried on a target it has not tried yet and
//     that is up; when it has tried them all (with none up: after one
//     attempt on a down one) it starts over after a growing pause. This goes on
//     until the caller's ctx ends (or timeouts.sendDeadline when ctx has no
//     deadline), so a dead cluster costs latency, not an error. Sends whose
//     ctx can never end (context.Background) share one timer per 10 ms of
//     deadlines rather than arm one each, and so end up to 10 ms after
//     their deadline.
//
// # Decisions
//
//   - Delayed messages always go alone, in a request of their own: RocketMQ
//     brokers apply the timer only to single messages. With batching off
//     (batching.enabled false) every message goes alone; FIFO messages
//     (Send and SendAsync alike) then wait in a line per group and queue,
//     one request in flight, as batched ones do in the accumulator.
//   - SendAsync and SendBatch do not wait for routes on the caller's
//     goroutine: when no target can be picked at once (no cluster has
//     answered yet), the send goes on in the background. FIFO messages are
//     the exception, since sends of a group in the background would race
//     each other: they wait for a target (within their context).
//   - FIFO: a message group batches only with itself and has at most one
//     request in flight, so the order of the Send calls of a group is the
//     stored order. The group hashes to one queue of one broker among the
//     healthy brokers of the preferred priority group; it moves only when
//     that broker is down. A move (or a retry elsewhere) can reorder the
//     messages in flight at that moment: order is kept while the target is
//     healthy, as in RocketMQ itself. A real RocketMQ proxy re-hashes single
//     FIFO messages itself but stores a multi-message request in one queue
//     of its choice; with a real proxy, messages of one group therefore
//     keep their order only if each is sent alone (send them with Send, one
//     after the other; concurrency within a group is what forms batches).
//   - Which failures are retried elsewhere: transport failures, timeouts,
//     throttling, server-side internal errors, a topic missing on one
//     cluster, and a client closed by a reload. A bad request, an oversized
//     message or refused credentials fail at once: another cluster would
//     refuse them too. Only the retried kinds count against a broker's
//     health. A request that got no answer within timeouts.request counts as
//     a timeout of that broker. So does one its senders gave up on (their
//     contexts ended first) after failover.slowRequest (default 500 ms)
//     without an answer: otherwise a broker that hangs would keep its
//     share of callers whose deadlines are all shorter than
//     timeouts.request. A caller that gives up sooner says nothing of the
//     broker.
//   - A broker that cannot be reached at all (connection refused or reset:
//     the driver's ErrUnavailable) is taken down at once, as the official
//     clients isolate such endpoints; other retryable failures halve its
//     weight. A down broker is probed with a Heartbeat every
//     failover.probeInterval and earns its traffic back gradually (see
//     package failover). While any broker of the topic is up, a down one
//     gets those probes and no sends: a retry that has tried the up
//     brokers pauses and starts over on them rather than falling back to
//     the down ones. Only when every broker is down does a send try a down
//     one, one per round of its retries, with pauses doubling from 20 ms
//     to 1 s within the send's deadline.
//   - Weight 0 drains a cluster: its brokers leave the picker (and lose
//     their health history, which matters little for a drained cluster).
//   - Routes: each cluster's route is asked through its endpoints in order;
//     the driver caches and refreshes it, and the producer looks at it every
//     second, so a cluster unreachable at start joins once it answers.
//   - Reload: a new configuration version is applied under one lock, all or
//     nothing: new clients and pickers are built first, then the topics,
//     weights, batch limits and timeouts are swapped in with atomic
//     pointers. Clusters and brokers that stay keep their routes and health;
//     a change of the failover section retunes each topic's picker in place
//     (failover.Picker.Reconfigure), so health, metric series, route
//     lookups and sends in flight all carry on with it. Sends in flight
//     finish on the target they picked, and a retry picks from the
//     configuration in force; nothing is dropped. A client no longer used is closed after
//     the longest a send could still need it.
//   - One RocketMQ client (one client id, one Telemetry stream per
//     endpoint) serves a cluster and one setting of protocol, TLS and
//     credentials (see "Two protocols").
//   - SendAsync callbacks run on the producer's goroutines, like franz-go's
//     promises: they must be quick and must not block.
//   - Transactional messages (SendTransactional) go alone, like delayed
//     ones, and are retried elsewhere like any send until stored; Commit
//     and Rollback go to the broker that stored the half message. A
//     TransactionChecker (WithTransactionChecker) answers the brokers'
//     checks of half messages left pending; every RocketMQ client of the
//     producer carries it, since a broker asks any producer of the topic.
//     SendInTransaction wraps the three steps: send the half message, run
//     the local transaction, commit or roll back from its result.
//
// # Two protocols
//
// A cluster of the configuration names its protocol: "grpc" (the default)
// for RocketMQ 5's gRPC protocol through a proxy, its endpoints proxies;
// "remoting" for RocketMQ's classic protocol straight to the brokers (4.x
// and 5.x), its endpoints name servers. The producer keeps one client per
// cluster, protocol and TLS/credentials setting, of the driver the
// protocol names (internal/driver or internal/remoting, behind one
// unexported interface); batching, failover, FIFO, retries and State are
// the same for both. One logic topic may map to a gRPC cluster and a
// remoting cluster at once (a migration from 4.x to 5.x is exactly that),
// and a reload that changes a cluster's protocol or, for a remoting
// cluster, its name servers swaps its client like any other endpoint
// change: sends in flight finish on the old client, which is closed once
// no send can need it. Over remoting:
//
//   - Routes come from the name servers (the given endpoint first, failing
//     over to the cluster's others), cached and refreshed every 30 s; a
//     route lists each broker set's master by its remoting address, which
//     is the broker's Endpoint in SendResult and State.
//   - Producer group: one per physical topic, "twinmq-producer-<topic>".
//     Half messages carry it, and the client heartbeats it (every 30 s, and
//     as soon as a route names a new broker) to every broker of its
//     routes, so that a broker asks only producers of that topic about its
//     half messages, on their own connections, and any producer of the
//     topic with a TransactionChecker answers, also after the sender
//     closed. Close unregisters the groups.
//   - A message goes with SEND_MESSAGE_V2, a batch with SEND_BATCH_MESSAGE
//     (split into requests of at most 4 MiB of bodies, RocketMQ's default
//     maxMessageSize); each message gets its own id and offset.
//   - Delayed messages: on a broker of version 5.0 or later (the version
//     its answers carry, learnt with a heartbeat before the first delayed
//     send) the delivery time goes as the TIMER_DELIVER_MS property; a 4.x
//     broker has no timer and refuses it (ErrDelayUnsupported) without
//     losing health: the send goes on to the topic's other brokers (in a
//     migration, the 5.x cluster beside the 4.x one) and fails with
//     ErrDelayUnsupported once every broker refused. The producer never
//     turns a delivery time into one of 4.x's fixed delay levels.
//   - Transactions: Result.TransactionID also carries the offsets
//     END_TRANSACTION needs (it ends with the broker's transaction id);
//     Commit and Rollback are oneway, as RocketMQ's clients send them, so
//     a nil error means the request was written, and a resolution lost on
//     the way is asked for again by the broker's check. A CheckedMessage's
//     TransactionID is the broker's id: match a check to its send by
//     MessageID.
//   - TLS (the cluster's tls, with WithTLSConfig) covers the name servers
//     and the brokers; access keys sign every request as RocketMQ's ACL
//     expects (AccessKey and Signature), and a refusal matches
//     rmqerr.ErrForbidden.
//   - Not yet: compressed bodies and slave brokers in routes.
//
// # Shadow traffic
//
// A send whose ctx carries the shadow mark (lane.WithShadow, set by a
// service's inbound middleware for stress-test requests) goes to the
// logic topic's shadow physical topic on each cluster instead of its
// production topic (the configuration's shadow section: a cluster's
// shadowTopic, or a naming rule for all topics), stamped with
// lane.PropertyShadow, and SendResult.Shadow is set. Everything else is as
// for production: failover, batching, lanes, FIFO groups, delays,
// transactions. The shadow side of a logic topic is a topic of its own
// inside the producer (its own picker, brokers and batch keys), so a
// shadow message never shares a batch or a retry target with a production
// one and can never land in a production topic, nor a production message
// in a shadow one, during failover or across a reload. There is no
// fallback from one side to the other:
//
//   - the document gives the topic no shadow topic: ErrNoShadowTopic at
//     once;
//   - the brokers lack the shadow topic: the send fails like any send
//     without a route (ErrNoTarget within its deadline), and the error
//     also matches ErrNoShadowTopic;
//   - shadow.enabled is off (the kill switch, live): ErrShadowDisabled at
//     once; production sends go on.
//
// State lists the shadow side of a topic after its production side, with
// TopicState.Shadow set.
//
// # Errors
//
// Every error a send returns (or passes to a SendAsync callback) matches
// something exported with errors.Is or errors.As, and its text says what
// happened to the message: "not sent" when no request carried it (nothing
// was stored), "may have been stored" when the caller stopped waiting for
// a request in flight, "failed after N attempts" otherwise. The outcomes:
//
//   - Bad input, before anything is buffered: ErrUnknownTopic,
//     ErrEmptyBody, ErrBodyTooLarge, ErrReservedProperty,
//     ErrInvalidMessage, ErrMalformedLane; for a shadow send,
//     ErrNoShadowTopic and ErrShadowDisabled (see "Shadow traffic").
//   - The context ended: context.Canceled or context.DeadlineExceeded
//     (a send without a deadline ends at timeouts.sendDeadline, as
//     DeadlineExceeded). This holds wherever the send was waiting: for
//     buffer space, in a batch's buffer or a FIFO group's line (the send
//     then ends at once, a SendAsync in a batch's buffer within
//     batching.maxDelay/2, not when the request ahead of it does, and its
//     bytes leave batching.totalBatchMaxBytes: "not sent"), for a target,
//     or for a request in flight (its outcome is the request's if it
//     answers first; else "may have been stored").
//   - No target took the message within its deadline: ErrNoTarget, with
//     the context's error and the last failure, or the clusters' route
//     errors when no cluster had a route (so a TOPIC_NOT_FOUND refusal of
//     the route query is found with errors.As too).
//   - Buffer full, with WithFailFast: ErrBufferFull ("not sent").
//   - Closed: ErrClosed, for every send once Close has begun, and for the
//     sends Close gave up on.
//   - A broker failed: ErrTimeout (no answer within timeouts.request, or
//     a broker's own timeout), ErrUnavailable (not reachable), ErrThrottled
//     (TOO_MANY_REQUESTS or transport throttling); these are retried on
//     other targets, so a send sees them wrapped in ErrNoTarget, or alone
//     when its context ended just as the attempt failed. Other classes of
//     package rmqerr (ErrBadRequest, ErrUnauthorized, ErrForbidden,
//     ErrNotFound, ErrTooLarge, ErrInternal, ErrUnsupported) come mostly
//     from refusals.
//   - A broker refused the message with a RocketMQ status code: an
//     *rmqerr.Error in the chain carries the code (number and name, e.g.
//     MESSAGE_PROPERTY_CONFLICT_WITH_TYPE or TOPIC_NOT_FOUND), the broker's
//     message and its endpoint, and matches the code's class. Refusals
//     another cluster would repeat (a bad request, a message too large,
//     refused credentials) fail at once; the others are retried.
//   - SendBatch: the first invalid message's error (nothing sent), or a
//     *BatchError whose Errs hold each message's outcome as above. An
//     empty batch succeeds with an empty result slice.
//   - New: ErrInvalidConfig for options that contradict each other and for
//     a configuration that is invalid, unreadable or missing (a file
//     source's file that does not exist); the context's error when ctx
//     ended before New or while it waited for the configuration, however
//     soon the configuration was there.
//   - Commit and Rollback of a transaction: ErrTransactionEnded, ErrClosed,
//     or a broker failure as above.
//   - A delayed message to a remoting cluster's broker without the timer
//     (RocketMQ 4.x): ErrDelayUnsupported, matching rmqerr.ErrUnsupported,
//     once every broker of the topic was asked and none has the timer.
//
// # Hooks
//
// WithHooks adds values implementing SendHook, which the OpenTelemetry
// module (contrib/otel) implements; the producer itself imports no tracing
// library. A hook hears of every send that passed validation, once per
// message and before it is buffered, may set the message's trace context
// (RocketMQ's trace-context system property, where RocketMQ 5 clients
// carry a W3C traceparent) and add user properties to the message as sent
// (the caller's Message is not changed), and hears the outcome once, after
// the last attempt. Hooks run on the senders' goroutines and must be quick.
//
// # Cores
//
// A batched synchronous send is a chain: the batch is encoded, crosses the
// connection, is stored, its answer crosses back, and its senders wake and
// queue their next messages. One link runs at a time, so the chain uses
// about one core however many the process has, while unbatched sends are
// many independent requests that keep every core busy. Where waking a
// thread on another core is expensive (virtual machines without guest halt
// polling), the chain pays for it at every hop. Measured on a 2-vCPU
// Firecracker VM with BenchmarkProduce (64 senders, producer and brokers
// in one process), GOMAXPROCS=1 made batched sends 30-40% faster than
// GOMAXPROCS=2 at half the CPU per message (4.7-5.6 against 8.7-10.4
// µs), while unbatched sends lost a quarter. The producer does not set
// GOMAXPROCS: the application owns it.
//
// # State
//
// State returns what the producer is doing, as plain data: the
// configuration revision it applied and the latest version refused (by the
// watcher as invalid, or by the producer as impossible to apply, with the
// error), and per logic topic, cluster and broker whether the route is
// known or refused, whether the session with the broker is up, whether the
// latest request did not fail, failover's weight of the broker, the
// refusal in force (RocketMQ's code, its name and message, the call
// refused, since when) and the latest error. A topic missing on a cluster,
// credentials it rejects or a message type its topic does not take are
// visible there even with the default logger, which discards everything.
// A request the senders gave up on is not held against the broker.
//
// # Metrics
//
// With WithRegisterer: twinmq_producer_sends_total{topic,cluster,result,shadow}
// (result ok, error, or retried: an attempt failed and the message moved
// on; shadow "true" or "false"), twinmq_producer_send_duration_seconds{topic,shadow}
// and twinmq_producer_config_rejected_total; batch sizes, flush reasons and
// buffered bytes as twinmq_batch_*; failover weights as
// twinmq_failover_weight{picker="producer/<topic>",cluster,endpoint}
// (picker "producer/shadow/<topic>" for a shadow side);
// configuration reloads as twinmq_config_reloads_total{watcher="producer"}
// (when the producer started its own watcher); RPCs as the driver's
// twinmq_driver_*{cluster,client} (one client per cluster). Close removes
// every series of the producer. Logging goes to the WithLogger logger only.
package producer
