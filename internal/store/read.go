package store

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"
)

// span is a run of log bytes holding the messages from queue offset first on.
type span struct {
	logOff int64
	size   int32
	first  int64 // queue offset of the first record in the span
	count  int32
}

// Read returns messages of (topic, queueID) from offset on: at most maxCount
// (<= 0 means 32) and about maxBytes (<= 0 means no byte limit), but at least
// one if any is there. Reading at the queue's max offset returns no message
// and no error (wait on Arrivals); below min or above max it returns an error
// wrapping ErrOffsetOutOfRange. Every record is CRC-checked; one that fails
// gives ErrCorrupt and is never returned.
func (s *Store) Read(ctx context.Context, topic string, queueID int32, offset int64, maxCount, maxBytes int) ([]StoredMessage, error) {
	if s.closed.Load() {
		return nil, ErrClosed
	}
	if maxCount <= 0 {
		maxCount = 32
	}
	q := s.queue(topic, queueID)
	if q == nil {
		if offset == 0 {
			return nil, nil
		}
		return nil, &OffsetRangeError{Topic: topic, QueueID: queueID, Offset: offset}
	}
	for attempt := 0; ; attempt++ {
		spans, min, max := q.collect(offset, maxCount, maxBytes)
		if offset < min || offset > max {
			return nil, &OffsetRangeError{Topic: topic, QueueID: queueID, Offset: offset, Min: min, Max: max}
		}
		msgs, err := s.readSpans(ctx, q, spans, offset, maxCount)
		if errors.Is(err, errSegmentGone) {
			if attempt < 3 {
				continue // retention moved the queue's min meanwhile; look again
			}
			// Retention keeps taking segments from under this reader: the
			// messages are gone, as below the minimum.
			return nil, &OffsetRangeError{Topic: topic, QueueID: queueID, Offset: offset, Min: min, Max: max}
		}
		return msgs, err
	}
}

// collect picks the entries to read under the queue's read lock.
func (q *consumeQueue) collect(offset int64, maxCount, maxBytes int) ([]span, int64, int64) {
	q.mu.RLock()
	defer q.mu.RUnlock()
	if offset < q.min || offset >= q.max {
		return nil, q.min, q.max
	}
	var spans []span
	bytes, count := 0, 0
	for off := offset; off < q.max && count < maxCount; {
		c, i, ok := q.find(off)
		if !ok {
			break
		}
		e := q.entryAt(c, i)
		if len(spans) > 0 && maxBytes > 0 && bytes+int(e.Size) > maxBytes {
			break
		}
		spans = append(spans, span{logOff: e.LogOffset, size: e.Size, first: e.BaseOffset, count: e.Count})
		bytes += int(e.Size)
		count += int(e.BaseOffset + int64(e.Count) - off)
		off = e.BaseOffset + int64(e.Count)
	}
	return spans, q.min, q.max
}

// readSpans reads the spans from the log, merging adjacent ones into one read,
// and decodes them with full checks.
func (s *Store) readSpans(ctx context.Context, q *consumeQueue, spans []span, offset int64, maxCount int) ([]StoredMessage, error) {
	var out []StoredMessage
	var buf []byte
	for i := 0; i < len(spans) && len(out) < maxCount; {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		j := i + 1
		end := spans[i].logOff + int64(spans[i].size)
		// One read stays within one segment: an append that filled a
		// segment exactly is followed by a record at the next segment's
		// base, adjacent in offsets but in another file.
		segEnd := s.segmentEnd(spans[i].logOff)
		for j < len(spans) && spans[j].logOff == end && end+int64(spans[j].size) <= segEnd && end-spans[i].logOff < 1<<20 {
			end += int64(spans[j].size)
			j++
		}
		var err error
		buf, err = s.readLog(buf, spans[i].logOff, int(end-spans[i].logOff))
		if errors.Is(err, errSegmentGone) && i > 0 {
			return out, nil // retention took the rest; return what was read
		}
		if err != nil {
			return nil, err
		}
		p := 0
		for k := i; k < j; k++ {
			sp := spans[k]
			for r := int32(0); r < sp.count; r++ {
				v, err := parseRecord(buf[p:])
				want := sp.first + int64(r)
				if err == nil && (v.queueOffset != want || v.queueID != q.id || string(v.topic) != q.topic ||
					v.logOffset != spans[i].logOff+int64(p)) {
					err = fmt.Errorf("%w: record at log offset %d is %s/%d@%d, want %s/%d@%d",
						ErrCorrupt, spans[i].logOff+int64(p), v.topic, v.queueID, v.queueOffset, q.topic, q.id, want)
				}
				if err != nil {
					return nil, fmt.Errorf("store: read %s/%d at offset %d: %w", q.topic, q.id, want, err)
				}
				p += v.size
				if want >= offset && len(out) < maxCount {
					out = append(out, v.message())
				}
			}
		}
		i = j
	}
	return out, nil
}

// OffsetByTime returns the first offset of the queue whose store time is at
// or after t; the queue's max offset if there is none.
func (s *Store) OffsetByTime(topic string, queueID int32, t time.Time) (int64, error) {
	if s.closed.Load() {
		return 0, ErrClosed
	}
	q := s.queue(topic, queueID)
	if q == nil {
		return 0, nil
	}
	ms := t.UnixMilli()
	q.mu.RLock()
	lo, hi := q.min, q.max
	q.mu.RUnlock()
	var ferr error
	// Store times are monotonic along the log, so along each queue too.
	n := sort.Search(int(hi-lo), func(i int) bool {
		if ferr != nil {
			return true
		}
		ts, err := s.storeTimeAt(q, lo+int64(i))
		if err != nil {
			ferr = err
			return true
		}
		return ts >= ms
	})
	if ferr != nil {
		return 0, ferr
	}
	return lo + int64(n), nil
}

func (s *Store) storeTimeAt(q *consumeQueue, off int64) (int64, error) {
	e, ok := q.lookup(off)
	if !ok {
		return 0, &OffsetRangeError{Topic: q.topic, QueueID: q.id, Offset: off}
	}
	if q.batch {
		return e.StoreTimestamp, nil
	}
	b, err := s.readLog(nil, e.LogOffset, int(e.Size))
	if err != nil {
		return 0, err
	}
	v, err := parseRecord(b)
	if err != nil {
		return 0, err
	}
	return v.storeTS, nil
}
