package store

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/twinmq/twinmq/internal/store/vfs"
)

// Store is the storage core: one commit log, a consume queue per (topic,
// queue), the index pipeline between them, flushing and recovery. All methods
// are safe for concurrent use.
type Store struct {
	opts Options
	fs   vfs.FS
	log  *zap.Logger

	// Append side. appendMu orders appends: it guards writePos, lastStoreTS,
	// nextOff, closing and failErr, and serialises writes to the active
	// segment.
	appendMu    sync.Mutex
	writePos    int64
	lastStoreTS int64
	nextOff     topicTable[int64]
	closing     bool
	failErr     error
	encPool     sync.Pool

	// segMu guards segs; readers hold it shared while they read a segment so
	// that retention cannot close a file under them.
	segMu sync.RWMutex
	segs  []*segment

	written    atomic.Int64 // end of the bytes written to segment files
	flushed    atomic.Int64 // end of the bytes an fsync covered
	dispatched atomic.Int64 // end of the log whose queue entries are visible

	flushReq    chan struct{} // wakes the flusher (sync mode), cap 1
	dispatchReq chan struct{} // wakes the index reader, cap 1
	flushSerial sync.Mutex    // one flushOnce at a time
	flushMu     sync.Mutex
	flushCh     chan struct{} // closed and replaced when flushed moves
	flushErr    error
	dispMu      sync.Mutex
	dispCh      chan struct{} // closed and replaced when dispatched moves
	dispErr     error         // the index pipeline stopped on corrupt data

	// live holds the queue entries of appends written and not yet taken by
	// the index reader, contiguous and in log order (see takeLive).
	liveMu sync.Mutex
	live   []*dispJob

	topicsMu  sync.RWMutex
	topics    map[string]*topicState
	topicOpts map[string]TopicOptions

	checkpointMu sync.Mutex // one checkpoint at a time
	cpSeq        uint64
	cpNamed      bool // the checkpoint file's name was synced in this run

	pipe    *pipeline
	quit    chan struct{}
	bg      sync.WaitGroup
	closed  atomic.Bool
	closeMu sync.Mutex
}

// topicState holds the queues of one topic and its arrival channel.
type topicState struct {
	name    string
	mu      sync.RWMutex
	queues  map[int32]*consumeQueue
	arrival chan struct{}
}

// TopicOptions are per-topic settings, persisted with the store.
type TopicOptions struct {
	// BatchCQ keeps one consume-queue entry per appended batch (base offset,
	// count) instead of one per message. Reads still return single messages.
	BatchCQ bool
}

// Open opens (creating if needed) the store in opts.Dir and recovers it: after
// a clean Close it trusts the checkpoint; after a crash it rescans the log
// from the checkpoint, cuts a torn tail and rebuilds missing queue entries.
func Open(ctx context.Context, opts Options) (*Store, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	s := &Store{
		opts:        o,
		fs:          o.FS,
		log:         o.Logger,
		nextOff:     topicTable[int64]{},
		flushReq:    make(chan struct{}, 1),
		dispatchReq: make(chan struct{}, 1),
		flushCh:     make(chan struct{}),
		dispCh:      make(chan struct{}),
		topics:      map[string]*topicState{},
		topicOpts:   map[string]TopicOptions{},
		quit:        make(chan struct{}),
	}
	if err := s.recover(ctx); err != nil {
		s.closeFiles()
		return nil, err
	}
	s.bg.Add(2)
	go s.flushLoop()
	go s.checkpointLoop()
	return s, nil
}

