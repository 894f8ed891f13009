// Package batch accumulates items per target and hands them, in batches, to a
// flush function supplied by the caller. It knows nothing of RocketMQ: a key
// is any comparable value (the producer uses cluster, broker endpoint, topic
// and queue), an item is any value with a byte size, and the flush function
// decides what sending a batch means.
//
// # When a batch leaves
//
// The policy is group commit, not a timer. A synchronous caller must never be
// slower because batching is on, so a key's items wait only while the key is
// busy:
//
//   - When the key has nothing in flight, the first item goes at once, alone.
//     One synchronous sender therefore sees the latency of an unbatched call.
//   - While a flush of the key is in flight, new items accumulate. When that
//     flush completes, everything accumulated meanwhile leaves as the next
//     batch (up to the per-batch caps). With many concurrent senders on one key
//     the batches grow by themselves with the load, and no sender waits for a
//     timer.
//   - A batch that reaches BatchMaxBytes or BatchMaxCount is sealed; the
//     call that filled it starts its flush at once if the key has a free
//     in-flight slot (MaxInflightPerKey): in place for Add, on a new
//     goroutine for AddAsync. Otherwise it leaves as soon as a slot frees.
//   - MaxDelay bounds how long items linger while the key is busy: the
//     background ticker starts a batch on a free slot once its oldest item
//     would otherwise pass MaxDelay. A slot is never exceeded, so with
//     MaxInflightPerKey 1 a slow flush delays what queues behind it.
//   - Config.Linger restores the classic policy for callers that prefer
//     larger batches to latency (fire-and-forget senders): a batch then
//     leaves only when full, when MaxDelay has passed, or on Close.
//
// One slot per key gives the biggest batches, which is what a CPU-bound
// broker (or a client sharing its cores) needs. When a target is far and has
// spare capacity, one slot caps a key at one batch per round trip; spread
// the load over several keys, or raise MaxInflightPerKey and lower MaxDelay
// so that the extra slots start sooner. BenchmarkSyncSend shows both cases.
//
// This is the difference from RocketMQ's Java AutoBatch, where every
// synchronous sender of a topic blocks on a shared batch that leaves only when
// it is strictly larger than its byte limit or its timer fires; with 16
// senders of 1 KB and a 32 KiB limit each send waits for the timer and the
// throughput collapses to senders per timer period.
//
// # Timer
//
// One goroutine per Accumulator ticks every MaxDelay/2 while items wait in
// a buffer. At each tick it starts the batches that would be older than
// MaxDelay by the next tick, so the accumulator itself holds an item at most
// MaxDelay (plus scheduling), not the 1.5 x MaxDelay of a "flush when older
// than MaxDelay" check at half period. The same goroutine withdraws the
// waiting asynchronous items whose context has ended (see Results) and
// drops the state of keys idle for about a second. When a tick finds no item waiting (every
// item left at once: one synchronous sender, a light load) it relaxes to
// four ticks a second, which is all dropping idle keys needs, until an item
// has to wait again; once no key has state left it sleeps until one is
// added. A light or idle accumulator therefore wakes nobody every
// MaxDelay/2.
// The ticker belongs to its Accumulator and stops in Close: closing one
// accumulator never affects another.
//
// # Memory cap
//
// TotalBatchMaxBytes caps the bytes of all items accepted and not yet
// completed, in buffers and in flight together. Add and AddAsync block while
// an item does not fit, in FIFO order so a large item is not starved, and give
// up when their context ends (having reserved nothing). With FailFast they
// return ErrBufferFull instead. An item larger than TotalBatchMaxBytes fails
// at once with ErrTooLarge; an item larger than BatchMaxBytes is accepted and
// goes in a batch of its own. The reserved bytes of an item are released
// exactly once: when its batch completes, when it is withdrawn or dropped
// because its context ended before it was sent, or when it is refused after
// Close.
// Reserve takes bytes of the same cap for an item the caller sends without
// the accumulator (the producer's messages that must go alone), so that
// the cap bounds everything in flight.
//
// # Order
//
// The items of one key are put into batches in the order their Add calls
// entered the accumulator, and batches of a key start in that order. With
// MaxInflightPerKey 1 a batch starts only after the previous one completed,
// so the order holds end to end; the producer relies on this for FIFO message
// groups. A flush function that wants retries should retry inside the call,
// which keeps the order.
//
// # Results
//
// The flush function either writes one Result per item into the slice it
// is given (the accumulator's, reused from batch to batch) or returns one
// error, which every item of the batch receives. Every accepted item gets
// exactly one outcome: Add returns it, AddAsync passes it to its callback.
//
// An item whose context ends before it reaches the flush function is not
// sent: its error wraps ErrNotSent and the context's error. It does not wait
// for the batches of its key ahead of it (a key whose flush hangs would
// hold it as long): it is withdrawn from its buffer and its bytes are given
// back, at once for a synchronous caller (Add is waiting on the context
// anyway), and for AddAsync within one tick (MaxDelay/2) of the context's
// end. An asynchronous item still waiting at a tick after a whole tick in
// its buffer gets a watch on its context (context.AfterFunc), so from then
// on it leaves the moment its context ends; an item that leaves its buffer
// within a tick, as all do while flushes are quick, costs one look of the
// ticker and no watch. A withdrawn item's callback runs on a goroutine of
// its own. Once an item is in a batch its outcome is the batch's; a
// synchronous caller whose context ends while its item is in flight stops
// waiting and gets the context's error, and the item may still have been
// delivered, as with any RPC whose caller gives up.
//
// The flush function gets the accumulator's context, cancelled only when
// Close gives up; a batch mixes callers with different deadlines, so a flush
// that should honour them (for example use the deadline of a lone item) must
// carry them in its items.
//
// Callbacks of AddAsync run after their batch's slot is freed, never under a
// lock of the accumulator. The callbacks of one batch run one after the
// other, in item order, on one goroutine: the worker that ran the flush, or a
// new goroutine when the flush ran in place on a synchronous caller (so that
// caller is not held up by others' callbacks). When callbacks are pending the
// key's next batch starts on another goroutine, so a callback may block or
// call Add or AddAsync; it delays only the callbacks after it. Callbacks of
// different batches of a key may therefore overlap. A callback must not call
// Close, which waits for that very callback.
//
// # Close
//
// Close stops accepting items (ErrClosed), flushes everything buffered while
// keeping the per-key in-flight limit, and waits for every outcome to be
// delivered. If its context ends first, the context passed to running flush
// functions is cancelled, batches not yet started fail with ErrClosed, and
// Close returns the context's error.
//
// # Metrics
//
// With a non-nil Config.Registerer the accumulator registers
// twinmq_batch_flushes_total{reason} (reason: full, timer, idle, close; idle
// means the key had a free slot and nothing forced a wait, which includes a
// completed flush handing over what accumulated behind it),
// twinmq_batch_size_items, twinmq_batch_size_bytes and
// twinmq_batch_buffered_bytes. Wrap the Registerer with
// prometheus.WrapRegistererWith to tell several accumulators apart.
package batch
