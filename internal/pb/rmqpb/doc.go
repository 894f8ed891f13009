// Package rmqpb holds the Go code generated from twinmq's own description of
// the RocketMQ 5 gRPC protocol (proto package apache.rocketmq.v2, service
// MessagingService), found under proto/apache/rocketmq/v2.
//
// Only the RPCs, messages and fields twinmq uses are declared, but every one
// of them keeps the public protocol's package, names, field numbers, types and
// presence, so a client built on this package talks to an Apache RocketMQ 5
// proxy and a server built on it serves the official clients. Fields unknown
// to this description survive decoding as protobuf unknown fields.
//
// The driver (client side) and the embedded broker (server side) share this
// package and nothing else. Do not edit the generated files; change the
// .proto sources and run `make proto`, which pins the generator versions.
package rmqpb
