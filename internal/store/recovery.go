package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strconv"

	"go.uber.org/zap"
)

const (
	checkpointName  = "checkpoint"
	topicsName      = "topics.json"
	checkpointMagic = 0x544d5143 // "TMQC"
	checkpointSlot  = 64
)

// checkpointRec is one slot of the checkpoint file. Two slots alternate so a
// torn checkpoint write leaves the previous one readable.
type checkpointRec struct {
	seq        uint64
	dispatched int64 // every queue entry for records below this is in the queue files, synced
	logEnd     int64 // end of the log when it was taken
	storeTS    int64 // latest store timestamp given out, kept monotonic across restarts
}

func (c checkpointRec) encode() []byte {
	b := make([]byte, checkpointSlot)
	le.PutUint32(b[0:], checkpointMagic)
	le.PutUint32(b[4:], 1)
	le.PutUint64(b[8:], c.seq)
	le.PutUint64(b[16:], uint64(c.dispatched))
	le.PutUint64(b[24:], uint64(c.logEnd))
	le.PutUint64(b[32:], uint64(c.storeTS))
	le.PutUint32(b[40:], crc32.Checksum(b[:40], crcTable))
	return b
}

func decodeCheckpoint(b []byte) (checkpointRec, bool) {
	if len(b) < 44 || le.Uint32(b) != checkpointMagic || le.Uint32(b[4:]) != 1 ||
		crc32.Checksum(b[:40], crcTable) != le.Uint32(b[40:]) {
		return checkpointRec{}, false
	}
	c := checkpointRec{seq: le.Uint64(b[8:]), dispatched: int64(le.Uint64(b[16:])), logEnd: int64(le.Uint64(b[24:])),
		storeTS: int64(le.Uint64(b[32:]))}
	return c, c.dispatched >= 0 && c.logEnd >= c.dispatched
}

func (s *Store) readFile(name string) ([]byte, error) {
	f, err := s.fs.OpenFile(name, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	n, err := f.Size()
	if err != nil {
		return nil, err
	}
	b := make([]byte, n)
	k, err := f.ReadAt(b, 0)
	if err != nil && !(errors.Is(err, io.EOF) && k == len(b)) {
		return nil, err
	}
	return b, nil
}

func (s *Store) readCheckpoint() (checkpointRec, bool) {
	b, err := s.readFile(filepath.Join(s.opts.Dir, checkpointName))
	if err != nil {
		return checkpointRec{}, false
	}
	var best checkpointRec
	found := false
	for off := 0; off+checkpointSlot <= len(b); off += checkpointSlot {
		if c, ok := decodeCheckpoint(b[off : off+checkpointSlot]); ok && (!found || c.seq > best.seq) {
			best, found = c, true
		}
	}
	return best, found
}

func (s *Store) writeCheckpoint(c checkpointRec) error {
	f, err := s.fs.OpenFile(filepath.Join(s.opts.Dir, checkpointName), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("store: checkpoint: %w", err)
	}
	defer f.Close()
	if _, err := f.WriteAt(c.encode(), int64(c.seq%2)*checkpointSlot); err != nil {
		return fmt.Errorf("store: checkpoint: %w", err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("store: checkpoint: %w", err)
	}
	if !s.cpNamed {
		// The file may be new: its name must last like its bytes. Once per
		// run (checkpointMu serialises the writers).
		if err := s.fs.SyncDir(s.opts.Dir); err != nil {
			return fmt.Errorf("store: checkpoint: %w", err)
		}
		s.cpNamed = true
	}
	return nil
}

func (s *Store) loadTopicOptions() error {
	b, err := s.readFile(filepath.Join(s.opts.Dir, topicsName))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("store: read topic options: %w", err)
	}
	var opts map[string]TopicOptions
	if err := json.Unmarshal(b, &opts); err != nil {
		return fmt.Errorf("store: topic options file: %w: %w", ErrCorrupt, err)
	}
	if opts == nil {
		// "null": a file no version of the store writes.
		return fmt.Errorf("store: topic options file holds no object: %w", ErrCorrupt)
	}
	s.topicOpts = opts
	return nil
}

// saveTopicOptions writes the options atomically (temporary file, fsync,
// rename). Called with topicsMu held.
func (s *Store) saveTopicOptions() error {
	b, err := json.Marshal(s.topicOpts)
	if err != nil {
		return err
	}
	tmp := filepath.Join(s.opts.Dir, topicsName+".tmp")
	f, err := s.fs.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("store: save topic options: %w", err)
	}
	_, err = f.WriteAt(b, 0)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = s.fs.Rename(tmp, filepath.Join(s.opts.Dir, topicsName))
	}
	if err == nil {
		// Until the directory is synced a power loss may bring the old
		// options back, or none.
		err = s.fs.SyncDir(s.opts.Dir)
	}
	if err != nil {
		return fmt.Errorf("store: save topic options: %w", err)
	}
	return nil
}

