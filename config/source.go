package config

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
)

// Version is one answer of a Source: a parsed document with its revision,
// or the error that kept the source from producing one (unreadable file,
// bad JSON). A Version is not validated yet; the Watcher does that.
type Version struct {
	Config *Config
	// Revision identifies the document's content (a content hash for the
	// file source, a store revision for a networked one). Equal revisions
	// mean equal documents.
	Revision string
	Err      error
}

// Source yields the versions of the document.
//
// Watch starts watching and returns a channel that first carries the
// current version, then one per change. The source closes the channel when
// ctx ends or when it has nothing more to say (Static after its one
// version). A source delivers every version it observes in order; a reader
// that stops reading stalls the source, which then coalesces (a file source
// reads the newest content when it resumes), so no version is ever replayed
// out of order.
type Source interface {
	Watch(ctx context.Context) (<-chan Version, error)
}

// Revision computes the content revision used by the file source: a hex
// SHA-256 prefix of the bytes.
func Revision(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:16])
}

// Static returns a Source with one fixed version, for tests and the
// embedded setup. It keeps its own copy of cfg. The revision is that of the
// document's JSON encoding.
func Static(cfg *Config) Source {
	return staticSource{cfg: cfg.Clone()}
}

type staticSource struct{ cfg *Config }

func (s staticSource) Watch(ctx context.Context) (<-chan Version, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	v := Version{Config: s.cfg.Clone()}
	if data, err := s.cfg.Marshal(); err == nil {
		v.Revision = Revision(data)
	}
	ch := make(chan Version, 1)
	ch <- v
	close(ch)
	return ch, nil
}

// Chan returns a Source fed by the caller, for tests and for platforms that
// push documents: every Version sent on in is passed on, in order, until in
// is closed or the watch's ctx ends. Only one Watch at a time should read a
// Chan source, since both would drain the same channel.
func Chan(in <-chan Version) Source { return chanSource{in: in} }

type chanSource struct{ in <-chan Version }

func (s chanSource) Watch(ctx context.Context) (<-chan Version, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out := make(chan Version)
	go func() {
		defer close(out)
		for {
			select {
			case <-ctx.Done():
				return
			case v, ok := <-s.in:
				if !ok {
					return
				}
				select {
				case out <- v:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out, nil
}
