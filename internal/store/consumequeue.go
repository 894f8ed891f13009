package store

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
)

// consumeQueue is the index of one (topic, queue): fixed-width entries in
// files of CQFileEntries entries each, named by the first queue offset they
// hold. The entries are kept in memory too (20 or 40 bytes per entry or
// batch), which makes a lookup a slice index; the files are their durable,
// append-only copy, written at checkpoints.
type consumeQueue struct {
	topic   string
	id      int32
	batch   bool
	width   int
	dir     string
	perFile int

	mu       sync.RWMutex
	chunks   []*cqChunk
	min, max int64 // visible queue offsets are [min, max)
	dirty    bool
	removed  []string // files to delete at the next persist
	dirMade  bool     // set by persist once the directory exists
	// dirUnsynced: persist created or removed a file whose name is not
	// durable yet (only the checkpoint goroutine touches it).
	dirUnsynced bool
}

// cqPersistMin is how many pending bytes make a queue worth writing at an
// ordinary checkpoint; smaller tails wait for a thorough one (and the
// checkpoint offset stays below them). With ten thousand queues this keeps
// a checkpoint from costing ten thousand tiny fsyncs.
const cqPersistMin = 4096

// noPending means a queue has every entry in its files.
const noPending = int64(1<<63 - 1)

// cqChunk mirrors one file.
type cqChunk struct {
	first     int64 // queue offset (batch: base offset) of the first entry
	buf       []byte
	persisted int  // bytes known to be in the file
	truncated bool // the file holds more than persisted and must be cut
}

func newConsumeQueue(root, topic string, id int32, batch bool, perFile int) *consumeQueue {
	w := cqEntrySize
	if batch {
		w = batchCQEntrySize
	}
	return &consumeQueue{
		topic: topic, id: id, batch: batch, width: w, perFile: perFile,
		dir: filepath.Join(root, cqDir, escapeTopic(topic), strconv.Itoa(int(id))),
	}
}

// escapeTopic makes a topic a safe directory name: bytes outside
// [A-Za-z0-9_-] become %XX.
func escapeTopic(t string) string {
	const hex = "0123456789ABCDEF"
	out := make([]byte, 0, len(t))
	for i := 0; i < len(t); i++ {
		c := t[i]
		if escapedLen(c) == 1 {
			out = append(out, c)
			continue
		}
		out = append(out, '%', hex[c>>4], hex[c&15])
	}
	return string(out)
}

// escapedLen is how many bytes escapeTopic writes for c.
func escapedLen(c byte) int {
	if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' {
		return 1
	}
	return 3
}

func unescapeTopic(name string) (string, bool) {
	out := make([]byte, 0, len(name))
	for i := 0; i < len(name); i++ {
		if name[i] != '%' {
			out = append(out, name[i])
			continue
		}
		if i+2 >= len(name) {
			return "", false
		}
		v, err := strconv.ParseUint(name[i+1:i+3], 16, 8)
		if err != nil {
			return "", false
		}
		out = append(out, byte(v))
		i += 2
	}
	return string(out), true
}

func (q *consumeQueue) entries(c *cqChunk) int { return len(c.buf) / q.width }

// entryOffset is the queue offset of entry i of c.
func (q *consumeQueue) entryOffset(c *cqChunk, i int) int64 {
	if q.batch {
		return int64(le.Uint64(c.buf[i*q.width+28:]))
	}
	return c.first + int64(i)
}

func (q *consumeQueue) entryAt(c *cqChunk, i int) CQEntry {
	b := c.buf[i*q.width:]
	e := CQEntry{LogOffset: int64(le.Uint64(b)), Size: int32(le.Uint32(b[8:])), TagHash: le.Uint64(b[12:]), Count: 1}
	if q.batch {
		e.StoreTimestamp = int64(le.Uint64(b[20:]))
		e.BaseOffset = int64(le.Uint64(b[28:]))
		e.Count = int32(le.Uint32(b[36:]))
	} else {
		e.BaseOffset = c.first + int64(i)
	}
	return e
}

