// Package twinmq is a Go SDK for Apache RocketMQ 5 that lets a service treat
// two clusters in two data centres as one.
//
// A service names a logic topic; the SDK maps it to a physical topic on each
// cluster, batches what it sends, steers traffic away from sick brokers,
// routes messages to the consumers of the right lane, and picks up new
// settings from the platform without a restart. The packages:
//
//   - producer: Send, SendAsync and batch sends over logic topics.
//   - consumer: push-style consumption from both clusters, with lanes.
//   - batch, failover, lane: small generic libraries that know nothing of
//     RocketMQ (accumulators, weighted health picking, lane routing).
//   - config: the configuration document and its hot-reloading sources.
//   - embedded: an in-process broker (two clusters) for tests and examples.
//   - internal/store: the embedded broker's storage core.
//   - internal/driver: the only code that speaks the RocketMQ 5 gRPC wire.
//
// This root package holds no code; import the packages above.
package twinmq