// Close drains the index pipeline, flushes, writes the consume queues and a
// final checkpoint, and removes the abort marker so the next Open needs no
// scan. It waits at most Options.CloseTimeout for the index to catch up; an
// index still behind then is stopped, the final checkpoint is skipped and the
// marker kept, so the next Open rescans the log (nothing is lost). Close
// returns only once the store's goroutines have exited. Appends after Close
// fail with ErrClosed.
func (s *Store) Close() error {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if s.closed.Load() {
		return nil
	}
	s.appendMu.Lock()
	s.closing = true
	failed := s.failErr
	s.appendMu.Unlock()

	ferr := s.flushOnce()
	// Let the index catch up with everything written, so the final
	// checkpoint covers the whole log; but only for CloseTimeout. An index
	// that lags further is stopped where it is, and the final checkpoint is
	// skipped: the abort marker stays and the next Open rescans the log
	// from the last checkpoint, as after a crash, so nothing is lost.
	lagging := false
	if ferr == nil && failed == nil {
		ctx, cancel := context.WithTimeout(context.Background(), s.opts.CloseTimeout)
		// A dispatch failure, the other error here, is read again below
		// (dispatchFailure) and skips the final checkpoint.
		if werr := s.waitDispatched(ctx, s.dispatchLimit()); errors.Is(werr, context.DeadlineExceeded) {
			lagging = true
			s.log.Warn("store: index still behind the log at Close; final checkpoint skipped, the next Open rescans the log",
				zap.Duration("close_timeout", s.opts.CloseTimeout),
				zap.Int64("dispatched", s.dispatched.Load()),
				zap.Int64("log_end", s.dispatchLimit()))
		}
		cancel()
	}
	close(s.quit)
	s.bg.Wait()
	s.pipe.stop()
	s.closed.Store(true)
	var err error
	if ferr == nil && failed == nil && !lagging && s.dispatchFailure() == nil {
		if err = s.checkpoint(true); err == nil {
			err = s.fs.Remove(filepath.Join(s.opts.Dir, abortName))
			if err == nil {
				// Else a power loss brings the marker back: a needless scan.
				err = s.fs.SyncDir(s.opts.Dir)
			}
		}
	}
	s.wakeAllArrivals()
	s.closeFiles()
	if err == nil {
		err = ferr
	}
	return err
}

func (s *Store) closeFiles() {
	s.segMu.Lock()
	defer s.segMu.Unlock()
	for _, seg := range s.segs {
		seg.f.Close()
	}
	s.segs = nil
}

// SetTopicOptions sets and persists the options of topic. The consume-queue
// type of a topic cannot change once it has queues.
func (s *Store) SetTopicOptions(topic string, o TopicOptions) error {
	if err := validTopic(topic); err != nil {
		return err
	}
	if s.closed.Load() {
		return ErrClosed
	}
	s.topicsMu.Lock()
	defer s.topicsMu.Unlock()
	old := s.topicOpts[topic]
	if old == o {
		return nil
	}
	if ts := s.topics[topic]; ts != nil {
		ts.mu.RLock()
		n := len(ts.queues)
		ts.mu.RUnlock()
		if n > 0 {
			return fmt.Errorf("store: topic %q already has queues; its consume-queue type is fixed: %w", topic, ErrInvalidOptions)
		}
	}
	s.topicOpts[topic] = o
	if err := s.saveTopicOptions(); err != nil {
		s.topicOpts[topic] = old
		return err
	}
	return nil
}

// Offsets returns the min offset and the next offset (max) of a queue; only
// dispatched (visible) entries count. An unknown queue gives 0, 0.
func (s *Store) Offsets(topic string, queueID int32) (min, max int64) {
	cq := s.queue(topic, queueID)
	if cq == nil {
		return 0, 0
	}
	cq.mu.RLock()
	defer cq.mu.RUnlock()
	return cq.min, cq.max
}

// Arrivals returns a channel that is closed the next time any entry of topic
// becomes visible (or the store closes). It is one-shot: call again after it
// fires.
func (s *Store) Arrivals(topic string) <-chan struct{} {
	ts := s.topicState(topic, true)
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if s.closed.Load() {
		ch := make(chan struct{})
		close(ch)
		return ch
	}
	if ts.arrival == nil {
		ts.arrival = make(chan struct{})
	}
	return ts.arrival
}

