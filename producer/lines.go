package producer

import "sync"

// fifoLines keeps FIFO messages that go alone in order when batching is
// off. Batched FIFO messages get this from the accumulator, which has one
// request of a key in flight at a time; an asynchronous send that goes
// alone would otherwise start its request at once, and the requests of a
// group would race each other to the broker. Each key (target, queue,
// group) with messages waiting has a line and one goroutine that sends
// them one after the other, in the order they were dispatched, and ends
// when the line is empty.
type fifoLines struct {
	mu    sync.Mutex
	lines map[batchKey]*fifoLine
}

type fifoLine struct {
	waiting []lineItem // guarded by fifoLines.mu
}

type lineItem struct {
	pd      *pending
	release func() // gives back the bytes reserved for pd
}

// add queues pd at the end of key's line, starting the line if it was
// empty.
func (l *fifoLines) add(p *Producer, key batchKey, pd *pending, release func()) {
	l.mu.Lock()
	line := l.lines[key]
	if line != nil {
		line.waiting = append(line.waiting, lineItem{pd, release})
		l.mu.Unlock()
		return
	}
	if l.lines == nil {
		l.lines = make(map[batchKey]*fifoLine)
	}
	line = &fifoLine{waiting: []lineItem{{pd, release}}}
	l.lines[key] = line
	l.mu.Unlock()
	go l.run(p, key, line)
}

// run sends the messages of one line until it is empty. An outcome is
// handled before the next message starts, so a failed message is
// re-dispatched (to the end of a line) before its successors are sent.
func (l *fifoLines) run(p *Producer, key batchKey, line *fifoLine) {
	for {
		l.mu.Lock()
		if len(line.waiting) == 0 {
			delete(l.lines, key)
			l.mu.Unlock()
			return
		}
		it := line.waiting[0]
		line.waiting[0] = lineItem{}
		line.waiting = line.waiting[1:]
		l.mu.Unlock()

		r, err := p.sendAlone(it.pd.ctx, key.target, key.queue, it.pd)
		it.release()
		p.asyncOutcome(it.pd, r, err)
	}
}
