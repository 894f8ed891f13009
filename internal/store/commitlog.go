package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"

	"github.com/twinmq/twinmq/internal/store/vfs"
)

const (
	commitLogDir = "commitlog"
	cqDir        = "consumequeue"
	abortName    = "abort"
)

// segment is one commit-log file covering [base, base+size) of the log.
type segment struct {
	base int64
	size int64 // logical size; the file may be shorter (it grows by writes)
	f    vfs.File
	name string
}

func (g *segment) end() int64 { return g.base + g.size }

func segmentName(base int64) string { return fmt.Sprintf("%020d", base) }

// validTopic checks a topic name: 1..255 bytes of valid UTF-8 without NUL.
func validTopic(topic string) error {
	if len(topic) == 0 || len(topic) > maxTopicLen || !utf8.ValidString(topic) {
		return fmt.Errorf("store: topic %q must be 1..%d bytes of UTF-8: %w", topic, maxTopicLen, ErrInvalidMessage)
	}
	escaped := 0
	for i := 0; i < len(topic); i++ {
		if topic[i] == 0 {
			return fmt.Errorf("store: topic %q holds a NUL byte: %w", topic, ErrInvalidMessage)
		}
		escaped += escapedLen(topic[i])
	}
	if escaped > maxFileName {
		// Its queue directory could not be created, and every checkpoint
		// of the store would fail.
		return fmt.Errorf("store: topic %q escapes to a directory name of %d bytes, over %d: %w",
			topic, escaped, maxFileName, ErrInvalidMessage)
	}
	return nil
}

// maxFileName is the longest file name common file systems take.
const maxFileName = 255

// validate checks a batch and returns the size of its records.
func (s *Store) validate(msgs []Message) (int, error) {
	if len(msgs) == 0 {
		return 0, ErrEmptyBatch
	}
	if len(msgs) > 1<<24 {
		return 0, fmt.Errorf("store: batch of %d messages: %w", len(msgs), ErrMessageTooLarge)
	}
	size := 0
	m0 := &msgs[0]
	if err := validTopic(m0.Topic); err != nil {
		return 0, err
	}
	if m0.QueueID < 0 {
		return 0, fmt.Errorf("store: queue id %d is negative: %w", m0.QueueID, ErrInvalidMessage)
	}
	for i := range msgs {
		m := &msgs[i]
		if m.Topic != m0.Topic || m.QueueID != m0.QueueID {
			return 0, fmt.Errorf("store: message %d is for %s/%d, message 0 for %s/%d: %w", i, m.Topic, m.QueueID, m0.Topic, m0.QueueID, ErrMixedBatch)
		}
		if len(m.BornHost) > maxFieldLen || len(m.Tag) > maxFieldLen {
			return 0, fmt.Errorf("store: message %d: born host or tag over %d bytes: %w", i, maxFieldLen, ErrInvalidMessage)
		}
		n, longestKey := payloadSize(m)
		if longestKey > maxFieldLen {
			return 0, fmt.Errorf("store: message %d: property key over %d bytes: %w", i, maxFieldLen, ErrInvalidMessage)
		}
		if n > s.opts.MaxMessageSize {
			return 0, fmt.Errorf("store: message %d is %d bytes, limit %d: %w", i, n, s.opts.MaxMessageSize, ErrMessageTooLarge)
		}
		size += n + recordOverhead
	}
	return size, nil
}

// Append stores 1..N messages of one (topic, queue) as one operation: one
// encode, one write, contiguous queue offsets. Under FlushSync it returns
// once an fsync covered the batch (Durability Flushed); if ctx ends first it
// returns the result with an error wrapping ErrNotDurable.
func (s *Store) Append(ctx context.Context, msgs []Message) (AppendResult, error) {
	size, err := s.validate(msgs)
	if err != nil {
		return AppendResult{}, err
	}
	bp, _ := s.encPool.Get().(*[]byte)
	if bp == nil {
		bp = new([]byte)
	}
	defer func() {
		if cap(*bp) <= 8<<20 {
			s.encPool.Put(bp)
		}
	}()
	// One allocation at most: growing record by record from an empty
	// buffer (after the pool lost its buffers to a GC) copied a batch of
	// 64 KiB six times over.
	buf := slices.Grow((*bp)[:0], size)
	for i := range msgs {
		buf = appendRecord(buf, &msgs[i], uint32(i), uint32(len(msgs)))
	}
	*bp = buf
	total := int64(len(buf))
	if total > s.opts.SegmentSize-blankSize {
		return AppendResult{}, fmt.Errorf("store: batch of %d bytes does not fit a %d-byte segment: %w", total, s.opts.SegmentSize, ErrMessageTooLarge)
	}
	if err := ctx.Err(); err != nil {
		return AppendResult{}, err
	}
	res, err := s.write(buf, msgs)
	if err != nil {
		return AppendResult{}, err
	}
	end := res.LogOffset + total
	if s.opts.Flush == FlushAsync {
		select {
		case s.dispatchReq <- struct{}{}:
		default:
		}
		return res, nil
	}
	select {
	case s.flushReq <- struct{}{}:
	default:
	}
	if err := s.waitFlushed(ctx, end); err != nil {
		return res, fmt.Errorf("store: %w: %w", ErrNotDurable, err)
	}
	res.Durability = Flushed
	return res, nil
}

