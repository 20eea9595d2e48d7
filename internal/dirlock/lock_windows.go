//go:build windows

package dirlock

import (
	"errors"
	"os"

	"golang.org/x/sys/windows"
)

// noFollow: os.OpenFile on Windows opens a symbolic link's target; Acquire
// checks what it opened is a regular file.
const noFollow = 0

// lockedRange is the byte range locked: far past the content, since a
// Windows lock also bars reading the bytes it covers, and the refused
// process reads who holds the file.
var lockedRange = windows.Overlapped{Offset: 0xFFFFFFF0, OffsetHigh: 0x7FFFFFFF}

// lock takes an exclusive lock on f without waiting; held reports that
// another open file holds it.
func lock(f *os.File) (held bool, err error) {
	ol := lockedRange
	err = windows.LockFileEx(windows.Handle(f.Fd()), windows.LOCKFILE_EXCLUSIVE_LOCK|windows.LOCKFILE_FAIL_IMMEDIATELY, 0, 1, 0, &ol)
	switch {
	case err == nil:
		return false, nil
	case errors.Is(err, windows.ERROR_LOCK_VIOLATION), errors.Is(err, windows.ERROR_IO_PENDING):
		return true, nil
	}
	return false, err
}

// unlock releases f's lock (closing f would too).
func unlock(f *os.File) error {
	ol := lockedRange
	return windows.UnlockFileEx(windows.Handle(f.Fd()), 0, 1, 0, &ol)
}
