// Package wiresuite is the wire integration suite of twinmq: one set of
// cases, written against the driver and the generated protocol only, that
// runs unchanged against two backends, the embedded broker (in `make test`)
// and a real Apache RocketMQ 5 proxy (in `make interop`).
//
// A backend is described by a Backend value: its access point and the few
// numbers in which a test configuration of the embedded broker legitimately
// differs from a production proxy (the smallest invisible duration, the
// shortest long poll, how late a redelivery may come). Everything a user
// relies on is asserted identically on both: routes, single and batched
// sends, a body of exactly the 4 MiB limit both ways, receive and ack,
// redelivery after the invisible time with the attempt counted, nack
// through ChangeInvisibleDuration, what old receipt handles do (a repeated
// ack, an ack with a handle a change replaced, a change after the ack: OK;
// an old handle never acks a newer delivery; an expired one is
// INVALID_RECEIPT_HANDLE), dead-lettering after the group's maximum
// attempts and by explicit forward with the delivery attempt the
// dead-letter copy reports, tag filtering, and the protocol status codes
// of bad inputs. The dead-letter info of a message read from a dead-letter
// topic is not asserted: the proxy leaves it unset, the embedded broker
// fills it in as an extension.
//
// Design decisions:
//
//   - Every consuming case has a topic and a consumer group of its own
//     (Topics, Groups), so cases run in parallel and a real broker, which
//     keeps its state for the whole run, never hands one case another's
//     messages. A backend must provide exactly these names; the embedded
//     test creates them from the functions, interop/run.sh lists them. The
//     dead-letter topics are listed too: a real broker creates them on
//     first use, and a route asked for before that would be cached as
//     missing by the proxy.
//   - The shapes the real proxy is allowed to answer differently (one
//     result entry per batch, queue ids chosen by the server) are
//     normalized by the driver; the suite asserts the user-visible
//     contract, and checks the normalization against what a receive
//     reports (the queue and offsets of a batch).
//   - Bad inputs the driver already refuses on the client side (empty or
//     oversized body, blank message id, empty request) are also sent raw
//     through the generated client, so the server's own code is checked.
//   - Timing enters assertions only as correctness, never as speed: a
//     message seen again before its invisible time ended is a failure; how
//     soon after it comes back is bounded only by generous deadlines.
//   - Nothing is skipped: a backend that lacks a topic or a group fails the
//     case with a message naming what to create.
package wiresuite
