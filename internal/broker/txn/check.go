package txn

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/twinmq/twinmq/internal/store"
)

// checkLoop sends check-backs for orphans and discards those out of checks.
func (m *Manager) checkLoop() {
	defer m.bg.Done()
	// Each pass scans every pending transaction, so passes are spaced by at
	// least a twentieth of the shorter of Timeout and CheckInterval: checks
	// go out that much late at most, and many pending transactions with
	// spread-out deadlines cost a bounded number of scans.
	grain := min(max(min(m.opts.Timeout, m.opts.CheckInterval)/20, time.Millisecond), time.Second)
	for {
		next := m.checkDue(time.Now())
		m.mu.Lock()
		m.planned = next
		m.mu.Unlock()
		wait := time.Until(next)
		if next.IsZero() {
			wait = m.opts.CheckInterval
		}
		wait = max(wait, grain)
		t := time.NewTimer(wait)
		select {
		case <-m.ctx.Done():
			t.Stop()
			return
		case <-m.wake:
		case <-t.C:
		}
		t.Stop()
	}
}

// checkDue handles every orphan due at now and returns the earliest next
// check time (zero when nothing is pending).
func (m *Manager) checkDue(now time.Time) time.Time {
	type job struct {
		off int64
		p   *pending
	}
	var jobs []job
	var next time.Time
	m.mu.Lock()
	// While this pass runs, Prepare wakes the loop for anything it adds:
	// the scan below may miss it.
	m.planned = time.Time{}
	for off, p := range m.pending {
		if p.resolving || p.checking {
			continue
		}
		if !p.nextCheck.After(now) {
			p.checking = true
			jobs = append(jobs, job{off, p})
			continue
		}
		if next.IsZero() || p.nextCheck.Before(next) {
			next = p.nextCheck
		}
	}
	m.mu.Unlock()
	for _, j := range jobs {
		if m.ctx.Err() != nil {
			m.mu.Lock()
			j.p.checking = false
			m.mu.Unlock()
			continue
		}
		done := m.checkOne(j.off, j.p)
		m.mu.Lock()
		j.p.checking = false
		switch {
		case m.pending[j.off] != j.p:
			// Resolved by End meanwhile.
		case done:
			delete(m.pending, j.off)
		default:
			j.p.nextCheck = time.Now().Add(m.opts.CheckInterval)
			if next.IsZero() || j.p.nextCheck.Before(next) {
				next = j.p.nextCheck
			}
		}
		m.mu.Unlock()
	}
	return next
}

// checkOne sends one check-back, or discards the half message when it had
// all its checks. It reports whether the transaction is gone.
func (m *Manager) checkOne(off int64, p *pending) bool {
	ctx := m.ctx
	half, err := m.readHalf(ctx, off)
	if errors.Is(err, store.ErrOffsetOutOfRange) {
		m.log.Error("txn: half message removed by store retention before it was resolved", zap.Int64("offset", off))
		return true
	}
	if err != nil {
		m.log.Warn("txn: read half message for a check", zap.Int64("offset", off), zap.Error(err))
		return false
	}
	m.mu.Lock()
	checks := p.checks
	gone := m.pending[off] != p || p.resolving
	if !gone && checks >= m.opts.MaxChecks {
		p.resolving = true // no End may commit what is being discarded
	}
	m.mu.Unlock()
	if gone {
		return false
	}
	if checks >= m.opts.MaxChecks {
		undo := func() bool {
			m.mu.Lock()
			p.resolving = false
			m.mu.Unlock()
			return false
		}
		discard := half.Message
		discard.Topic = CheckMaxTopic
		discard.QueueID = 0
		if _, err := m.st.Append(ctx, []store.Message{discard}); err != nil && !errors.Is(err, store.ErrNotDurable) {
			m.log.Warn("txn: move half message to the check-max topic", zap.Int64("offset", off), zap.Error(err))
			return undo()
		}
		if err := m.writeOp(ctx, off, "discard", checks); err != nil {
			m.log.Warn("txn: write discard op", zap.Int64("offset", off), zap.Error(err))
			return undo()
		}
		m.log.Info("txn: transaction discarded after its last check", zap.String("transaction_id", p.txID),
			zap.String("topic", p.topic), zap.Int("checks", checks))
		return true
	}
	if err := m.writeOp(ctx, off, "check", checks+1); err != nil {
		m.log.Warn("txn: write check op", zap.Int64("offset", off), zap.Error(err))
		return false
	}
	m.mu.Lock()
	p.checks = checks + 1
	checks = p.checks
	m.mu.Unlock()
	if m.opts.Checker == nil {
		return false
	}
	real, err := realMessage(half.Message)
	if err != nil {
		m.log.Error("txn: half message without a destination", zap.Int64("offset", off), zap.Error(err))
		return false
	}
	view := half
	view.Message = real
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := m.opts.Checker.CheckBack(cctx, p.group, view, p.txID); err != nil {
		m.log.Info("txn: check-back not sent", zap.String("transaction_id", p.txID), zap.String("group", p.group),
			zap.Int("check", checks), zap.Error(err))
	}
	return false
}
