// Package interop holds the integration suite that proves twinmq's wires
// against real Apache RocketMQ brokers: 5.4.0 (gRPC through its proxy, and
// remoting straight to its broker) and 4.9.7 (remoting).
//
// The tests carry the build tag "interop" and are not part of `make test`:
// they need a live peer. `make interop` (interop/run.sh) fetches RocketMQ
// 5.4.0 and 4.9.7, starts a 5.4.0 name server and a broker with the
// in-process gRPC proxy (Local mode) and a 4.9.7 name server and broker
// inside a loopback-only network namespace, creates the topics and groups
// listed at the top of that script, and runs
//
//	go test -count=1 -tags interop ./internal/interop/...
//
// inside the same namespace with these variables set:
//
//	TWINMQ_INTEROP_ENDPOINT  gRPC endpoint of the proxy, host:port
//	TWINMQ_INTEROP_NAMESRV   name server address, host:port
//	TWINMQ_INTEROP_CLUSTER   the broker cluster's name
//	TWINMQ_INTEROP_V4_NAMESRV  name server of the RocketMQ 4.9.7 peer
//	                           (its broker is spoken to over remoting only)
//	TWINMQ_INTEROP_V4_CLUSTER  that peer's cluster name
//	TWINMQ_INTEROP_AUTH_ENDPOINT  gRPC endpoint of the second peer, which
//	                              has authentication on
//	TWINMQ_INTEROP_ACCESS_KEY / TWINMQ_INTEROP_SECRET_KEY  its user
//	TWINMQ_INTEROP_JAVA      the java executable
//	TWINMQ_INTEROP_RACE_CP   classpath of the Java side of the send race
//	                         (interop/java, built by run.sh)
//
// Design decisions:
//
//   - A missing endpoint fails the suite instead of skipping it: a green run
//     must mean the peer was really exercised.
//   - The wire smoke test speaks the generated protocol directly, without
//     the driver, so a harness failure and a driver bug are never confused.
//   - The shared suite (the driver against the embedded broker and against
//     the real one, with the same assertions) lives in the files of this
//     package that carry the interop tag; it reads its backend from the
//     variables above.
//   - The SDK producer's remoting tests (remoting_producer_test.go) read
//     what they sent back from the brokers themselves with PULL_MESSAGE,
//     every queue from where it ended before the test, so a lost or a
//     duplicated message shows; they are not parallel at the top level,
//     because the remoting suite uses the same topics.
//   - The send race (BenchmarkInteropRemotingRace) runs RocketMQ's own Java
//     client as a child process driven through its standard input, one JVM
//     for the whole race, and twinmq's producer in this process, both over
//     remoting to the same broker, in alternating rounds; each figure is the
//     median of its rounds.
package interop
