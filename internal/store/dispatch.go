package store

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// The index pipeline (see doc.go): one reader cuts the log into chunks at
// batch boundaries, workers parse and CRC-check chunks in parallel, and one
// ordered stage applies their entries to the consume queues strictly in log
// order. The reader hands every chunk to the workers and, in the same order,
// to the ordered stage, which waits for each chunk's done signal in turn:
// unordered in, ordered out, with no reorder buffer to manage.
//
// Appends made while the store is open skip the reading: the appender
// queues the entries of what it just wrote (Store.live), and the reader
// passes them straight to the ordered stage when they start where it is.
// Anything else (the log after a restart, a segment's padding, appends
// dropped from a queue the reader fell too far behind) is read back and
// parsed as before.

type dispEntry struct {
	topic    string
	queueID  int32
	qoff     int64
	logOff   int64
	size     int32
	tagHash  uint64
	storeTS  int64
	batchIdx uint32
	batchCnt uint32
}

type dispJob struct {
	start   int64 // log offset of buf[0]
	end     int64 // log offset after the chunk (past padding when it skips)
	buf     []byte
	entries []dispEntry
	err     error
	done    chan struct{}
}

type pipeline struct {
	s       *Store
	jobs    chan *dispJob
	ordered chan *dispJob
	free    chan []byte
	// freeEntries recycles the entry slices of applied chunks, as free
	// does their buffers: a chunk of a batched append holds tens of
	// entries, and growing a new slice for each chunk was a sizeable part
	// of the pipeline's work.
	freeEntries chan []dispEntry
	quit        chan struct{}
	wg          sync.WaitGroup
	once        sync.Once
	gap         error // set by the ordered stage when a queue entry would leave a hole
	// handed counts the appends indexed from their appender's entries
	// (Store.live) rather than read back.
	handed atomic.Int64
}

// startPipeline starts indexing the log from offset from.
func (s *Store) startPipeline(from int64) *pipeline {
	n := s.opts.DispatchWorkers
	p := &pipeline{
		s:       s,
		jobs:    make(chan *dispJob, 2*n),
		ordered: make(chan *dispJob, 2*n+2),
		free:    make(chan []byte, 2*n+3),

		freeEntries: make(chan []dispEntry, 2*n+3),
		quit:        make(chan struct{}),
	}
	s.dispatched.Store(from)
	p.wg.Add(2 + n)
	go p.reader(from)
	for range n {
		go p.worker()
	}
	go p.orderer()
	return p
}

func (p *pipeline) stop() {
	p.once.Do(func() { close(p.quit) })
	p.wg.Wait()
}

func (p *pipeline) getBuf(n int) []byte {
	select {
	case b := <-p.free:
		if cap(b) >= n {
			return b[:n]
		}
	default:
	}
	// Size a new buffer to the read, not to DispatchChunk: while the index
	// follows live appends, reads are the size of an append or two, and a
	// miss of the free list would otherwise allocate and zero a whole chunk
	// (4 MiB by default) for a few KiB. Rounding up to a power of two lets
	// the recycled buffers settle on the size the reads need.
	c := minDispatchBuf
	for c < n {
		c <<= 1
	}
	return make([]byte, n, max(n, min(c, p.s.opts.DispatchChunk)))
}

// minDispatchBuf is the smallest buffer the index reader allocates.
const minDispatchBuf = 64 << 10

func (p *pipeline) reader(pos int64) {
	defer p.wg.Done()
	defer close(p.jobs)
	defer close(p.ordered)
	s := p.s
	chunk := int64(s.opts.DispatchChunk)
	for {
		limit := s.dispatchLimit()
		if pos >= limit {
			select {
			case <-p.quit:
				return
			case <-s.dispatchReq:
			}
			continue
		}
		if job := s.takeLive(pos, limit); job != nil {
			// The appender handed its entries over: nothing to read.
			p.handed.Add(1)
			select {
			case p.ordered <- job:
			case <-p.quit:
				return
			}
			pos = job.end
			continue
		}
		job, next := p.cut(pos, limit, chunk)
		select {
		case p.ordered <- job:
		case <-p.quit:
			return
		}
		if job.err == nil && len(job.buf) > 0 {
			select {
			case p.jobs <- job:
			case <-p.quit:
				return
			}
		} else {
			close(job.done)
		}
		if job.err != nil {
			return // the ordered stage reports it; nothing past it is indexed
		}
		pos = next
	}
}

