package vfs

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path"
	"sort"
	"strings"
	"sync"
)

// ErrCrashed is returned by every mutating operation of a MemFS after its
// simulated crash point was reached.
var ErrCrashed = errors.New("vfs: simulated crash")

// MemFS is an in-memory FS that remembers which writes were synced, so that a
// test can take the state a disk would be in after a crash (CrashClone), and
// that can stop at a chosen write, tearing it at a random byte (CrashAtWrite).
//
// By default the names in a directory are durable at once. A strict MemFS
// (NewMem with Strict) keeps the name of a created, renamed or removed file
// as it was at the last SyncDir of its directory: a power-loss image has a
// file created since under no name at all, a renamed one under its old name
// and a removed one back. MkdirAll and RemoveAll stay durable at once, as
// in the OS implementation. Its crash point also counts truncations,
// renames and removals, any of which may then take effect or not.
//
// Each file keeps its current bytes plus an undo record for every write or
// truncation since its last Sync; a crash image undoes a random suffix of
// those, tearing the last one kept at a random byte. Sync only drops the undo
// records, so syncing a large file often stays cheap.
type MemFS struct {
	mu      sync.Mutex
	files   map[string]*memNode
	dirs    map[string]bool
	writes  int64
	crashAt int64 // crash on this write (1-based); 0 = never
	crashed bool
	crashIn string // file of the torn write
	crashOp string // what the crash fell on: write, truncate, rename, remove
	rng     *rand.Rand

	strict  bool
	durable map[string]*memNode // strict: the names a power loss keeps

	// WriteFault, when set, is called before each WriteAt; it returns how many
	// bytes to write (<= n) and the error to report, to simulate a full disk
	// or an I/O error. Set it before the FS is used concurrently.
	WriteFault func(name string, off int64, n int) (int, error)
	// SyncFault, when set, is called before each Sync and SyncDir (with the
	// directory's name) and fails it when it returns an error; nothing is
	// made durable then.
	SyncFault func(name string) error
	// ReadFault, when set, is called before each ReadAt and fails it when it
	// returns an error.
	ReadFault func(name string, off int64, n int) error
	// OpenFault, when set, is called before each OpenFile and fails it when
	// it returns an error.
	OpenFault func(name string, flag int) error
	// RenameFault, when set, is called before each Rename and fails it (the
	// rename not done) when it returns an error.
	//
	// Like WriteFault, the fault hooks are read without a lock: set them
	// while no other goroutine uses the FS.
	RenameFault func(oldname, newname string) error
}

// MemOption configures NewMem.
type MemOption func(*MemFS)

// Strict makes directory entries of files durable only through SyncDir and
// puts truncations, renames and removals among the crash points (see MemFS).
func Strict() MemOption { return func(m *MemFS) { m.strict = true } }

type memNode struct {
	data []byte
	undo []undoRec
}

// undoRec restores the state before one write or truncation.
type undoRec struct {
	off     int64  // where the write started (or the new size of a truncation)
	n       int64  // bytes written (0 for a truncation)
	old     []byte // bytes overwritten in [off, off+len(old))
	oldSize int64
}

// NewMem returns an empty MemFS whose random choices come from seed.
func NewMem(seed uint64, opts ...MemOption) *MemFS {
	m := &MemFS{
		files: map[string]*memNode{},
		dirs:  map[string]bool{"/": true, ".": true},
		rng:   rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
	}
	for _, o := range opts {
		o(m)
	}
	if m.strict {
		m.durable = map[string]*memNode{}
	}
	return m
}

// IsStrict reports whether m was made with Strict.
func (m *MemFS) IsStrict() bool { return m.strict }

// CrashAtWrite arms the crash: the n-th WriteAt from now on (n >= 1) writes
// only a random prefix of its bytes and fails with ErrCrashed, and every
// mutating call after it fails too. On a strict MemFS truncations, renames
// and removals count too: the one the crash falls on takes effect or not,
// at random, and fails with ErrCrashed. n <= 0 disarms.
func (m *MemFS) CrashAtWrite(n int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if n <= 0 {
		m.crashAt = 0
		return
	}
	m.crashAt = m.writes + n
}

// Crashed reports whether the crash point was reached.
func (m *MemFS) Crashed() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.crashed
}

// CrashedIn returns the file whose write the crash tore ("" before a crash).
func (m *MemFS) CrashedIn() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.crashIn
}

