//go:build !linux

package filestore

import "os"

// datasync flushes f to stable storage (fsync(2); on macOS, F_FULLFSYNC).
func datasync(f *os.File) error { return f.Sync() }
