package store

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"
)

// flushLoop is the flusher. Under FlushAsync it fsyncs every FlushInterval.
// Under FlushSync it is the group commit: an appender that wrote its batch
// pokes flushReq and waits; the loop fsyncs up to the end of everything
// written so far and wakes every waiter that fsync covered. Appenders that
// write while an fsync runs are all covered by the next one, so under load
// one fsync serves many appends.
func (s *Store) flushLoop() {
	defer s.bg.Done()
	var tick <-chan time.Time
	if s.opts.Flush == FlushAsync {
		t := time.NewTicker(s.opts.FlushInterval)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-s.quit:
			return
		case <-tick:
		case <-s.flushReq:
		}
		if err := s.flushOnce(); err != nil {
			s.log.Error("store: flush failed", zap.Error(err))
		}
	}
}

// flushOnce fsyncs every segment holding bytes written but not yet flushed.
// Flushes are serial, so that "from" below is never older than a flush that
// let retention delete a segment.
func (s *Store) flushOnce() error {
	s.flushSerial.Lock()
	defer s.flushSerial.Unlock()
	s.flushMu.Lock()
	if s.flushErr != nil {
		err := s.flushErr
		s.flushMu.Unlock()
		return err
	}
	s.flushMu.Unlock()
	target := s.written.Load()
	from := s.flushed.Load()
	if target <= from {
		return nil
	}
	s.segMu.RLock()
	var todo []*segment
	for _, g := range s.segs {
		if g.end() > from && g.base < target {
			todo = append(todo, g)
		}
	}
	s.segMu.RUnlock()
	for _, g := range todo {
		if err := g.f.Sync(); err != nil {
			// After a failed fsync the kernel may have dropped the dirty
			// pages: nothing written since the last good fsync can be
			// trusted, so the store stops taking appends until reopened.
			err = fmt.Errorf("store: fsync %s: %w", g.name, err)
			s.appendMu.Lock()
			if s.failErr == nil {
				s.failErr = err
			}
			s.appendMu.Unlock()
			s.flushMu.Lock()
			s.flushErr = err
			close(s.flushCh)
			s.flushCh = make(chan struct{})
			s.flushMu.Unlock()
			return err
		}
	}
	s.flushMu.Lock()
	if target > s.flushed.Load() {
		s.flushed.Store(target)
	}
	close(s.flushCh)
	s.flushCh = make(chan struct{})
	s.flushMu.Unlock()
	if s.opts.Flush == FlushSync {
		select {
		case s.dispatchReq <- struct{}{}:
		default:
		}
	}
	return nil
}

// dispatchLimit is how far the index may go: in sync mode only what an fsync
// covered, so that no reader sees a message a crash could still take back.
func (s *Store) dispatchLimit() int64 {
	if s.opts.Flush == FlushSync {
		return s.flushed.Load()
	}
	return s.written.Load()
}

// Flush fsyncs everything appended so far and returns once it is durable.
func (s *Store) Flush(ctx context.Context) error {
	if s.closed.Load() {
		return ErrClosed
	}
	end := s.written.Load()
	select {
	case s.flushReq <- struct{}{}:
	default:
	}
	return s.waitFlushed(ctx, end)
}
