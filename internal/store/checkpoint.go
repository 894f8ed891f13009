package store

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"
)

// checkpointLoop periodically writes the consume queues and moves the
// checkpoint, then applies retention.
func (s *Store) checkpointLoop() {
	defer s.bg.Done()
	t := time.NewTicker(s.opts.CheckpointInterval)
	defer t.Stop()
	for n := 1; ; n++ {
		select {
		case <-s.quit:
			return
		case <-t.C:
		}
		if err := s.checkpoint(n%thoroughEvery == 0); err != nil {
			s.log.Error("store: checkpoint failed", zap.Error(err))
			continue
		}
		if err := s.applyRetention(time.Now()); err != nil {
			s.log.Error("store: retention failed", zap.Error(err))
		}
	}
}

// thoroughEvery: every this many checkpoints, all queue tails are written.
const thoroughEvery = 12

// allQueues lists every consume queue.
func (s *Store) allQueues() []*consumeQueue {
	s.topicsMu.RLock()
	defer s.topicsMu.RUnlock()
	var qs []*consumeQueue
	for _, ts := range s.topics {
		ts.mu.RLock()
		for _, q := range ts.queues {
			qs = append(qs, q)
		}
		ts.mu.RUnlock()
	}
	return qs
}

// checkpoint makes every queue entry below the chosen offset durable in the
// queue files and then records that offset. The offset is taken before the
// queues are written, and it is at most the flushed end of the log, so a
// recovery that starts there starts at a valid record boundary.
//
// A thorough checkpoint writes every queue; an ordinary one skips queues with
// only a small tail pending and keeps its offset below those tails.
func (s *Store) checkpoint(thorough bool) error {
	s.checkpointMu.Lock()
	defer s.checkpointMu.Unlock()
	d := min(s.dispatched.Load(), s.flushed.Load())
	s.appendMu.Lock()
	logEnd, storeTS := s.writePos, s.lastStoreTS
	s.appendMu.Unlock()
	qs := s.allQueues()
	// Many small files: write and fsync them from many goroutines so the
	// file system can merge their journal commits.
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	work := make(chan *consumeQueue)
	for range min(64, len(qs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for q := range work {
				pending, err := s.persistQueue(q, thorough)
				mu.Lock()
				if err != nil && first == nil {
					first = err
				}
				d = min(d, pending)
				mu.Unlock()
			}
		}()
	}
	for _, q := range qs {
		work <- q
	}
	close(work)
	wg.Wait()
	if first != nil {
		return first
	}
	s.cpSeq++
	return s.writeCheckpoint(checkpointRec{seq: s.cpSeq, dispatched: d, logEnd: logEnd, storeTS: storeTS})
}

// applyRetention deletes the oldest segments past RetentionBytes or
// RetentionAge, never the active one nor any the last checkpoint still needs
// for recovery, and moves the queues' min offsets past them.
func (s *Store) applyRetention(now time.Time) error {
	if s.opts.RetentionBytes == 0 && s.opts.RetentionAge == 0 {
		return nil
	}
	cp, ok := s.readCheckpoint()
	if !ok {
		return nil
	}
	s.segMu.RLock()
	segs := append([]*segment(nil), s.segs...)
	s.segMu.RUnlock()
	written := s.written.Load()
	var total int64
	for _, g := range segs {
		total += min(written, g.end()) - g.base
	}
	n := 0
	for i := 0; i+1 < len(segs); i++ {
		g := segs[i]
		if g.end() > cp.dispatched {
			break
		}
		drop := s.opts.RetentionBytes > 0 && total > s.opts.RetentionBytes
		if !drop && s.opts.RetentionAge > 0 {
			// Every record of g is older than the first record of the next.
			if ts, ok := s.firstStoreTS(segs[i+1]); ok && now.UnixMilli()-ts > s.opts.RetentionAge.Milliseconds() {
				drop = true
			}
		}
		if !drop {
			break
		}
		total -= g.size
		n++
	}
	if n == 0 {
		return nil
	}
	// The queues' minimums move first: a reader then finds its offset
	// below the minimum (ErrOffsetOutOfRange) rather than a segment gone
	// under an offset still in range.
	logMin := segs[n-1].end()
	for _, q := range s.allQueues() {
		q.trimBelow(logMin)
	}
	s.segMu.Lock()
	s.segs = s.segs[n:]
	s.segMu.Unlock()
	for _, g := range segs[:n] {
		_ = g.f.Close() // an old segment, removed next: the Remove error is the one that counts
		if err := s.fs.Remove(g.name); err != nil {
			return fmt.Errorf("store: delete segment %s: %w", g.name, err)
		}
		s.log.Info("store: retention deleted a segment", zap.String("segment", g.name))
	}
	if err := s.fs.SyncDir(filepath.Join(s.opts.Dir, commitLogDir)); err != nil {
		return fmt.Errorf("store: delete segments: %w", err)
	}
	return nil
}

