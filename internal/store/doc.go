// Package store is the storage core of the embedded broker: one commit log
// for all topics and queues, a consume queue per (topic, queue), an index
// pipeline between them, async or group-commit flushing, crash recovery and
// retention. It knows bytes, topics and queues; no network, no protobuf.
//
// # Files
//
//	<Dir>/commitlog/<20-digit start offset>          log segments
//	<Dir>/consumequeue/<topic>/<queue>/<20-digit first queue offset>
//	<Dir>/checkpoint                                 two 64-byte slots
//	<Dir>/topics.json                                per-topic options
//	<Dir>/abort                                      present while open
//
// Topic names in paths keep [A-Za-z0-9_-] and write every other byte as %XX.
//
// # Commit log
//
// The log is a sequence of bytes addressed by log offset, stored in segment
// files of Options.SegmentSize bytes named by their start offset. A segment
// file grows by writes; that way cutting a torn tail is a truncation and no
// stale bytes can lie past the end of the log. Its disk blocks are reserved
// when it is created (fallocate with FALLOC_FL_KEEP_SIZE, which leaves the
// size alone), so appends skip block allocation. A record
// never spans two segments: when a batch does not fit, the rest of the
// segment is covered by a blank record (size | "TMQB"), of which only its 8
// bytes are written, and the batch starts the next segment.
//
// A record, little-endian:
//
//	off len  field
//	0   4    total size of the record, header included
//	4   4    magic 0x544d5131 ("TMQ1")
//	8   4    CRC32C (Castagnoli) of bytes [12, size)
//	12  4    queue id
//	16  4    flags (opaque to the store)
//	20  8    queue offset
//	28  8    log offset of this record
//	36  8    born timestamp, unix ms
//	44  8    store timestamp, unix ms (monotonic along the log)
//	52  4    reconsume times
//	56  4    index of the record within its append (batch)
//	60  4    number of records of that append
//	64  2+n  topic
//	    2+n  born host
//	    2+n  tag
//	    4+n  properties: repeated (2+n key, 4+n value), sorted by key
//	    4+n  body
//
// The log offset inside the record lets recovery tell a record from stale
// bytes, and the batch fields let it drop a partly written append: an
// Append of N messages is one write of N adjacent records and is either
// wholly in the log or not at all. Queue offsets are assigned under the
// append lock, so they follow log order within each queue.
//
// # Consume queues
//
// A consume queue entry is 20 bytes: log offset 8 | record size 4 | tag hash
// 8 (FNV-1a 64 of the tag, 0 for none). The entry of queue offset o is at
// (o - first) * 20 in the file whose name is first, so a lookup is O(1).
// Topics with TopicOptions.BatchCQ use 40-byte entries, one per append: log
// offset 8 | size of all its records 4 | tag hash of the first 8 | store
// timestamp 8 | base queue offset 8 | count 4; the entry holding an offset is
// found by binary search on the base offset, and reads still return single
// messages with their own offsets. Entries are kept in memory (20 or 40 bytes
// each, like a memory-mapped queue file in the page cache) and written to
// the append-only files at each checkpoint.
//
// # Index pipeline
//
// One reader cuts the log, from the end of what is indexed up to what was
// written (async flush) or fsynced (sync flush), into chunks of about
// Options.DispatchChunk bytes ending at append boundaries. Workers parse and
// CRC-check the chunks in parallel; one ordered stage takes the chunks in the
// reader's order (unordered in, ordered out), adds their entries to the
// queues, moves the visible max offsets and closes the Arrivals channels.
// Appends made while the store is open are not read back: the appender
// queues the entries of what it wrote, and the reader passes them to the
// ordered stage as they come (the log is read only after a restart, past
// segment padding, or when the reader fell more than 1024 appends behind). A
// reader finds messages only through queue entries, so it never sees a
// message before its entry exists, and under sync flush never one that an
// fsync has not covered.
//
// # Flush
//
// FlushAsync: appends return once written to the file; a flusher fsyncs every
// FlushInterval. FlushSync: each append waits until an fsync covers its end;
// the flusher always fsyncs up to the end of everything written so far and
// wakes all waiters it covered (group commit). A failed fsync puts the store
// in a failed state (ErrFailed) because the kernel may have dropped the
// pages; a failed write is taken back with a truncation and fails only its
// own append.
//
// # Checkpoint and recovery
//
// Every CheckpointInterval the queue files are written and fsynced, then a
// checkpoint records D, an offset below which every queue entry is durable
// (at most the flushed end of the log), the log end and the last store
// timestamp. A queue with less than 4 KiB of entries pending is skipped
// unless the checkpoint is thorough (every 12th, and at Close), and D stays
// below its first pending entry: with ten thousand queues, an ordinary
// checkpoint does not cost ten thousand small fsyncs; recovery rescans a
// little more instead. D is a record boundary but not always an append's:
// the first pending entry of a queue of single-record entries may be any
// record of its append (the queue file was written up to the one before).
// The two checkpoint slots alternate and carry a CRC, so a torn checkpoint
// write falls back to the previous one.
//
// Names are durable only once their directory is synced (see package vfs),
// so the store syncs the directory before it relies on a name: a new
// segment before an append in it is acknowledged, new or deleted queue files
// before the checkpoint that counts on them, the checkpoint file once per
// run, the renamed topics.json before SetTopicOptions returns, the abort
// marker at Open and its removal at Close, deleted segments after retention
// and recovery. The crash tests run on a strict in-memory file system that
// loses every name change a power loss could lose.
//
// Open creates the abort marker; Close removes it after a final checkpoint.
// Close first waits for the index to catch up with the log, but at most
// Options.CloseTimeout (30 s by default): an index still behind then (a slow
// disk under a long backlog) is stopped where it is, the final checkpoint is
// skipped and the marker kept, as after a crash, and the warning is logged;
// the next Open rescans the log from the last checkpoint and adds the
// missing entries, so nothing is lost and only that Open is slower. Either
// way Close returns only after the store's goroutines have exited: the
// pipeline's stages leave their queued chunks when told to quit, waiting at
// most for a read already under way.
// If the marker is absent and the checkpoint's log end matches the files,
// Open trusts the files and scans nothing, unless a queue file turns out
// cut short, malformed or missing: then every queue is rebuilt from the
// whole log. Otherwise it scans the log from D
// with full checks (frame, CRC, log offset, batch completeness), truncates
// the log after the last complete append, drops queue entries that are
// malformed or point past the new end, and re-indexes the log from D,
// checking entries that exist and adding missing ones. Should a queue turn
// out to have a hole, every queue is rebuilt from the whole log. A rebuild
// keeps, as loaded, the queues whose messages retention deleted: no record
// is left to rebuild them from, and their files hold their next offsets.
//
// # Retention
//
// After each checkpoint, whole segments older than RetentionAge or beyond
// RetentionBytes are deleted from the oldest on (never the active segment nor
// one past the checkpoint); queue min offsets move past the entries that
// pointed into them first (so a reader finds its offset out of range, never
// a segment gone under a valid offset), and queue files wholly below are
// deleted, keeping each queue's last file so its next offset survives a
// restart. A topic whose queue directory name (escaped) would pass 255
// bytes is refused at Append.
//
// # Room for upper layers
//
// Topics are plain names, so system topics (retry, dead-letter, timer,
// transaction half/op) are ordinary topics; Flags and Properties carry what
// those layers need and are stored verbatim.
package store