// CrashedOp returns the operation the crash fell on: "write", "truncate",
// "rename" or "remove" ("" before a crash).
func (m *MemFS) CrashedOp() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.crashOp
}

// Writes returns the number of WriteAt calls (on a strict MemFS, also
// truncations, renames and removals) so far.
func (m *MemFS) Writes() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.writes
}

// CrashClone returns a new MemFS holding what a disk could hold after a power
// loss now: per file, everything synced, then a random prefix of the later
// writes, the last of them torn at a random byte. With keepUnsynced every
// write survives (a process crash: the page cache outlives the process).
// On a strict MemFS a power loss keeps the names of the last SyncDir of each
// directory; a process crash keeps the current ones. The clone is strict
// when m is.
func (m *MemFS) CrashClone(keepUnsynced bool) *MemFS {
	keep := keepAll
	if !keepUnsynced {
		keep = keepSome
	}
	return m.crashClone(keep)
}

// SyncedClone returns a new MemFS holding only what was synced: the worst
// power loss, which takes every unsynced write (and, on a strict MemFS,
// every name change since its directory's last SyncDir). A test uses it to
// force a loss that CrashClone leaves to chance.
func (m *MemFS) SyncedClone() *MemFS { return m.crashClone(keepNone) }

type keepMode int

const (
	keepSome keepMode = iota // a random prefix of the unsynced writes
	keepAll                  // a process crash
	keepNone                 // only what was synced
)

func (m *MemFS) crashClone(mode keepMode) *MemFS {
	keepUnsynced := mode == keepAll
	m.mu.Lock()
	defer m.mu.Unlock()
	c := NewMem(m.rng.Uint64())
	c.strict = m.strict
	for d := range m.dirs {
		c.dirs[d] = true
	}
	files := m.files
	if m.strict && !keepUnsynced {
		files = m.durable
	}
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names) // deterministic use of the random source
	for _, name := range names {
		n := files[name]
		data := append([]byte(nil), n.data...)
		if !keepUnsynced && len(n.undo) > 0 {
			keep := 0
			if mode == keepSome {
				keep = m.rng.IntN(len(n.undo) + 1)
			}
			for i := len(n.undo) - 1; i > keep; i-- {
				data = n.undo[i].apply(data, 0)
			}
			if keep < len(n.undo) {
				u := n.undo[keep]
				torn := int64(0)
				if u.n > 0 && mode == keepSome {
					torn = m.rng.Int64N(u.n)
				}
				data = u.apply(data, torn)
			}
		}
		c.files[name] = &memNode{data: data}
	}
	if c.strict {
		c.durable = make(map[string]*memNode, len(c.files))
		for name, n := range c.files {
			c.durable[name] = n
		}
	}
	return c
}

// crashPoint counts one truncation, rename or removal on a strict MemFS and
// reports whether the crash falls on it; the caller then applies the
// operation when apply is true and fails with ErrCrashed. Called with mu
// held.
func (m *MemFS) crashPoint(op, name string) (crash, apply bool) {
	if !m.strict {
		return false, true
	}
	m.writes++
	if m.crashAt == 0 || m.writes < m.crashAt {
		return false, true
	}
	m.crashed = true
	m.crashIn = name
	m.crashOp = op
	return true, m.rng.IntN(2) == 0
}

// apply undoes the record on data, keeping the first keep bytes of a write.
func (u undoRec) apply(data []byte, keep int64) []byte {
	if u.n == 0 { // truncation: grow back and restore the cut bytes
		if int64(len(data)) < u.oldSize {
			data = append(data, make([]byte, u.oldSize-int64(len(data)))...)
		}
		copy(data[u.off:], u.old)
		return data[:u.oldSize]
	}
	start := u.off + keep
	oldEnd := u.off + int64(len(u.old))
	if start < oldEnd {
		copy(data[start:oldEnd], u.old[keep:])
	}
	size := max(u.oldSize, start)
	if size < int64(len(data)) {
		data = data[:size]
	}
	return data
}

func clean(name string) string { return path.Clean("/" + strings.ReplaceAll(name, "\\", "/")) }

func (m *MemFS) mutating() error {
	if m.crashed {
		return ErrCrashed
	}
	return nil
}

