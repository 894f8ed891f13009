// Package clientstate records what the producer's and the consumer's State
// report: per link to a broker (or a cluster's route), whether the latest
// call failed, the latest error, and the refusal in force, with RocketMQ's
// code; and per client, the configuration revision it applied and the
// versions it could not apply.
//
// A refusal is a failure that retrying cannot mend: the broker answered,
// and said no (a group it does not know, settings below its floors,
// credentials it rejects, a topic missing). Transport failures, timeouts,
// throttling and server errors are failures, not refusals; the caller's
// own cancellation is neither.
package clientstate

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/twinmq/twinmq/config"
	"github.com/twinmq/twinmq/internal/driver"
	"github.com/twinmq/twinmq/internal/pb/rmqpb"
	"github.com/twinmq/twinmq/rmqerr"
)

// Refusal is a broker's refusal, the public type producer and consumer
// State report.
type Refusal = rmqerr.Refusal

// RefusalOf reports whether err is a refusal and describes it; now is the
// time it was seen.
func RefusalOf(err error, now time.Time) (Refusal, bool) {
	if err == nil || driver.Retryable(err) || errors.Is(err, context.Canceled) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, driver.ErrClosed) ||
		errors.Is(err, driver.ErrTooManyRequests) {
		return Refusal{}, false
	}
	r := Refusal{Message: err.Error(), Since: now}
	var de *driver.Error
	if errors.As(err, &de) {
		r.RPC, r.Endpoint, r.Message = de.RPC, de.Endpoint, de.Message
		switch {
		case de.Code != rmqpb.Code_CODE_UNSPECIFIED:
			r.Code, r.CodeName = int32(de.Code), de.Code.String()
		case de.GRPCCode != codes.OK:
			r.CodeName = "grpc " + de.GRPCCode.String()
		}
	}
	return r, true
}

// same reports whether two refusals say the same thing (their times
// aside).
func same(r, o Refusal) bool {
	return r.Code == o.Code && r.CodeName == o.CodeName && r.Message == o.Message && r.RPC == o.RPC
}

// Link is the state of one link: a broker's receives or sends, or a
// cluster's route queries. Its methods are safe for concurrent use, and
// Succeeded costs one atomic load while nothing changes.
type Link struct {
	clean atomic.Bool // the latest call succeeded and no refusal is in force

	mu        sync.Mutex
	failing   bool
	lastErr   error
	lastErrAt time.Time
	refusal   *Refusal
}

// Succeeded records a successful call: the link is no longer failing and
// a refusal is over.
func (l *Link) Succeeded() {
	if l.clean.Load() {
		return
	}
	l.mu.Lock()
	l.failing, l.refusal = false, nil
	l.clean.Store(true)
	l.mu.Unlock()
}

// Failed records a failed call. It reports whether err is a refusal that
// differs from the one in force (a new refusal, to be said once where an
// operator looks, not once per retry).
func (l *Link) Failed(err error, now time.Time) (newRefusal bool) {
	r, refused := RefusalOf(err, now)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.clean.Store(false)
	l.failing, l.lastErr, l.lastErrAt = true, err, now
	switch {
	case !refused:
		// A transport failure says nothing of whether the broker still
		// refuses: the refusal stays until a call succeeds.
		return false
	case l.refusal != nil && same(*l.refusal, r):
		return false
	default:
		l.refusal = &r
		return true
	}
}

// Snapshot is a Link's state at one moment.
type Snapshot struct {
	// Failing: the latest call failed.
	Failing   bool
	LastError error
	// LastErrorAt is when LastError happened (zero if none did).
	LastErrorAt time.Time
	// Refusal in force, nil if none.
	Refusal *Refusal
}

// Snapshot returns the link's state.
func (l *Link) Snapshot() Snapshot {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := Snapshot{Failing: l.failing, LastError: l.lastErr, LastErrorAt: l.lastErrAt}
	if l.refusal != nil {
		r := *l.refusal
		s.Refusal = &r
	}
	return s
}

// Config follows the configuration a client applied: the watcher accepts
// or refuses documents, and the client may still fail to apply one the
// watcher accepted (a client that cannot be built, say).
type Config struct {
	mu      sync.Mutex
	rev     string
	applied time.Time
	own     *config.Rejection
}

// Applied records that the client applied revision rev.
func (c *Config) Applied(rev string, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rev, c.applied = rev, now
	if c.own != nil && c.own.Latest {
		r := *c.own
		r.Latest = false
		c.own = &r
	}
}

// Refused records that the client could not apply revision rev.
func (c *Config) Refused(rev string, err error, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.own = &config.Rejection{Revision: rev, Err: err, At: now, Latest: true}
}

// Status is the configuration status of the client: the revision it
// applied, and the latest version refused, by the watcher or by the
// client.
func (c *Config) Status(w *config.Watcher) config.Status {
	ws := w.Status()
	c.mu.Lock()
	defer c.mu.Unlock()
	st := config.Status{Revision: c.rev, Applied: c.applied, Rejected: ws.Rejected}
	if c.own != nil && (st.Rejected == nil || c.own.At.After(st.Rejected.At)) {
		r := *c.own
		st.Rejected = &r
	}
	return st
}
