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