// Queues returns the ids of the queues of topic that have entries, sorted.
func (s *Store) Queues(topic string) []int32 {
	ts := s.topicState(topic, false)
	if ts == nil {
		return nil
	}
	ts.mu.RLock()
	ids := make([]int32, 0, len(ts.queues))
	for id := range ts.queues {
		ids = append(ids, id)
	}
	ts.mu.RUnlock()
	slices.Sort(ids)
	return ids
}

// Topics returns the topics that have queues, sorted.
func (s *Store) Topics() []string {
	s.topicsMu.RLock()
	names := make([]string, 0, len(s.topics))
	for name, ts := range s.topics {
		ts.mu.RLock()
		if len(ts.queues) > 0 {
			names = append(names, name)
		}
		ts.mu.RUnlock()
	}
	s.topicsMu.RUnlock()
	slices.Sort(names)
	return names
}

// LogRange returns the first and the end log offsets (end = next append).
func (s *Store) LogRange() (first, end int64) {
	s.segMu.RLock()
	if len(s.segs) > 0 {
		first = s.segs[0].base
	}
	s.segMu.RUnlock()
	return first, s.written.Load()
}

// WaitDispatched blocks until every append that returned before the call is
// visible to readers, or ctx ends.
func (s *Store) WaitDispatched(ctx context.Context) error {
	return s.waitDispatched(ctx, s.dispatchLimit())
}

func (s *Store) topicState(topic string, create bool) *topicState {
	s.topicsMu.RLock()
	ts := s.topics[topic]
	s.topicsMu.RUnlock()
	if ts != nil || !create {
		return ts
	}
	s.topicsMu.Lock()
	defer s.topicsMu.Unlock()
	if ts = s.topics[topic]; ts == nil {
		ts = &topicState{name: topic, queues: map[int32]*consumeQueue{}}
		s.topics[topic] = ts
	}
	return ts
}

func (s *Store) queue(topic string, id int32) *consumeQueue {
	ts := s.topicState(topic, false)
	if ts == nil {
		return nil
	}
	ts.mu.RLock()
	defer ts.mu.RUnlock()
	return ts.queues[id]
}

func (s *Store) wakeAllArrivals() {
	s.topicsMu.RLock()
	defer s.topicsMu.RUnlock()
	for _, ts := range s.topics {
		ts.mu.Lock()
		if ts.arrival != nil {
			close(ts.arrival)
			ts.arrival = nil
		}
		ts.mu.Unlock()
	}
}

// waitDispatched waits until the index covers the log up to end.
func (s *Store) waitDispatched(ctx context.Context, end int64) error {
	for {
		s.dispMu.Lock()
		ch, derr := s.dispCh, s.dispErr
		s.dispMu.Unlock()
		if s.dispatched.Load() >= end {
			return nil
		}
		if derr != nil {
			return derr
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (s *Store) dispatchFailure() error {
	s.dispMu.Lock()
	defer s.dispMu.Unlock()
	return s.dispErr
}

// Stats is a snapshot of the store's positions, for metrics and health
// checks by the layers above (the store itself registers no metrics).
type Stats struct {
	LogStart   int64 // first log offset still stored
	LogEnd     int64 // end of the written log
	Flushed    int64 // end of the fsynced log
	Dispatched int64 // end of the indexed (visible) log
	Topics     int
	Queues     int
}

// Stats returns the current positions; LogEnd-Dispatched is the index lag
// and LogEnd-Flushed the bytes a power loss could take under async flush.
func (s *Store) Stats() Stats {
	st := Stats{Flushed: s.flushed.Load(), Dispatched: s.dispatched.Load()}
	st.LogStart, st.LogEnd = s.LogRange()
	s.topicsMu.RLock()
	for _, ts := range s.topics {
		ts.mu.RLock()
		if n := len(ts.queues); n > 0 {
			st.Topics++
			st.Queues += n
		}
		ts.mu.RUnlock()
	}
	s.topicsMu.RUnlock()
	return st
}
