package config

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"go.uber.org/zap"
)

// Defaults of FileOptions.
const (
	DefaultPollInterval = 200 * time.Millisecond
	DefaultRescanEvery  = 5 * time.Second
)

// FileOptions configure File. The zero value gives the defaults.
type FileOptions struct {
	// PollInterval is how often the path is stat'ed (default 200ms).
	PollInterval time.Duration
	// Settle is how long a change must stay still (same size, modification
	// time and file identity) before the file is read: the debounce that
	// keeps a half-written file from being read (default PollInterval).
	Settle time.Duration
	// RescanEvery forces a full read and hash even when the stat looks
	// unchanged, for edits that keep size and modification time (coarse
	// timestamps on some filesystems). Default 5s.
	RescanEvery time.Duration
	// Logger defaults to a no-op logger.
	Logger *zap.Logger
}

// File returns the file source: it watches the document at path by polling,
// as the package doc explains, and yields a Version for every new content.
func File(path string, opts FileOptions) Source {
	if opts.PollInterval <= 0 {
		opts.PollInterval = DefaultPollInterval
	}
	if opts.Settle <= 0 {
		opts.Settle = opts.PollInterval
	}
	if opts.RescanEvery <= 0 {
		opts.RescanEvery = DefaultRescanEvery
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	return &fileSource{path: path, opts: opts}
}

type fileSource struct {
	path string
	opts FileOptions
}

// stamp is what a stat tells about the file behind the path. info carries
// the identity (device and inode on Unix) for os.SameFile, which is how a
// Kubernetes symlink swap or a rename-save shows up even when size and time
// happen to match.
type stamp struct {
	exists bool
	size   int64
	mtime  time.Time
	info   os.FileInfo
	err    error // why the stat failed, when !exists
}

func (a stamp) same(b stamp) bool {
	if a.exists != b.exists {
		return false
	}
	if !a.exists {
		return errText(a.err) == errText(b.err)
	}
	return a.size == b.size && a.mtime.Equal(b.mtime) && os.SameFile(a.info, b.info)
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func (s *fileSource) stat() stamp {
	fi, err := os.Stat(s.path) // follows symlinks: we see what a reader of the path would read
	if err != nil {
		return stamp{err: err}
	}
	return stamp{exists: true, size: fi.Size(), mtime: fi.ModTime(), info: fi}
}

// read returns the whole file, checking that it did not change while being
// read; ok is false when it did, and the caller waits for it to settle. With
// a non-nil want (the stat the poll loop judged settled or unchanged) the
// file must also still match it when the read starts: a write that began
// after that poll has not settled, and reading it could catch it half done.
func (s *fileSource) read(want *stamp) (data []byte, st stamp, ok bool, err error) {
	st = s.stat()
	if want != nil && !st.same(*want) {
		return nil, st, false, nil
	}
	if !st.exists {
		return nil, st, true, fmt.Errorf("config file: %w", st.err)
	}
	if st.info.IsDir() {
		return nil, st, true, fmt.Errorf("config file %s is a directory: %w", s.path, ErrInvalidConfig)
	}
	f, err := os.Open(s.path)
	if err != nil {
		return nil, st, true, fmt.Errorf("config file %s: %w", s.path, err)
	}
	data, err = io.ReadAll(io.LimitReader(f, MaxDocumentBytes+1))
	f.Close()
	if err != nil {
		return nil, st, true, fmt.Errorf("config file %s: %w", s.path, err)
	}
	if after := s.stat(); !after.same(st) {
		return nil, after, false, nil
	}
	return data, st, true, nil
}

func (s *fileSource) Watch(ctx context.Context) (<-chan Version, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out := make(chan Version)
	go s.run(ctx, out)
	return out, nil
}

// run is the polling loop. The state machine per tick: a stat that differs
// from the last one read starts (or restarts) the settle clock; once the
// stat has stayed the same for Settle the file is read whole, hashed, and
// yielded if its content is new.
func (s *fileSource) run(ctx context.Context, out chan<- Version) {
	defer close(out)
	log := s.opts.Logger.With(zap.String("path", s.path))

	var (
		seen      stamp     // stat of what was last read
		lastRev   string    // revision last yielded ("" before the first)
		lastErr   string    // error text last yielded, to report each error once
		pending   *stamp    // a change waiting to settle
		since     time.Time // when pending was last seen to change
		lastRead  time.Time
		haveFirst bool
	)
	emit := func(v Version) bool {
		select {
		case out <- v:
			return true
		case <-ctx.Done():
			return false
		}
	}
	// load reads and yields; it reports false when ctx ended. want is the
	// stat that made the loop decide to read (nil for the first read).
	load := func(now time.Time, want *stamp) bool {
		data, st, stable, err := s.read(want)
		lastRead = now
		if !stable {
			pending, since = &st, now
			return true
		}
		seen, pending = st, nil
		if err != nil {
			if err.Error() == lastErr && haveFirst {
				return true
			}
			lastErr, lastRev, haveFirst = err.Error(), "", true
			log.Warn("config file unreadable", zap.Error(err))
			return emit(Version{Err: err})
		}
		rev := Revision(data)
		if rev == lastRev {
			return true
		}
		lastRev, lastErr, haveFirst = rev, "", true
		cfg, err := Parse(data)
		if err != nil {
			return emit(Version{Revision: rev, Err: fmt.Errorf("config file %s: %w", s.path, err)})
		}
		return emit(Version{Config: cfg, Revision: rev})
	}

	// The first version goes out at once, still only if the file holds
	// still while being read; a file in the middle of a write is retried on
	// the ticks below.
	if !load(time.Now(), nil) {
		return
	}
	t := time.NewTicker(s.opts.PollInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			st := s.stat()
			switch {
			case st.same(seen):
				// Unchanged, or changed and changed back before settling.
				pending = nil
				if now.Sub(lastRead) < s.opts.RescanEvery {
					continue
				}
			case pending == nil || !st.same(*pending):
				pending, since = &st, now
				continue
			case now.Sub(since) < s.opts.Settle:
				continue
			}
			if !load(now, &st) {
				return
			}
		}
	}
}
