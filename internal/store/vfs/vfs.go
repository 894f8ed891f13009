// Package vfs is the file-system seam of the store: the few file operations
// the store needs, behind an interface, so that tests can run the store on an
// in-memory file system that loses unsynced writes and tears the write in
// flight at a chosen point (see MemFS).
//
// Design decisions:
//   - The interface is positional (ReadAt/WriteAt) only: the store never relies
//     on a file cursor, so one handle can serve concurrent readers and a writer.
//   - Creating, renaming and removing a file are durable only once the
//     directory holding the name was synced (SyncDir), as on a real disk: the
//     OS implementation leaves that fsync to the caller, who knows when the
//     name must survive (a new log segment before an append in it is
//     acknowledged; a renamed checkpoint before the old one may be relied on
//     no more) and can sync once for several names. A strict MemFS loses
//     every name change a power loss could lose, so the crash tests catch a
//     missing SyncDir.
//   - MkdirAll and RemoveAll are rare and durable on return: the OS
//     implementation fsyncs the parent directory for them.
package vfs

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"sort"
)

// File is an open file.
type File interface {
	io.ReaderAt
	io.WriterAt
	io.Closer
	// Sync makes every write done so far durable (fdatasync).
	Sync() error
	// Truncate changes the size of the file; the change is durable on return
	// of the next Sync.
	Truncate(size int64) error
	// Size returns the current size of the file.
	Size() (int64, error)
}

// Preallocator is implemented by files that can reserve disk space for
// their first size bytes ahead of the writes, without changing their size:
// the writes then skip block allocation, which on ext4 more than halves the
// CPU of appending to a new file. Reading and the size are unchanged, so it
// is only a hint; MemFS does not implement it.
type Preallocator interface {
	Preallocate(size int64) error
}

// FS is the set of file-system operations the store uses.
type FS interface {
	// OpenFile opens name with os.O_* flags (O_RDWR, O_CREATE, O_EXCL,
	// O_RDONLY, O_TRUNC). A file it creates is durable after SyncDir.
	OpenFile(name string, flag int, perm os.FileMode) (File, error)
	// Remove deletes a file or an empty directory; durable after SyncDir of
	// its parent (MemFS makes a directory's removal durable at once).
	Remove(name string) error
	// RemoveAll deletes a path and everything below it; durable on return.
	RemoveAll(name string) error
	// Rename moves a file atomically; durable after SyncDir of the target's
	// directory.
	Rename(oldname, newname string) error
	// SyncDir makes the names in dir durable: files created in it, renamed
	// into or out of it, removed from it (fsync of the directory).
	SyncDir(dir string) error
	// MkdirAll creates a directory and its parents; durable on return.
	MkdirAll(dir string, perm os.FileMode) error
	// ReadDir lists the names in a directory, sorted.
	ReadDir(dir string) ([]string, error)
	// Stat reports whether name exists and whether it is a directory.
	Stat(name string) (exists, isDir bool, err error)
}

// OS returns the FS of the operating system.
func OS() FS { return osFS{} }

type osFS struct{}

type osFile struct{ *os.File }

func (f osFile) Sync() error { return fdatasync(f.File) }

func (f osFile) Preallocate(size int64) error { return preallocate(f.File, size) }

func (f osFile) Size() (int64, error) {
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}

func (osFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

func (osFS) Remove(name string) error { return os.Remove(name) }

func (osFS) RemoveAll(name string) error {
	if err := os.RemoveAll(name); err != nil {
		return err
	}
	return syncDir(filepath.Dir(name))
}

func (osFS) Rename(oldname, newname string) error { return os.Rename(oldname, newname) }

func (osFS) SyncDir(dir string) error { return syncDir(dir) }

func (osFS) MkdirAll(dir string, perm os.FileMode) error {
	if st, err := os.Stat(dir); err == nil && st.IsDir() {
		return nil
	}
	parent := filepath.Dir(dir)
	if parent != dir {
		if err := (osFS{}).MkdirAll(parent, perm); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, perm); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	return syncDir(parent)
}

func (osFS) ReadDir(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	return names, nil
}

func (osFS) Stat(name string) (bool, bool, error) {
	st, err := os.Stat(name)
	if errors.Is(err, os.ErrNotExist) {
		return false, false, nil
	}
	if err != nil {
		return false, false, err
	}
	return true, st.IsDir(), nil
}

// syncDir fsyncs a directory, which makes the names in it durable (a full
// fsync: fdatasync may skip the metadata that the names are).
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