// uncleanReason says why recovery scanned the log.
func uncleanReason(crashed, cpOK bool) string {
	switch {
	case crashed:
		return "the last run did not close the store"
	case !cpOK:
		return "no readable checkpoint"
	default:
		return "the checkpoint does not match the log"
	}
}

// recover brings the files to a consistent state and starts the index
// pipeline; see "Recovery" in doc.go.
func (s *Store) recover(ctx context.Context) error {
	for _, d := range []string{s.opts.Dir, filepath.Join(s.opts.Dir, commitLogDir), filepath.Join(s.opts.Dir, cqDir)} {
		if err := s.fs.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("store: create %s: %w", d, err)
		}
	}
	if err := s.loadTopicOptions(); err != nil {
		return err
	}
	abortPath := filepath.Join(s.opts.Dir, abortName)
	crashed, _, err := s.fs.Stat(abortPath)
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	f, err := s.fs.OpenFile(abortPath, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("store: create abort marker: %w", err)
	}
	f.Close()
	// A marker a power loss can take back would make the next open trust a
	// checkpoint that the crash left behind the log.
	if err := s.fs.SyncDir(s.opts.Dir); err != nil {
		return fmt.Errorf("store: create abort marker: %w", err)
	}

	cp, cpOK := s.readCheckpoint()
	s.cpSeq = cp.seq
	s.lastStoreTS = cp.storeTS
	physEnd, err := s.openSegments()
	if err != nil {
		return err
	}
	logMin, _ := s.LogRange()
	var logEnd, from int64
	if !crashed && cpOK && cp.logEnd == physEnd && cp.dispatched >= logMin {
		logEnd, from = cp.logEnd, cp.dispatched
	} else {
		from = logMin
		if cpOK && cp.dispatched >= logMin && cp.dispatched <= physEnd {
			from = cp.dispatched
		}
		if logEnd, err = s.scanLog(from); err != nil {
			return err
		}
		if err := s.cutLog(logEnd); err != nil {
			return err
		}
		switch {
		case !crashed && !cpOK && len(s.segs) == 0:
			// A new data directory: nothing was there to recover.
			s.log.Debug("store: new data directory")
		default:
			s.log.Info("store: recovered after an unclean shutdown", zap.String("reason", uncleanReason(crashed, cpOK)),
				zap.Int64("scanFrom", from), zap.Int64("logEnd", logEnd), zap.Int64("cut", physEnd-logEnd))
		}
	}
	s.writePos = logEnd
	s.written.Store(logEnd)
	s.flushed.Store(logEnd)
	damaged, err := s.loadQueues(logMin, logEnd)
	if err != nil {
		return err
	}
	if damaged && !crashed {
		// After a clean Close the files are trusted and nothing is
		// re-indexed: a queue file found cut short or missing would
		// lose its entries, and their offsets would be handed out again.
		err = fmt.Errorf("%w: a queue file is damaged after a clean shutdown", errQueueGap)
	} else {
		s.pipe = s.startPipeline(from)
		if err = s.waitRecovered(ctx, logEnd); err != nil {
			s.pipe.stop()
		}
	}
	if err != nil {
		if !errors.Is(err, errQueueGap) {
			return err
		}
		if err := s.rebuildQueues(ctx, logMin, logEnd, err); err != nil {
			return err
		}
	}
	s.topicsMu.RLock()
	for _, ts := range s.topics {
		for id, q := range ts.queues {
			*s.nextOff.at(ts.name, id) = q.max
		}
	}
	s.topicsMu.RUnlock()
	if err := s.checkpoint(true); err != nil {
		s.pipe.stop()
		return err
	}
	return nil
}