// find returns the chunk and entry index holding queue offset off, which must
// be in [min, max). Called with mu held.
func (q *consumeQueue) find(off int64) (*cqChunk, int, bool) {
	ci := sort.Search(len(q.chunks), func(i int) bool { return q.chunks[i].first > off }) - 1
	if ci < 0 {
		return nil, 0, false
	}
	c := q.chunks[ci]
	n := q.entries(c)
	if !q.batch {
		i := int(off - c.first)
		return c, i, i < n
	}
	// Binary search for the last entry whose base offset is <= off.
	i := sort.Search(n, func(i int) bool { return q.entryOffset(c, i) > off }) - 1
	if i < 0 {
		return nil, 0, false
	}
	e := q.entryAt(c, i)
	return c, i, off < e.BaseOffset+int64(e.Count)
}

// lookup returns the entry covering queue offset off.
func (q *consumeQueue) lookup(off int64) (CQEntry, bool) {
	q.mu.RLock()
	defer q.mu.RUnlock()
	if off < q.min || off >= q.max {
		return CQEntry{}, false
	}
	c, i, ok := q.find(off)
	if !ok {
		return CQEntry{}, false
	}
	return q.entryAt(c, i), true
}

// add appends e (its BaseOffset must be q.max) and makes it visible. Called
// with mu held.
func (q *consumeQueue) add(e CQEntry) {
	var c *cqChunk
	if len(q.chunks) > 0 {
		c = q.chunks[len(q.chunks)-1]
	}
	if c == nil || q.entries(c) >= q.perFile {
		if len(q.chunks) == 0 {
			q.min = e.BaseOffset
		}
		c = &cqChunk{first: e.BaseOffset}
		q.chunks = append(q.chunks, c)
	}
	n := len(c.buf)
	if cap(c.buf) == n {
		grown := make([]byte, n, max(2*n, 64*q.width))
		copy(grown, c.buf)
		c.buf = grown
	}
	c.buf = c.buf[:n+q.width]
	if q.batch {
		putBatchCQEntry(c.buf[n:], e)
	} else {
		putCQEntry(c.buf[n:], e)
	}
	q.max = e.BaseOffset + int64(e.Count)
	q.dirty = true
}

// truncateFrom drops the entries at and after queue offset off (an entry that
// covers off is dropped whole). Called with mu held.
func (q *consumeQueue) truncateFrom(off int64) {
	for len(q.chunks) > 0 {
		c := q.chunks[len(q.chunks)-1]
		if c.first < off || (c.first == off && len(q.chunks) == 1) {
			break
		}
		q.removed = append(q.removed, q.fileName(c))
		q.chunks = q.chunks[:len(q.chunks)-1]
	}
	q.max = off
	if len(q.chunks) == 0 {
		q.min = off
		q.dirty = true
		return
	}
	c := q.chunks[len(q.chunks)-1]
	keep := q.entries(c)
	for keep > 0 && q.entryOffset(c, keep-1) >= off {
		keep--
	}
	if keep > 0 {
		e := q.entryAt(c, keep-1)
		q.max = e.BaseOffset + int64(e.Count)
	} else {
		q.max = c.first
	}
	if q.min > q.max {
		q.min = q.max
	}
	c.buf = c.buf[:keep*q.width]
	if c.persisted > len(c.buf) {
		c.persisted = len(c.buf)
		c.truncated = true
	}
	q.dirty = true
}

// trimBelow moves min past the entries that point below logMin (deleted by
// retention) and drops their files, always keeping the last file so the next
// offset survives a restart.
func (q *consumeQueue) trimBelow(logMin int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.chunks) > 1 {
		c := q.chunks[0]
		last := q.entryAt(c, q.entries(c)-1)
		if last.LogOffset >= logMin {
			break
		}
		q.removed = append(q.removed, q.fileName(c))
		q.chunks = q.chunks[1:]
		q.dirty = true
	}
	if len(q.chunks) == 0 {
		return
	}
	c := q.chunks[0]
	n := q.entries(c)
	i := sort.Search(n, func(i int) bool { return int64(le.Uint64(c.buf[i*q.width:])) >= logMin })
	newMin := q.max
	if i < n {
		newMin = q.entryOffset(c, i)
	} else if len(q.chunks) > 1 {
		newMin = q.chunks[1].first
	}
	if newMin > q.min {
		q.min = newMin
	}
}

