// Package forwardpb holds the Go code generated from twinmq's lane-forwarding
// service (proto package twinmq.forward.v1, service Forwarder), found under
// proto/twinmq/forward/v1.
//
// A consumer that receives a message for a lane it does not serve hands the
// message to a consumer of that lane with Forwarder.Deliver, and acks the
// broker only when the answer is DELIVER_CODE_HANDLED. The proto package
// carries its major version; fields are only added, never renumbered.
//
// Do not edit the generated files; change the .proto source and run
// `make proto`, which pins the generator versions.
package forwardpb