// cut reads the next chunk at pos: whole batches only, at most about chunk
// bytes (more if one batch is bigger), never past limit or the segment end.
func (p *pipeline) cut(pos, limit, chunk int64) (*dispJob, int64) {
	s := p.s
	job := &dispJob{start: pos, end: pos, done: make(chan struct{})}
	select {
	case job.entries = <-p.freeEntries:
	default:
	}
	s.segMu.RLock()
	g := s.segmentAt(pos)
	s.segMu.RUnlock()
	if g == nil {
		job.err = fmt.Errorf("store: index reader: no segment holds log offset %d", pos)
		return job, pos
	}
	end := min(limit, g.end())
	want := min(end-pos, chunk)
	for {
		buf, err := s.readLogShort(p.getBuf(int(want)), pos, int(want))
		if err != nil {
			job.err = err
			return job, pos
		}
		cutAt := 0
		for q := 0; q+blankSize <= len(buf); {
			size, blank, err := peekFrame(buf[q:])
			if err != nil {
				job.err = fmt.Errorf("store: index reader at log offset %d: %w", pos+int64(q), err)
				return job, pos
			}
			if blank {
				if q == 0 {
					job.end = g.end() // padding: skip to the next segment
					return job, g.end()
				}
				break
			}
			if q+size > len(buf) || q+headerSize > len(buf) {
				break
			}
			if le.Uint32(buf[q+offBatchIdx:])+1 >= le.Uint32(buf[q+offBatchCnt:]) {
				cutAt = q + size
			}
			q += size
		}
		if cutAt > 0 {
			job.buf = buf[:cutAt]
			job.end = pos + int64(cutAt)
			return job, job.end
		}
		if want >= end-pos {
			job.err = fmt.Errorf("store: index reader: incomplete batch at log offset %d: %w", pos, ErrCorrupt)
			return job, pos
		}
		want = min(end-pos, 2*want)
	}
}

func (p *pipeline) worker() {
	defer p.wg.Done()
	intern := map[string]string{}
	for job := range p.jobs {
		select {
		case <-p.quit:
			return // the ordered stage stops too; nothing waits for job.done
		default:
		}
		job.entries = job.entries[:0]
		for q := 0; q < len(job.buf); {
			v, err := parseRecord(job.buf[q:])
			if err == nil && v.logOffset != job.start+int64(q) {
				err = fmt.Errorf("%w: record says log offset %d", ErrCorrupt, v.logOffset)
			}
			if err != nil {
				job.err = fmt.Errorf("store: index worker at log offset %d: %w", job.start+int64(q), err)
				break
			}
			topic, ok := intern[string(v.topic)]
			if !ok {
				if len(intern) > 4096 {
					clear(intern)
				}
				topic = string(v.topic)
				intern[topic] = topic
			}
			job.entries = append(job.entries, dispEntry{
				topic: topic, queueID: v.queueID, qoff: v.queueOffset, logOff: v.logOffset,
				size: int32(v.size), tagHash: tagHashBytes(v.tag), storeTS: v.storeTS,
				batchIdx: v.batchIdx, batchCnt: v.batchCnt,
			})
			q += v.size
		}
		close(job.done)
	}
}