// OpenFile implements FS.
func (m *MemFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	name = clean(name)
	if fault := m.OpenFault; fault != nil {
		if err := fault(name, flag); err != nil {
			return nil, err
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	n, ok := m.files[name]
	if !ok {
		if flag&os.O_CREATE == 0 {
			return nil, &os.PathError{Op: "open", Path: name, Err: os.ErrNotExist}
		}
		if err := m.mutating(); err != nil {
			return nil, err
		}
		if !m.dirs[path.Dir(name)] {
			return nil, &os.PathError{Op: "open", Path: name, Err: os.ErrNotExist}
		}
		n = &memNode{}
		m.files[name] = n
	} else if flag&os.O_EXCL != 0 && flag&os.O_CREATE != 0 {
		return nil, &os.PathError{Op: "open", Path: name, Err: os.ErrExist}
	}
	if flag&os.O_TRUNC != 0 && len(n.data) > 0 {
		if err := m.mutating(); err != nil {
			return nil, err
		}
		crash, apply := m.crashPoint("truncate", name)
		if apply {
			m.truncateLocked(n, 0)
		}
		if crash {
			return nil, ErrCrashed
		}
	}
	return &memFile{fs: m, node: n, name: name, readOnly: flag&(os.O_RDWR|os.O_WRONLY) == 0}, nil
}

// Remove implements FS.
func (m *MemFS) Remove(name string) error {
	name = clean(name)
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.mutating(); err != nil {
		return err
	}
	if _, ok := m.files[name]; ok {
		crash, apply := m.crashPoint("remove", name)
		if apply {
			delete(m.files, name)
		}
		if crash {
			return ErrCrashed
		}
		return nil
	}
	if m.dirs[name] {
		for p := range m.files {
			if path.Dir(p) == name {
				return fmt.Errorf("remove %s: directory not empty", name)
			}
		}
		delete(m.dirs, name)
		m.dropDurable(name)
		return nil
	}
	return &os.PathError{Op: "remove", Path: name, Err: os.ErrNotExist}
}

// RemoveAll implements FS.
func (m *MemFS) RemoveAll(name string) error {
	name = clean(name)
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.mutating(); err != nil {
		return err
	}
	prefix := name + "/"
	for p := range m.files {
		if p == name || strings.HasPrefix(p, prefix) {
			delete(m.files, p)
		}
	}
	for d := range m.dirs {
		if d == name || strings.HasPrefix(d, prefix) {
			delete(m.dirs, d)
		}
	}
	m.dropDurable(name)
	return nil
}

// dropDurable forgets the durable names at or below name (a directory
// removal, durable at once).
func (m *MemFS) dropDurable(name string) {
	prefix := name + "/"
	for p := range m.durable {
		if p == name || strings.HasPrefix(p, prefix) {
			delete(m.durable, p)
		}
	}
}

// SyncDir implements FS: on a strict MemFS the names of the files in dir
// become durable as they are now.
func (m *MemFS) SyncDir(dir string) error {
	dir = clean(dir)
	if fault := m.SyncFault; fault != nil {
		if err := fault(dir); err != nil {
			return err
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.mutating(); err != nil {
		return err
	}
	if !m.dirs[dir] {
		return &os.PathError{Op: "sync", Path: dir, Err: os.ErrNotExist}
	}
	if !m.strict {
		return nil
	}
	for p := range m.durable {
		if path.Dir(p) == dir && m.files[p] == nil {
			delete(m.durable, p)
		}
	}
	for p, n := range m.files {
		if path.Dir(p) == dir {
			m.durable[p] = n
		}
	}
	return nil
}

// Rename implements FS.
func (m *MemFS) Rename(oldname, newname string) error {
	oldname, newname = clean(oldname), clean(newname)
	if fault := m.RenameFault; fault != nil {
		if err := fault(oldname, newname); err != nil {
			return err
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.mutating(); err != nil {
		return err
	}
	n, ok := m.files[oldname]
	if !ok {
		return &os.PathError{Op: "rename", Path: oldname, Err: os.ErrNotExist}
	}
	if !m.dirs[path.Dir(newname)] {
		return &os.PathError{Op: "rename", Path: newname, Err: os.ErrNotExist}
	}
	crash, apply := m.crashPoint("rename", oldname)
	if apply {
		delete(m.files, oldname)
		m.files[newname] = n
	}
	if crash {
		return ErrCrashed
	}
	return nil
}

// MkdirAll implements FS.
func (m *MemFS) MkdirAll(dir string, perm os.FileMode) error {
	dir = clean(dir)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.dirs[dir] {
		return nil
	}
	if err := m.mutating(); err != nil {
		return err
	}
	for d := dir; !m.dirs[d]; d = path.Dir(d) {
		m.dirs[d] = true
	}
	return nil
}

// ReadDir implements FS.
func (m *MemFS) ReadDir(dir string) ([]string, error) {
	dir = clean(dir)
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.dirs[dir] {
		return nil, &os.PathError{Op: "readdir", Path: dir, Err: os.ErrNotExist}
	}
	seen := map[string]bool{}
	for p := range m.files {
		if path.Dir(p) == dir {
			seen[path.Base(p)] = true
		}
	}
	for d := range m.dirs {
		if d != dir && path.Dir(d) == dir {
			seen[path.Base(d)] = true
		}
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	return names, nil
}

// Stat implements FS.
func (m *MemFS) Stat(name string) (bool, bool, error) {
	name = clean(name)
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.files[name]; ok {
		return true, false, nil
	}
	if m.dirs[name] {
		return true, true, nil
	}
	return false, false, nil
}

func (m *MemFS) truncateLocked(n *memNode, size int64) {
	old := int64(len(n.data))
	u := undoRec{off: size, oldSize: old}
	if size < old {
		u.old = append([]byte(nil), n.data[size:]...)
		n.data = n.data[:size]
	} else {
		n.data = append(n.data, make([]byte, size-old)...)
	}
	n.undo = append(n.undo, u)
}

type memFile struct {
	fs       *MemFS
	node     *memNode
	name     string
	readOnly bool
	closed   bool
}

func (f *memFile) ReadAt(p []byte, off int64) (int, error) {
	if fault := f.fs.ReadFault; fault != nil {
		if err := fault(f.name, off, len(p)); err != nil {
			return 0, err
		}
	}
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return 0, os.ErrClosed
	}
	if off >= int64(len(f.node.data)) {
		return 0, io.EOF
	}
	n := copy(p, f.node.data[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (f *memFile) WriteAt(p []byte, off int64) (int, error) {
	fs := f.fs
	if fault := fs.WriteFault; fault != nil {
		k, err := fault(f.name, off, len(p))
		if err != nil {
			if k > 0 {
				if _, werr := f.writeAt(p[:min(k, len(p))], off, false); werr != nil {
					return 0, werr
				}
			}
			return k, err
		}
	}
	return f.writeAt(p, off, true)
}

func (f *memFile) writeAt(p []byte, off int64, count bool) (int, error) {
	fs := f.fs
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if f.closed {
		return 0, os.ErrClosed
	}
	if f.readOnly {
		return 0, fmt.Errorf("write %s: file opened read-only", f.name)
	}
	if err := fs.mutating(); err != nil {
		return 0, err
	}
	crash := false
	if count {
		fs.writes++
		if fs.crashAt > 0 && fs.writes >= fs.crashAt {
			crash = true
			p = p[:fs.rng.IntN(len(p)+1)]
		}
	}
	n := f.node
	oldSize := int64(len(n.data))
	u := undoRec{off: off, n: int64(len(p)), oldSize: oldSize}
	if off < oldSize {
		u.old = append([]byte(nil), n.data[off:min(oldSize, off+int64(len(p)))]...)
	}
	if end := off + int64(len(p)); end > oldSize {
		n.data = append(n.data, make([]byte, end-oldSize)...)
	}
	copy(n.data[off:], p)
	n.undo = append(n.undo, u)
	if crash {
		fs.crashed = true
		fs.crashIn = f.name
		fs.crashOp = "write"
		return len(p), ErrCrashed
	}
	return len(p), nil
}

func (f *memFile) Sync() error {
	if fault := f.fs.SyncFault; fault != nil {
		if err := fault(f.name); err != nil {
			return err
		}
	}
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return os.ErrClosed
	}
	if err := f.fs.mutating(); err != nil {
		return err
	}
	f.node.undo = nil
	return nil
}

func (f *memFile) Truncate(size int64) error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return os.ErrClosed
	}
	if err := f.fs.mutating(); err != nil {
		return err
	}
	crash, apply := f.fs.crashPoint("truncate", f.name)
	if apply {
		f.fs.truncateLocked(f.node, size)
	}
	if crash {
		return ErrCrashed
	}
	return nil
}

func (f *memFile) Size() (int64, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	return int64(len(f.node.data)), nil
}

func (f *memFile) Close() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	f.closed = true
	return nil
}