// write assigns offsets and writes the encoded batch under the append lock.
func (s *Store) write(buf []byte, msgs []Message) (AppendResult, error) {
	topic, queueID, count := msgs[0].Topic, msgs[0].QueueID, len(msgs)
	s.appendMu.Lock()
	defer s.appendMu.Unlock()
	if s.closing {
		return AppendResult{}, ErrClosed
	}
	if s.failErr != nil {
		return AppendResult{}, fmt.Errorf("%w: %w", ErrFailed, s.failErr)
	}
	total := int64(len(buf))
	seg := s.activeSegment()
	if seg == nil || (s.writePos+total > seg.end()-blankSize && s.writePos+total != seg.end()) {
		var err error
		if seg, err = s.roll(seg); err != nil {
			return AppendResult{}, err
		}
	}
	now := time.Now().UnixMilli()
	if now < s.lastStoreTS {
		now = s.lastStoreTS // keep store time monotonic along the log for time lookups
	}
	next := s.nextOff.at(topic, queueID)
	first := *next
	pos := s.writePos
	for p, i := int64(0), int64(0); p < total; i++ {
		size := int64(le.Uint32(buf[p:]))
		stampRecord(buf[p:p+size], first+i, pos+p, now)
		p += size
	}
	if _, err := seg.f.WriteAt(buf, pos-seg.base); err != nil {
		// Take back whatever part of the batch reached the file, so that no
		// unacknowledged record can be found there by a later recovery.
		if terr := seg.f.Truncate(pos - seg.base); terr != nil {
			s.failErr = fmt.Errorf("write at %d: %w; truncate after it: %w", pos, err, terr)
			s.log.Error("store: commit log write and truncate failed", zap.Error(s.failErr))
		}
		return AppendResult{}, fmt.Errorf("store: write commit log at %d: %w", pos, err)
	}
	s.lastStoreTS = now
	s.writePos = pos + total
	*next = first + int64(count)
	s.handLive(buf, msgs, first, pos, now)
	s.written.Store(s.writePos)
	return AppendResult{
		Topic: topic, QueueID: queueID, FirstOffset: first, Count: count,
		LogOffset: pos, StoreTimestamp: now, Durability: Buffered,
	}, nil
}

func (s *Store) activeSegment() *segment {
	s.segMu.RLock()
	defer s.segMu.RUnlock()
	if len(s.segs) == 0 {
		return nil
	}
	g := s.segs[len(s.segs)-1]
	if s.writePos >= g.end() {
		return nil
	}
	return g
}

// roll pads the rest of seg with a blank record and starts the next segment.
// Called with appendMu held.
func (s *Store) roll(seg *segment) (*segment, error) {
	if seg != nil && s.writePos < seg.end() {
		var blank [blankSize]byte
		le.PutUint32(blank[offSize:], uint32(seg.end()-s.writePos))
		le.PutUint32(blank[offMagic:], blankMagic)
		if _, err := seg.f.WriteAt(blank[:], s.writePos-seg.base); err != nil {
			// Best effort: the write error is what the caller gets, and a pad
			// left half-written is cut as a torn tail by recovery.
			_ = seg.f.Truncate(s.writePos - seg.base)
			return nil, fmt.Errorf("store: pad segment %s: %w", seg.name, err)
		}
		s.writePos = seg.end()
		s.written.Store(s.writePos)
	}
	g, err := s.createSegment(s.writePos)
	if err != nil {
		return nil, err
	}
	s.segMu.Lock()
	s.segs = append(s.segs, g)
	s.segMu.Unlock()
	return g, nil
}

func (s *Store) createSegment(base int64) (*segment, error) {
	name := filepath.Join(s.opts.Dir, commitLogDir, segmentName(base))
	f, err := s.fs.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("store: create segment: %w", err)
	}
	// The new name must be durable before any append in the file is
	// acknowledged: a power loss would otherwise take the whole file.
	if err := s.fs.SyncDir(filepath.Dir(name)); err != nil {
		f.Close()
		return nil, fmt.Errorf("store: create segment: %w", err)
	}
	if p, ok := f.(vfs.Preallocator); ok {
		// Best effort: a file system without it (or short of space, which
		// the writes will report) allocates as the log grows.
		_ = p.Preallocate(s.opts.SegmentSize)
	}
	return &segment{base: base, size: s.opts.SegmentSize, f: f, name: name}, nil
}