var errQueueGap = errors.New("store: consume queue gap")

// rebuildQueues rebuilds every queue from the whole log, after a queue file
// lost entries the checkpoint promised (why). A queue whose messages
// retention deleted has no record left to rebuild it from: only its file
// remembered its next offset, so it is kept as loaded and written again.
func (s *Store) rebuildQueues(ctx context.Context, logMin, logEnd int64, why error) error {
	s.log.Warn("store: consume queues inconsistent, rebuilding them from the log", zap.Error(why))
	var retired []*consumeQueue
	s.topicsMu.Lock()
	for _, ts := range s.topics {
		for _, q := range ts.queues {
			if q.min == q.max {
				retired = append(retired, q)
			}
		}
	}
	s.topics = map[string]*topicState{}
	s.topicsMu.Unlock()
	if err := s.fs.RemoveAll(filepath.Join(s.opts.Dir, cqDir)); err != nil {
		return fmt.Errorf("store: remove consume queues: %w", err)
	}
	if err := s.fs.MkdirAll(filepath.Join(s.opts.Dir, cqDir), 0o755); err != nil {
		return fmt.Errorf("store: create consume queues: %w", err)
	}
	s.pipe = s.startPipeline(logMin)
	if err := s.waitRecovered(ctx, logEnd); err != nil {
		s.pipe.stop()
		return err
	}
	for _, q := range retired {
		ts := s.topicState(q.topic, true)
		ts.mu.Lock()
		if ts.queues[q.id] == nil {
			q.mu.Lock()
			for _, c := range q.chunks {
				c.persisted, c.truncated = 0, false
			}
			q.removed, q.dirMade, q.dirty = nil, false, true
			q.mu.Unlock()
			ts.queues[q.id] = q
		}
		ts.mu.Unlock()
	}
	return nil
}

func (s *Store) waitRecovered(ctx context.Context, logEnd int64) error {
	if err := s.waitDispatched(ctx, logEnd); err != nil {
		return err
	}
	// The ordered stage has applied everything below logEnd; its gap report
	// is stable now.
	s.pipe.stop()
	gap := s.pipe.gap
	s.pipe = s.startPipeline(logEnd)
	if gap != nil {
		return fmt.Errorf("%w: %w", errQueueGap, gap)
	}
	return nil
}

// openSegments opens every commit-log file and returns the physical end of
// the log (base of the last segment plus its file size).
func (s *Store) openSegments() (int64, error) {
	dir := filepath.Join(s.opts.Dir, commitLogDir)
	names, err := s.fs.ReadDir(dir)
	if err != nil {
		return 0, fmt.Errorf("store: list commit log: %w", err)
	}
	var end int64
	for _, name := range names {
		base, err := strconv.ParseInt(name, 10, 64)
		if err != nil || len(name) != 20 || base < 0 {
			continue
		}
		f, err := s.fs.OpenFile(filepath.Join(dir, name), os.O_RDWR, 0)
		if err != nil {
			return 0, fmt.Errorf("store: open segment: %w", err)
		}
		size, err := f.Size()
		if err != nil {
			f.Close()
			return 0, fmt.Errorf("store: open segment: %w", err)
		}
		g := &segment{base: base, size: max(s.opts.SegmentSize, size), f: f, name: filepath.Join(dir, name)}
		if n := len(s.segs); n > 0 {
			prev := s.segs[n-1]
			prev.size = base - prev.base // the next file starts where this one logically ends
		}
		s.segs = append(s.segs, g)
		end = base + size
	}
	return end, nil
}