func (q *consumeQueue) fileName(c *cqChunk) string {
	return filepath.Join(q.dir, fmt.Sprintf("%020d", c.first))
}

// cqWrite is one file update taken out of the lock by persist.
type cqWrite struct {
	name     string
	off      int64
	data     []byte
	truncate bool
	chunk    *cqChunk
	end      int
}

// persist writes the entries not yet in the files, cuts truncated files,
// deletes dropped ones, and fsyncs what it wrote.
//
// Unless thorough, a queue with less than cqPersistMin pending bytes is left
// as it is; persist then returns the log offset of its first entry not in a
// file, below which the checkpoint must stay. Otherwise it returns noPending.
func (s *Store) persistQueue(q *consumeQueue, thorough bool) (int64, error) {
	q.mu.Lock()
	if !q.dirty {
		q.mu.Unlock()
		return noPending, nil
	}
	if !thorough && len(q.removed) == 0 {
		pending, firstLog := 0, noPending
		for _, c := range q.chunks {
			if c.truncated {
				pending = cqPersistMin
			}
			if c.persisted < len(c.buf) {
				if firstLog == noPending {
					firstLog = int64(le.Uint64(c.buf[c.persisted:]))
				}
				pending += len(c.buf) - c.persisted
			}
		}
		if pending < cqPersistMin {
			q.mu.Unlock()
			return firstLog, nil
		}
	}
	removed := q.removed
	q.removed = nil
	var work []cqWrite
	for _, c := range q.chunks {
		if c.persisted == len(c.buf) && !c.truncated {
			continue
		}
		work = append(work, cqWrite{
			name: q.fileName(c), off: int64(c.persisted), truncate: c.truncated,
			data: append([]byte(nil), c.buf[c.persisted:]...), chunk: c, end: len(c.buf),
		})
	}
	q.dirty = false
	q.mu.Unlock()

	fail := func(err error) (int64, error) {
		q.mu.Lock()
		q.dirty = true
		q.removed = append(q.removed, removed...)
		q.mu.Unlock()
		return noPending, fmt.Errorf("store: write consume queue %s/%d: %w", q.topic, q.id, err)
	}
	for _, name := range removed {
		if err := s.fs.Remove(name); err != nil && !os.IsNotExist(err) {
			return fail(err)
		}
	}
	if len(work) > 0 && !q.dirMade {
		if err := s.fs.MkdirAll(q.dir, 0o755); err != nil {
			return fail(err)
		}
		q.dirMade = true // only the checkpoint goroutine touches it
	}
	// A file written from its start may be new, and a removed one must stay
	// removed: the directory is synced once the files are, before the
	// checkpoint relies on them.
	// The need outlives a failed attempt: the chunks count as written then.
	q.dirUnsynced = q.dirUnsynced || len(removed) > 0
	for _, w := range work {
		q.dirUnsynced = q.dirUnsynced || w.off == 0
		f, err := s.fs.OpenFile(w.name, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return fail(err)
		}
		if w.truncate {
			err = f.Truncate(w.off)
		}
		if err == nil && len(w.data) > 0 {
			_, err = f.WriteAt(w.data, w.off)
		}
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fail(err)
		}
		q.mu.Lock()
		if w.chunk.persisted == int(w.off) && len(w.chunk.buf) >= w.end {
			w.chunk.persisted = w.end
			if w.truncate {
				w.chunk.truncated = false
			}
		}
		q.mu.Unlock()
	}
	if q.dirUnsynced {
		if err := s.fs.SyncDir(q.dir); err != nil {
			return fail(err)
		}
		q.dirUnsynced = false
	}
	return noPending, nil
}
