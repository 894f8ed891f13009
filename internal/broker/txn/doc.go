// Package txn keeps the broker's transactional messages (RocketMQ 5
// "transaction messages"): half messages that consumers cannot see until the
// producer commits them, rollback that discards them, and the check-back of
// orphans whose producer never said.
//
// # Layout
//
// As in RocketMQ's broker, all state lives in three system topics of the
// storage core, so a restart rebuilds it by reading them:
//
//   - RMQ_SYS_TRANS_HALF_TOPIC (queue 0) holds each half message whole, with
//     its destination in REAL_TOPIC / REAL_QID and the random part of its
//     transaction id in TXN_NONCE. No consumer group reads it.
//   - RMQ_SYS_TRANS_OP_HALF_TOPIC (queue 0) holds one small op record per
//     event of a half message: commit, rollback, discard (checked too often)
//     or check (one more check-back sent, with the running count). The body
//     is the half message's queue offset in decimal, the tag "d", as
//     RocketMQ's op messages.
//   - TRANS_CHECK_MAX_TIME_TOPIC (queue 0) receives the half messages that
//     ran out of checks, for an operator to look at.
//
// The transaction id is the half message's queue offset (16 hex digits)
// followed by 16 random hex digits kept with it, so EndTransaction finds the
// half message at once, a guessed id does not match, and a restart derives
// the same ids.
//
// # Commit and rollback
//
// Commit reads the half message back, clears the prepared flag, sets the
// commit flag and hands it to the Deliverer (the broker appends it to its
// real topic and queue), then writes the commit op. Rollback writes the
// rollback op only. A crash between the delivery and the op leaves the half
// message pending, so it is checked back and may be committed again: commit
// is at least once, as in RocketMQ. A transaction is resolved once: a
// second End of a resolved one returns ErrResolved and changes nothing; an
// UNKNOWN answer changes nothing either and leaves it to the checker.
//
// # Check-back
//
// A loop looks at pending half messages. One becomes an orphan when it is
// older than Timeout, or than its own recovery duration
// (CHECK_IMMUNITY_TIME_IN_SECONDS, orphaned_transaction_recovery_duration on
// the wire) when that is longer; it is then checked every CheckInterval
// through the Checker, which the broker implements by writing a
// RecoverOrphanedTransactionCommand on the Telemetry stream of a live
// producer of the topic; that producer answers with EndTransaction. Every
// check counts, whether or not a producer was there to take it (as in
// RocketMQ); after MaxChecks checks the half message is moved to
// TRANS_CHECK_MAX_TIME_TOPIC and discarded.
//
// The defaults are RocketMQ's broker settings: transactionTimeOut 6 s,
// transactionCheckInterval 30 s, transactionCheckMax 15.
package txn
