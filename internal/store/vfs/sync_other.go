//go:build !linux

package vfs

import (
	"errors"
	"os"
)

func fdatasync(f *os.File) error { return f.Sync() }

// preallocate is not supported here: writes allocate as they go.
func preallocate(*os.File, int64) error { return errors.ErrUnsupported }
