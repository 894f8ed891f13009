package producer

import (
	"context"
	"sync"

	"github.com/twinmq/twinmq/internal/driver"
)

// fifoLines keeps FIFO messages that go alone in order when batching is
// off, synchronous and asynchronous sends of a group alike. Batched FIFO
// messages get this from the accumulator, which has one request of a key in
// flight at a time; a send that goes alone would otherwise start its
// request at once, and the requests of a group would race each other to the
// broker. Each key (target, queue,
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
	// done receives the outcome of a synchronous send (Send); an
	// asynchronous one's goes to asyncOutcome.
	done chan lineOutcome
}

type lineOutcome struct {
	r   driver.SendResult
	err error
}

// add queues pd at the end of key's line, starting the line if it was
// empty.
func (l *fifoLines) add(p *Producer, key batchKey, it lineItem) {
	l.mu.Lock()
	line := l.lines[key]
	if line != nil {
		line.waiting = append(line.waiting, it)
		l.mu.Unlock()
		return
	}
	if l.lines == nil {
		l.lines = make(map[batchKey]*fifoLine)
	}
	line = &fifoLine{waiting: []lineItem{it}}
	l.lines[key] = line
	l.mu.Unlock()
	go l.run(p, key, line)
}

// run sends the messages of one line until it is empty, one request at a
// time. A failed message is retried like any other (an asynchronous one
// from a new dispatch, a synchronous one by its Send), at the end of a
// line: as with batches, a retry can reorder the messages of a group that
// were in flight at the time.
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
		if it.done != nil {
			it.done <- lineOutcome{r, err}
			continue
		}
		p.asyncOutcome(it.pd, r, err)
	}
}

// sendInLine is sendAlone for a synchronous FIFO send: in its group's
// line, behind the group's asynchronous sends, with its bytes reserved.
// ctx is the send's context, which the request honours as well.
func (p *Producer) sendInLine(ctx context.Context, key batchKey, pd *pending) (driver.SendResult, error) {
	release, err := p.acc.Reserve(ctx, pd.size)
	if err != nil {
		return driver.SendResult{}, err
	}
	done := make(chan lineOutcome, 1)
	p.lines.add(p, key, lineItem{pd: pd, release: release, done: done})
	select {
	case out := <-done:
		return out.r, out.err
	case <-ctx.Done():
		// The line sends nothing for an ended context when it gets there.
		return driver.SendResult{}, ctx.Err()
	}
}
