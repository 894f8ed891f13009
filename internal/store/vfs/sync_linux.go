//go:build linux

package vfs

import (
	"os"

	"golang.org/x/sys/unix"
)

// fdatasync flushes the data of f (and the metadata needed to read it back),
// skipping the timestamps that a full fsync would also write.
func fdatasync(f *os.File) error {
	for {
		err := unix.Fdatasync(int(f.Fd()))
		if err != unix.EINTR {
			return err
		}
	}
}

// preallocate reserves disk blocks for the first size bytes of f without
// changing its size (FALLOC_FL_KEEP_SIZE).
func preallocate(f *os.File, size int64) error {
	for {
		err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_KEEP_SIZE, 0, size)
		if err != unix.EINTR {
			return err
		}
	}
}
