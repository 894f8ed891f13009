// Package embedded starts RocketMQ 5 compatible brokers in process, for
// tests and examples that need no server at all.
//
// Start brings up clusters of brokers (two clusters of two brokers by
// default). Each broker is a real one: its own gRPC endpoint on 127.0.0.1,
// its own storage core (commit log, consume queues, flush, recovery) in its
// own directory, the topics and consumer groups of Options, and the other
// brokers of its cluster in its routes. Clients reach it exactly as they
// reach a RocketMQ 5 proxy: give a cluster's Endpoints to the producer or
// consumer.
//
// Every broker carries fault injection for failover tests: Stop and Restart
// (same endpoint, same data: messages and consumer progress survive), Pause
// (connections accepted, calls hang), SetLatency, FailNext (gRPC
// UNAVAILABLE) and FailNextInternal (the protocol's INTERNAL_SERVER_ERROR).
//
// The brokers hold delayed messages in a timer store and transactional
// messages as half messages until they are committed (with check-back of
// orphans to a live producer), and can serve TLS (Options.TLS) and check
// access keys and permissions (Options.Users), as a RocketMQ 5 proxy with
// ACL 2.0 does.
//
// Each broker also serves RocketMQ's classic remoting protocol on a port of
// its own (Broker.RemotingEndpoint), from the same store, and the
// environment runs an in-process name server (Env.NameServer) whose routes
// name those ports: a remoting client sends there and a gRPC consumer reads
// the same messages. The remoting port serves route lookups (through the
// name server), heartbeats, single and batch sends, end transaction and
// check-back on the producer's connection. Options.TLS makes the remoting
// ports and the name server serve TLS too, and Options.Users checks the
// remoting signature (AccessKey, Signature) of every request to a broker,
// refused with NO_PERMISSION; fault injection is gRPC's only.
//
// Design decisions:
//   - Data goes to a temporary directory unless Options.Dir is set; Close
//     removes a temporary directory, never a user's.
//   - A broker keeps its port across Restart so that routes cached by
//     clients stay right, as a real broker restarted on the same host.
//   - Faults belong to the Broker handle, not to one server process, so a
//     paused broker stays paused across a restart until Resume.
//   - MinInvisibleDuration and MinLongPolling lower the protocol's 10 s and
//     5 s floors so redelivery and empty receives are quick in tests; the
//     defaults are the real protocol's.
package embedded
