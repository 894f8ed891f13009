package config

import (
	"sync"
	"time"
)

// Status is what a Watcher did with the versions of its source: the
// revision in force and the latest version it refused, for a platform to
// show "applied" or "rejected" next to each revision it published.
type Status struct {
	// Revision is the revision of the configuration in force, Applied
	// when the Watcher accepted it.
	Revision string
	Applied  time.Time
	// Rejected is the latest version the Watcher refused (a document that
	// failed validation, a source that could not be read), nil if it has
	// refused none. It stays after later versions were accepted, with
	// Latest telling whether it is still the source's latest word.
	Rejected *Rejection
}

// Rejection is a version that was not applied, and why.
type Rejection struct {
	// Revision of the refused version ("" when the source could not say,
	// e.g. an unreadable file).
	Revision string
	// Err says why: it wraps ErrInvalidConfig for a document that failed
	// validation, or the source's error.
	Err error
	// At is when the version was refused.
	At time.Time
	// Latest reports that no version was accepted (or found equal to the
	// one in force) after this one: the configuration in force is older
	// than what the platform last published.
	Latest bool
}

// history is the part of Status that apply records.
type history struct {
	mu       sync.Mutex
	applied  time.Time
	rejected *Rejection
}

func (h *history) accepted(now time.Time, changed bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if changed {
		h.applied = now
	}
	if h.rejected != nil && h.rejected.Latest {
		r := *h.rejected
		r.Latest = false
		h.rejected = &r
	}
}

func (h *history) refused(rev string, err error, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.rejected = &Rejection{Revision: rev, Err: err, At: now, Latest: true}
}

// Status returns the revision in force and the latest refused version.
func (w *Watcher) Status() Status {
	w.hist.mu.Lock()
	defer w.hist.mu.Unlock()
	return Status{Revision: w.Revision(), Applied: w.hist.applied, Rejected: w.hist.rejected}
}

// oneShotSource is a Source that ends by design after its versions
// (Static): its end is no news.
type oneShotSource interface{ oneShot() }

func (staticSource) oneShot() {}
