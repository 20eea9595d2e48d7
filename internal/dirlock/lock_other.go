//go:build !unix && !windows

package dirlock

import (
	"errors"
	"os"
)

// noFollow is not known here.
const noFollow = 0

// lock fails: this system has no file lock Courier knows.
func lock(*os.File) (held bool, err error) {
	return false, errors.New("file locks are not supported on this system")
}

// unlock does nothing.
func unlock(*os.File) error { return nil }
