//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly || illumos

package filestore

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// lockFile takes an exclusive, non-blocking flock(2) on the open file f.
// The lock belongs to f's open file description, so a second Open in the
// same process conflicts as one in another process does; closing f
// releases it, and it dies with the process.
func lockFile(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var lerr error
	if err := rc.Control(func(fd uintptr) {
		for {
			lerr = syscall.Flock(int(fd), syscall.LOCK_EX|syscall.LOCK_NB)
			if lerr != syscall.EINTR {
				return
			}
		}
	}); err != nil {
		return err
	}
	if errors.Is(lerr, syscall.EWOULDBLOCK) {
		return fmt.Errorf("%w: %s is open elsewhere", ErrLocked, f.Name())
	}
	if lerr != nil {
		return fmt.Errorf("filestore: locking %s: %w", f.Name(), lerr)
	}
	return nil
}