// scanLog walks the log from a record boundary with full checks and returns
// the end of the last complete batch: a torn or corrupt tail, or a partly
// written batch, lies past it.
//
// from may fall inside an append: a checkpoint stays below the first
// pending entry of a queue of single-record entries, and that entry may be
// any record of its append. The records of that append below from were
// flushed before the checkpoint was taken (it is at most the flushed end),
// so the first record is taken at whatever index it has and the append is
// complete once its last record checks out. Requiring index 0 there would
// cut every acknowledged append after the checkpoint.
func (s *Store) scanLog(from int64) (int64, error) {
	good, pos := from, from
	var buf []byte
	var wantIdx uint32 // index of the next record within the current batch
	first := true      // the record at from may continue an append
	need := 0          // a record larger than the window needs this much
	for {
		s.segMu.RLock()
		g := s.segmentAt(pos)
		s.segMu.RUnlock()
		if g == nil {
			return good, nil
		}
		window := min(max(int64(s.opts.DispatchChunk), int64(need)), g.end()-pos)
		b, err := s.readLogShort(buf, pos, int(window))
		switch {
		case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, errSegmentGone):
			return good, nil // nothing there: the log ends
		case err != nil:
			// Not the end of the log: cutting it here would drop what
			// follows. Open fails instead and may be retried.
			return good, fmt.Errorf("store: scan log: %w", err)
		}
		buf = b
		p, jumped := 0, false
		need = 0
		for p+blankSize <= len(b) {
			size, blank, err := peekFrame(b[p:])
			if err != nil {
				return good, nil
			}
			if blank {
				if wantIdx != 0 || pos+int64(p+size) != g.end() {
					return good, nil
				}
				pos, good, jumped = g.end(), g.end(), true
				break
			}
			if p+size > len(b) {
				if p == 0 && len(b) == int(window) && int64(size) <= g.end()-pos {
					need = size
				}
				break
			}
			v, err := parseRecord(b[p:])
			if err == nil && first {
				wantIdx, first = v.batchIdx, false
			}
			if err != nil || v.logOffset != pos+int64(p) || v.batchIdx != wantIdx {
				return good, nil
			}
			s.lastStoreTS = max(s.lastStoreTS, v.storeTS)
			p += size
			if wantIdx = v.batchIdx + 1; wantIdx == v.batchCnt {
				wantIdx = 0
				good = pos + int64(p)
			}
		}
		switch {
		case jumped:
		case p > 0:
			pos += int64(p)
		case need > 0:
			// read the same position again with a window that holds the record
		default:
			return good, nil // a partial record at the end of the data
		}
	}
}

// cutLog makes logEnd the end of the log: later segments are deleted, the
// segment holding it is truncated there, and what stays is synced.
func (s *Store) cutLog(logEnd int64) error {
	s.segMu.Lock()
	defer s.segMu.Unlock()
	keep := s.segs[:0]
	removed := false
	for _, g := range s.segs {
		if g.base > logEnd {
			g.f.Close()
			if err := s.fs.Remove(g.name); err != nil {
				return fmt.Errorf("store: remove segment past the log end: %w", err)
			}
			removed = true
			continue
		}
		if logEnd < g.end() {
			if err := g.f.Truncate(logEnd - g.base); err != nil {
				return fmt.Errorf("store: cut torn tail: %w", err)
			}
		}
		if err := g.f.Sync(); err != nil {
			return fmt.Errorf("store: sync segment: %w", err)
		}
		keep = append(keep, g)
	}
	s.segs = keep
	if removed {
		if err := s.fs.SyncDir(filepath.Join(s.opts.Dir, commitLogDir)); err != nil {
			return fmt.Errorf("store: remove segment past the log end: %w", err)
		}
	}
	if n := len(s.segs); n > 0 && s.segs[n-1].end() > logEnd {
		s.segs[n-1].size = max(s.opts.SegmentSize, logEnd-s.segs[n-1].base)
	}
	return nil
}
