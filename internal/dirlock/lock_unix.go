//go:build unix

package dirlock

import (
	"errors"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// noFollow makes opening the lock file fail on a symbolic link.
const noFollow = syscall.O_NOFOLLOW

// lock takes f's exclusive flock without waiting; held reports that
// another open file holds it.
func lock(f *os.File) (held bool, err error) {
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		switch {
		case err == nil:
			return false, nil
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.EWOULDBLOCK):
			return true, nil
		}
		return false, err
	}
}

// unlock releases f's flock (closing f would too).
func unlock(f *os.File) error {
	return unix.Flock(int(f.Fd()), unix.LOCK_UN)
}