func (s *Store) firstStoreTS(g *segment) (int64, bool) {
	var b [headerSize]byte
	if _, err := g.f.ReadAt(b[:], 0); err != nil {
		return 0, false
	}
	if le.Uint32(b[offMagic:]) != recordMagic {
		return 0, false
	}
	return int64(le.Uint64(b[offStoreTS:])), true
}

// loadQueues reads the consume-queue files, keeping of each queue the longest
// prefix of well-formed entries that point inside [.., logEnd), and trims
// entries below logMin. damaged reports that a queue lost entries that way.
func (s *Store) loadQueues(logMin, logEnd int64) (damaged bool, err error) {
	root := filepath.Join(s.opts.Dir, cqDir)
	topicDirs, err := s.fs.ReadDir(root)
	if err != nil {
		return false, fmt.Errorf("store: list consume queues: %w", err)
	}
	for _, td := range topicDirs {
		topic, ok := unescapeTopic(td)
		if !ok || validTopic(topic) != nil {
			continue
		}
		qdirs, err := s.fs.ReadDir(filepath.Join(root, td))
		if err != nil {
			return false, fmt.Errorf("store: list consume queues: %w", err)
		}
		for _, qd := range qdirs {
			id, err := strconv.ParseInt(qd, 10, 32)
			if err != nil || id < 0 {
				continue
			}
			q := newConsumeQueue(s.opts.Dir, topic, int32(id), s.topicOpts[topic].BatchCQ, s.opts.CQFileEntries)
			broken, err := s.loadQueue(q, logEnd)
			if err != nil {
				return false, err
			}
			damaged = damaged || broken
			if len(q.chunks) == 0 {
				continue
			}
			q.trimBelow(logMin)
			q.dirMade = true
			ts := s.topicState(topic, true)
			ts.queues[int32(id)] = q
		}
	}
	return damaged, nil
}

// loadQueue loads one queue's files; broken reports that entries were
// dropped (a file cut short, garbage, or a file missing in the sequence).
func (s *Store) loadQueue(q *consumeQueue, logEnd int64) (broken bool, err error) {
	names, err := s.fs.ReadDir(q.dir)
	if err != nil {
		return false, fmt.Errorf("store: list consume queue: %w", err)
	}
	decode := DecodeCQEntry
	if q.batch {
		decode = DecodeBatchCQEntry
	}
	lastLog := int64(-1)
	for _, name := range names {
		first, err := strconv.ParseInt(name, 10, 64)
		if err != nil || len(name) != 20 {
			continue
		}
		path := filepath.Join(q.dir, name)
		if broken || (len(q.chunks) > 0 && first != q.max) {
			broken = true
			q.removed = append(q.removed, path)
			q.dirty = true
			continue
		}
		b, err := s.readFile(path)
		if err != nil && !os.IsNotExist(err) {
			return false, fmt.Errorf("store: read consume queue: %w", err)
		}
		c := &cqChunk{first: first}
		if len(q.chunks) == 0 {
			q.min, q.max = first, first
		}
		n := 0
		for ; (n+1)*q.width <= len(b); n++ {
			e, err := decode(b[n*q.width : (n+1)*q.width])
			if err != nil || e.LogOffset <= lastLog || e.LogOffset+int64(e.Size) > logEnd {
				break
			}
			if !q.batch {
				e.BaseOffset, e.Count = first+int64(n), 1
			} else if e.BaseOffset != q.max {
				break
			}
			lastLog = e.LogOffset
			q.max = e.BaseOffset + int64(e.Count)
		}
		c.buf = append(make([]byte, 0, n*q.width), b[:n*q.width]...)
		c.persisted = len(c.buf)
		if len(c.buf) < len(b) {
			c.truncated = true
			broken = true
			q.dirty = true
		}
		q.chunks = append(q.chunks, c)
	}
	return broken, nil
}