// orderer applies chunks in log order and publishes them.
func (p *pipeline) orderer() {
	defer p.wg.Done()
	s := p.s
	type target struct {
		q  *consumeQueue
		ts *topicState
	}
	queues := topicTable[target]{}
	touched := map[*topicState]bool{}
	var pending CQEntry // BatchCQ entry under construction
	for job := range p.ordered {
		// Told to quit, leave the chunks still queued: Close stops a
		// lagging index where it is (the next Open rescans the log).
		select {
		case <-p.quit:
			return
		default:
		}
		if d := s.opts.dispatchDelay; d > 0 {
			select {
			case <-time.After(d):
			case <-p.quit:
				return
			}
		}
		if job.done != nil { // nil for an append handed over live
			select {
			case <-job.done:
			case <-p.quit:
				return
			}
		}
		if job.err != nil {
			s.log.Error("store: index pipeline stopped", zap.Error(job.err))
			s.dispMu.Lock()
			s.dispErr = job.err
			close(s.dispCh)
			s.dispCh = make(chan struct{})
			s.dispMu.Unlock()
			return
		}
		for i := range job.entries {
			e := &job.entries[i]
			t := queues.at(e.topic, e.queueID)
			if t.q == nil {
				*t = target{s.queueForDispatch(e.topic, e.queueID), s.topicState(e.topic, false)}
			}
			q := t.q
			ce := CQEntry{LogOffset: e.logOff, Size: e.size, TagHash: e.tagHash, StoreTimestamp: e.storeTS, BaseOffset: e.qoff, Count: 1}
			if q.batch {
				// Records of one append are adjacent in the log and in the
				// same chunk; fold them into one entry.
				if e.batchIdx == 0 {
					pending = ce
				} else {
					pending.Size += e.size
					pending.Count++
				}
				if e.batchIdx+1 < e.batchCnt {
					continue
				}
				ce = pending
			}
			if err := q.apply(ce); err != nil && p.gap == nil {
				p.gap = err
			}
			touched[t.ts] = true
		}
		s.dispatched.Store(job.end)
		for ts := range touched {
			ts.mu.Lock()
			if ts.arrival != nil {
				close(ts.arrival)
				ts.arrival = nil
			}
			ts.mu.Unlock()
			delete(touched, ts)
		}
		s.dispMu.Lock()
		close(s.dispCh)
		s.dispCh = make(chan struct{})
		s.dispMu.Unlock()
		if job.buf != nil {
			select {
			case p.free <- job.buf[:0]:
			default:
			}
		}
		if cap(job.entries) > 0 {
			clear(job.entries)
			select {
			case p.freeEntries <- job.entries[:0]:
			default:
			}
		}
	}
}

// queueForDispatch returns the queue, creating it (and its topic) when the
// first entry arrives.
func (s *Store) queueForDispatch(topic string, id int32) *consumeQueue {
	ts := s.topicState(topic, true)
	ts.mu.RLock()
	q := ts.queues[id]
	ts.mu.RUnlock()
	if q != nil {
		return q
	}
	// Holding topicsMu across the creation orders it with SetTopicOptions,
	// which refuses to change the queue type of a topic that has queues.
	s.topicsMu.RLock()
	defer s.topicsMu.RUnlock()
	batch := s.topicOpts[topic].BatchCQ
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if q = ts.queues[id]; q == nil {
		q = newConsumeQueue(s.opts.Dir, topic, id, batch, s.opts.CQFileEntries)
		ts.queues[id] = q
	}
	return q
}

// apply adds the entry for queue offset e.BaseOffset. During recovery the
// entry may already exist (it is checked and kept) or conflict (the queue is
// cut there and the entry added). An entry past the end would leave a hole:
// that is reported, and recovery rebuilds the queues from the whole log.
func (q *consumeQueue) apply(e CQEntry) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.chunks) == 0 || e.BaseOffset == q.max {
		if len(q.chunks) == 0 {
			q.min, q.max = e.BaseOffset, e.BaseOffset
		}
		q.add(e)
		return nil
	}
	if e.BaseOffset < q.min {
		return nil
	}
	if e.BaseOffset < q.max {
		if c, i, ok := q.find(e.BaseOffset); ok {
			old := q.entryAt(c, i)
			if old.BaseOffset == e.BaseOffset && old.LogOffset == e.LogOffset && old.Size == e.Size && old.Count == e.Count {
				return nil
			}
		}
		q.truncateFrom(e.BaseOffset)
		if e.BaseOffset == q.max {
			q.add(e)
			return nil
		}
	}
	return fmt.Errorf("store: queue %s/%d: entry for offset %d but next offset is %d", q.topic, q.id, e.BaseOffset, q.max)
}
