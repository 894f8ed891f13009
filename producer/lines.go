package producer

import (
	"context"
	"fmt"
	"sync"

	"github.com/twinmq/twinmq/batch"
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
	waiting []*lineItem // guarded by fifoLines.mu
}

type lineItem struct {
	pd      *pending
	release func() // gives back the bytes reserved for pd
	// done receives the outcome of a synchronous send (Send); an
	// asynchronous one's goes to asyncOutcome.
	done chan lineOutcome

	// Guarded by fifoLines.mu. An item whose send's context ends while it
	// waits is left out (sent by nobody): its send gets the context's
	// error at once and its bytes back, as in the accumulator.
	left bool
	sent bool        // run took it: its outcome is its request's
	stop func() bool // an asynchronous item's watch of its context
}

type lineOutcome struct {
	r   driver.SendResult
	err error
}

// add queues it at the end of key's line, starting the line if it was
// empty. An asynchronous item is watched: when its send's context ends
// while it waits, it leaves the line at once.
func (l *fifoLines) add(p *Producer, key batchKey, it *lineItem) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if it.done == nil {
		it.stop = context.AfterFunc(it.pd.ctx, func() {
			if l.leave(it) {
				p.asyncOutcome(it.pd, driver.SendResult{}, notSent("waiting in its message group's line", it.pd.ctx.Err()))
			}
		})
	}
	line := l.lines[key]
	if line != nil {
		line.waiting = append(line.waiting, it)
		return
	}
	if l.lines == nil {
		l.lines = make(map[batchKey]*fifoLine)
	}
	line = &fifoLine{waiting: []*lineItem{it}}
	l.lines[key] = line
	go l.run(p, key, line)
}

// leave takes it out of its line if no request has taken it yet, gives
// back its bytes and reports whether it did.
func (l *fifoLines) leave(it *lineItem) bool {
	l.mu.Lock()
	out := !it.sent && !it.left
	it.left = it.left || out
	l.mu.Unlock()
	if out {
		it.release()
	}
	return out
}

// run sends the messages of one line until it is empty, one request at a
// time. A failed message is retried like any other (an asynchronous one
// from a new dispatch, a synchronous one by its Send), at the end of a
// line: as with batches, a retry can reorder the messages of a group that
// were in flight at the time.
func (l *fifoLines) run(p *Producer, key batchKey, line *fifoLine) {
	for {
		l.mu.Lock()
		for len(line.waiting) > 0 && line.waiting[0].left {
			line.waiting[0] = nil
			line.waiting = line.waiting[1:]
		}
		if len(line.waiting) == 0 {
			delete(l.lines, key)
			l.mu.Unlock()
			return
		}
		it := line.waiting[0]
		line.waiting[0] = nil
		line.waiting = line.waiting[1:]
		it.sent = true
		if it.stop != nil {
			it.stop()
		}
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
	it := &lineItem{pd: pd, release: release, done: make(chan lineOutcome, 1)}
	p.lines.add(p, key, it)
	select {
	case out := <-it.done:
		return out.r, out.err
	case <-ctx.Done():
		if p.lines.leave(it) {
			return driver.SendResult{}, notSent("waiting in its message group's line", ctx.Err())
		}
		// In flight: the request ends with ctx as well.
		return driver.SendResult{}, ctx.Err()
	}
}

// notSent is the error of a message whose send's context ended before any
// request carried it, as the accumulator's (batch.ErrNotSent).
func notSent(where string, err error) error {
	return fmt.Errorf("%w (%s): %w", batch.ErrNotSent, where, err)
}
