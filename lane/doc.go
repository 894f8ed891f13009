// Package lane names traffic lanes, carries a request's lane through a
// context and message properties, tracks which consumer instances serve
// which lane, and decides which lane handles a message. It knows nothing of
// RocketMQ beyond the name of one property.
//
// # Names
//
// A lane is a dotted path such as "a", "a.x" or "gray.v2-canary". Each segment
// matches [a-z0-9][a-z0-9_-]{0,31}; a name has at most MaxDepth (8) segments
// and MaxLength (128) bytes. The empty string is the base lane. Names are not
// normalised: "A" is rejected rather than lower-cased, because a producer and
// a consumer that disagree on a spelling must fail loudly, not half-match.
// Validate and Parse return errors wrapping ErrMalformedLane.
//
// A lane falls back to its parent, and the top segment to base: Chain("a.x.y")
// is ["a.x.y", "a.x", "a", ""]. No sibling is ever on the chain: "a.y" can
// fall back to "a", never to "a.x" (as Dubbo's tag router never sends to a
// differently tagged provider).
//
// # Context and properties
//
// WithLane and FromContext keep the lane in a context; Inject stamps it on a
// message's properties under PropertyLane and Extract reads it back into the
// handler's context, so a request keeps its lane across services. Each
// routing value has its own context key and With/From pair, and the same
// Inject/Extract carry them all.
//
// # Shadow traffic
//
// The second routing value is the shadow (stress-test) mark: WithShadow and
// IsShadow keep it in a context, Inject stamps it as PropertyShadow and
// Extract reads it back. It lives here rather than in a package of its own
// because it travels exactly as the lane does (set by a service's inbound
// middleware, carried in a property, restored into the handler's context)
// and one Inject/Extract pair should carry every routing value at once. It
// is orthogonal to the lane: a message can be shadow and in lane "a.x", and
// lane routing treats shadow and production messages alike. What the mark
// changes is where a message lives: the producer sends a shadow message to
// the shadow physical topics of its logic topic, and a consumer receives
// them in the shadow group, so stress traffic never touches production
// topics, offsets, retries or dead letters (see the producer, consumer and
// config packages).
//
// # Registry
//
// A Registry holds the live consumer instances of each group and lane under
// leases with a TTL. Watch pushes a complete Snapshot on every change, with a
// revision, so a consumer never polls and a missed intermediate state never
// matters (the lesson of etcd watchers after compaction: resynchronise from a
// full state, never replay deltas). MemoryRegistry is the in-process
// implementation; a networked one keeps the same interface: every call takes
// a context and errors wrap ErrInvalidInstance, ErrLeaseExpired or
// ErrRegistryClosed.
//
// # Routing semantics
//
// Every consumer of a group receives from the brokers. For each message it
// calls Route with the message's lane, its own lane and the group's latest
// Snapshot. The target is the longest prefix of the message's lane with a live
// instance, else base (Resolve). The rules, chosen so that a message is
// never lost and is handled by one lane at a time:
//
//   - A message without a lane is base traffic and goes to base.
//
//   - A message whose lane is on nobody's chain (lane "b" with only "a" live)
//     falls to base, like Dubbo's non-forced tags and Alibaba's permissive
//     mode: lanes are for testing new code, and base is the code that is
//     always there.
//
//   - The target is this consumer's lane: run the handler, ack on success.
//
//   - The target is another lane: forward to one of its instances (picked by
//     failover) and ack only after that instance's handler succeeded. When an
//     instance is unreachable (the forward was definitely not delivered:
//     connection refused, instance closing), try another instance of the same
//     lane; when none is left, resolve again with that lane counted as dead
//     (Without), which is the next fallback level; when nothing is left, do not
//     ack and let the broker redeliver. When a forward's outcome is unknown
//     (deadline after the request was sent), the target may have run the
//     handler, so the origin does not try another lane: it leaves the message
//     for redelivery. Duplicates across lanes are then limited to that case,
//     and the at-least-once contract is kept.
//
//   - The group has no live base instance and the message resolves to base:
//     Hold. The message is not acked, so the broker redelivers it after its
//     invisible time and, after the maximum attempts, puts it in the
//     dead-letter topic where it can be replayed. It is never dropped and
//     never handled by a lane it does not belong to; the consumer logs and
//     counts every hold so the missing base deployment is visible.
//
//   - A received message with a malformed lane is handled as base, and the
//     consumer logs and counts it. The alternatives were worse for the data:
//     the dead-letter topic would park a message whose payload is fine
//     because of a routing hint, and guessing the "nearest" valid lane would
//     route by accident. Our producers refuse malformed lanes, so such a
//     message comes from a foreign producer, whose traffic is base traffic.
//
// Liveness is always the registry's view, shared by the whole group, not an
// instance's opinion of itself: an instance whose lease lapsed stops being a
// target even if it still runs.
package lane
