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
// This root package holds only the module's Version; import the packages
// above. Changes from version to version are listed in CHANGELOG.md; the
// module follows semantic versioning, and before 1.0.0 a minor version may
// change the API.
package twinmq

// Version is the version of the module this code belongs to: the latest
// in CHANGELOG.md, whose release is tagged "v" + Version.
const Version = "0.1.0"