// segmentAt returns the segment holding log offset off; segMu must be held.
func (s *Store) segmentAt(off int64) *segment {
	i := sort.Search(len(s.segs), func(i int) bool { return s.segs[i].end() > off })
	if i == len(s.segs) || s.segs[i].base > off {
		return nil
	}
	return s.segs[i]
}

// segmentEnd returns the end of the segment holding log offset off, or -1
// when no segment holds it.
func (s *Store) segmentEnd(off int64) int64 {
	s.segMu.RLock()
	defer s.segMu.RUnlock()
	if g := s.segmentAt(off); g != nil {
		return g.end()
	}
	return -1
}

// readLog reads n bytes of the log at off into dst (grown as needed). The
// range must lie in one segment.
func (s *Store) readLog(dst []byte, off int64, n int) ([]byte, error) {
	s.segMu.RLock()
	defer s.segMu.RUnlock()
	g := s.segmentAt(off)
	if g == nil || off+int64(n) > g.end() {
		return dst, errSegmentGone
	}
	if cap(dst) < n {
		dst = make([]byte, n)
	}
	dst = dst[:n]
	k, err := g.f.ReadAt(dst, off-g.base)
	if k == n {
		return dst, nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return dst[:k], fmt.Errorf("store: read log at %d: %w", off, err)
}

// readLogShort is readLog that accepts a short read: the end of a segment
// file is short of its logical end after the padding record.
func (s *Store) readLogShort(dst []byte, off int64, n int) ([]byte, error) {
	b, err := s.readLog(dst, off, n)
	if err != nil && len(b) > 0 && errors.Is(err, io.ErrUnexpectedEOF) {
		return b, nil
	}
	return b, err
}

// errSegmentGone: the log range was deleted by retention meanwhile.
var errSegmentGone = errors.New("store: log segment deleted")

// waitFlushed waits until an fsync covered the log up to end.
func (s *Store) waitFlushed(ctx context.Context, end int64) error {
	for {
		s.flushMu.Lock()
		ch, ferr := s.flushCh, s.flushErr
		s.flushMu.Unlock()
		if s.flushed.Load() >= end {
			return nil
		}
		if ferr != nil {
			return ferr
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// maxLive bounds the appends waiting in Store.live. When the index reader
// falls that far behind, the waiting entries are dropped and the reader
// reads those appends back from the log instead, as it does after a
// restart.
const maxLive = 1024

// handLive gives the index pipeline the queue entries of the append just
// written at pos: the appender knows them all (the records were encoded
// and stamped here), so the index reader need not read the records back
// and the workers need not parse and check them again. Called with
// appendMu held, so the entries are queued in log order.
func (s *Store) handLive(buf []byte, msgs []Message, first, pos, now int64) {
	var entries []dispEntry
	if p := s.pipe; p != nil {
		select {
		case entries = <-p.freeEntries:
		default:
		}
	}
	entries = slices.Grow(entries[:0], len(msgs))
	for i, p := 0, int64(0); i < len(msgs); i++ {
		size := int64(le.Uint32(buf[p:]))
		entries = append(entries, dispEntry{
			topic: msgs[0].Topic, queueID: msgs[0].QueueID, qoff: first + int64(i), logOff: pos + p,
			size: int32(size), tagHash: TagHash(msgs[i].Tag), storeTS: now,
			batchIdx: uint32(i), batchCnt: uint32(len(msgs)),
		})
		p += size
	}
	// A nil done: the job needs no worker (see the ordered stage).
	job := &dispJob{start: pos, end: pos + int64(len(buf)), entries: entries}
	s.liveMu.Lock()
	if len(s.live) >= maxLive {
		clear(s.live)
		s.live = s.live[:0]
	}
	s.live = append(s.live, job)
	s.liveMu.Unlock()
}

// takeLive returns the queued append that starts at pos if it ends within
// limit, dropping those before pos (the reader read them from the log).
func (s *Store) takeLive(pos, limit int64) *dispJob {
	s.liveMu.Lock()
	defer s.liveMu.Unlock()
	drop := 0
	for drop < len(s.live) && s.live[drop].start < pos {
		drop++
	}
	if drop > 0 {
		clear(s.live[:drop])
		s.live = s.live[drop:]
	}
	if len(s.live) == 0 || s.live[0].start != pos || s.live[0].end > limit {
		return nil
	}
	job := s.live[0]
	s.live[0] = nil
	s.live = s.live[1:]
	return job
}
