//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly || illumos)

package filestore

import (
	"errors"
	"os"
)

// lockFile fails: this system has no flock(2), and a store without its
// lock could be opened twice and corrupted.
func lockFile(f *os.File) error {
	return errors.New("filestore: directory locking is not supported on this system")
}
