// Package timer is the broker's timer store: it holds messages that must be
// delivered at a given millisecond time (RocketMQ 5 "timer messages", a
// SendMessage with delivery_timestamp) and appends each one to its real topic
// and queue when that time comes, across broker restarts.
//
// # Layout
//
// A scheduled message is first appended, whole, to the system topic
// rmq_sys_wheel_timer (queue 0) of the storage core, with its destination in
// the properties REAL_TOPIC and REAL_QID and its delivery time in
// TIMER_DELIVER_MS. That append is the durable acceptance of the message:
// over a sync-flush store, an append that no fsync confirmed (the fsync
// failed, or the caller's context ended first) is no acceptance, and
// Schedule returns store.ErrNotDurable at once, for a power loss may take
// the message back.
// One goroutine tails that topic (as RocketMQ's enqueue services read the
// timer topic's consume queue) and, for each message, writes a fixed-size
// record to the timer log and puts an entry into the in-memory timing wheel.
// A second goroutine turns the wheel: when a slot's time has fully passed it
// reads each entry's message back from the system topic and hands it to the
// Deliverer (the broker, which appends it to the real topic). The delivered
// message keeps TIMER_DELIVER_MS, so consumers see its delivery time.
//
// Timer log record (40 bytes, little endian):
//
//	magic u32 | flags u32 (bit 0 = rolled) | deliver-at ms i64 |
//	slot time ms i64 | system-topic queue offset i64 | reserved u32 | CRC32-C u32
//
// The log is split into segment files of a fixed number of records, named
// by the index of their first record. A segment is deleted once the
// checkpoint has passed every slot time in it.
//
// # Wheel
//
// Two levels. The fine wheel has Slots slots of Precision each and holds the
// entries of the current revolution (Slots x Precision, 40.96 s with the
// defaults 4096 x 10 ms); entries of later revolutions wait in a map keyed
// by revolution and move into the fine wheel, whole, when the cursor reaches
// their revolution. So a wheel reaching days ahead costs memory only for the
// entries it holds, and an idle wheel jumps over empty time at once.
//
// A slot is processed when its whole time span has passed (now >= slot end),
// so nothing is delivered early; lateness is at most one Precision plus
// scheduling and delivery time. An entry whose time is already past (a past
// delivery time, or one that arrives while the cursor is ahead of it) gets
// the cursor's slot time instead ("slot time" in the log) and goes out with
// the next turn.
//
// # Roll over
//
// Delays longer than MaxDelay are refused (ErrDelayTooLong). Delays longer
// than RollWindow are not held for their whole wait: the entry is put at
// now+RollWindow with the rolled flag, and at that time the message is
// appended again to the system topic (TIMER_ROLL_TIMES + 1), which enqueues
// it afresh. As in RocketMQ this bounds how long the timer log and the
// system topic must keep a record, so storage retention shorter than the
// longest delay loses nothing.
//
// # Checkpoint and recovery
//
// The checkpoint file holds two numbers: the wheel cursor's time T (every
// entry whose slot time is below T was delivered or rolled) and the next
// system-topic offset to enqueue E (every message below E has a record in
// the log). Writing it first syncs the timer log, then replaces the file
// atomically (a synced temporary file renamed over it) and syncs the
// directory, which makes the rename durable along with the names of log
// segments created or dropped since the last checkpoint. Recovery reads the log, truncating a torn tail, and puts back
// every record with slot time >= T; then the tail resumes from E, skipping
// offsets the log already holds. The wheel restarts at T, so a downtime
// makes overdue messages go out at once, never before their time. The
// store may flush its appends later than the timer syncs its files: after
// a power loss it can end below E. Recovery then resumes the tail at the
// store's end and drops the log's records past it (their messages are
// gone, and the store gives their offsets to new ones), and a delivery
// checks that the message at a record's offset carries the record's time.
//
// Delivery is at least once: after a crash, entries delivered since the
// last checkpoint (at most CheckpointInterval) are delivered again. After a
// clean Close the final checkpoint is exact and nothing is repeated.
package timer
