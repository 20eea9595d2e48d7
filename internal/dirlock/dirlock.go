// Package dirlock gives one Courier process at a time the use of a
// directory: the embedded NATS server's store, the demo's data directory.
// Two processes that write the same files without knowing of each other
// lose data silently (two NATS servers on one JetStream store each rewrite
// the stream's files, and what one acknowledged the other drops), so the
// second one must refuse to start, and say which process it met.
//
// [Acquire] takes an exclusive advisory lock (flock(2) on Unix, LockFileEx
// on Windows) on a file in the directory, [FileName]. The operating system
// holds the lock for the open file and releases it when the process ends,
// however it ends: a crash or SIGKILL leaves no lock behind that would need
// clearing by hand, and the next process takes the directory at once. The
// file itself stays (removing it would let a process that opened it before
// the removal and one that creates a new file both hold "the" lock); it
// holds the owner's pid and, once [Lock.SetURL] is called, the URL where it
// serves, which [HeldError] reports to the process that is refused.
//
// The lock is advisory: it keeps out processes that ask for it (every
// Courier process that uses such a directory), not others. It is held per
// open file, so a second Acquire in the same process is refused too. On a
// network file system flock may be emulated or not shared between
// machines: give each machine directories of its own on local disks.
package dirlock

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/courier-go/courier/internal/escape"
)

// FileName is the name of the lock file Acquire creates in the directory.
const FileName = ".courier.lock"

// header is the first line of every lock file, and what tells one apart
// from a file Courier did not write.
const header = "courier lock: the process below uses this directory; the lock is released when it ends"

// maxRead bounds what is read of a lock file.
const maxRead = 4096

// Lock is a directory held by this process. Its methods are safe for
// concurrent use.
type Lock struct {
	mu   sync.Mutex
	f    *os.File // nil once released
	path string
	pid  int
}

// Owner is what a lock file says of the process that holds it.
type Owner struct {
	// PID is the owner's process id; 0 when the file does not say.
	PID int
	// URL is where the owner serves (an embedded NATS server's client URL);
	// "" when it has not said yet (it is starting) or serves nothing.
	URL string
}

// HeldError is returned by Acquire when another process, or another Lock
// of this process, holds the directory.
type HeldError struct {
	// Dir is the directory.
	Dir string
	// Owner is what the lock file says of the process that holds it: its
	// zero value when the file says nothing yet.
	Owner Owner
}

// Error says which process holds the directory, as far as its lock file
// tells.
func (e *HeldError) Error() string {
	who := "another process"
	if e.Owner.PID != 0 {
		who = "process " + strconv.Itoa(e.Owner.PID)
		if e.Owner.PID == os.Getpid() {
			who = "this process (pid " + strconv.Itoa(e.Owner.PID) + ")"
		}
	}
	if e.Owner.URL != "" {
		who += ", serving at " + e.Owner.URL
	}
	return fmt.Sprintf("directory %s is in use by %s", e.Dir, who)
}

// ErrNotLockFile is returned by Acquire when the directory holds a file
// named FileName that Courier did not write: it is left as it is.
var ErrNotLockFile = errors.New("dirlock: not a Courier lock file")

// Acquire takes dir, which must exist, for this process: it creates the
// lock file in it if missing, locks it without waiting and writes this
// process's pid into it. It returns a *HeldError when another process (or
// another Lock of this one) holds dir, an error wrapping ErrNotLockFile
// when a file of that name holds something else (or is not a regular
// file: a symbolic link is not followed), and the file system's error
// when the file cannot be created or locked.
func Acquire(dir string) (*Lock, error) {
	path := filepath.Join(dir, FileName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|noFollow, 0o644)
	if err != nil {
		if fi, lerr := os.Lstat(path); lerr == nil && !fi.Mode().IsRegular() {
			return nil, fmt.Errorf("%w: %s is a %s, not a file Courier wrote: remove it, or use another directory", ErrNotLockFile, path, kind(fi.Mode()))
		}
		return nil, fmt.Errorf("dirlock: open %s: %w", path, unwrapPath(err))
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("dirlock: %s: %w", path, err)
		}
		return nil, fmt.Errorf("%w: %s is a %s, not a file Courier wrote: remove it, or use another directory", ErrNotLockFile, path, kind(fi.Mode()))
	}
	held, err := lock(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("dirlock: lock %s: %w", path, err)
	}
	if held {
		owner, _ := readOwner(f)
		f.Close()
		return nil, &HeldError{Dir: dir, Owner: owner}
	}
	if _, err := readOwner(f); err != nil {
		f.Close() // releases the lock
		return nil, fmt.Errorf("%w: %s holds something else: remove it if it is yours to remove, or use another directory", ErrNotLockFile, path)
	}
	l := &Lock{f: f, path: path, pid: os.Getpid()}
	if err := l.write(""); err != nil {
		f.Close()
		return nil, err
	}
	return l, nil
}

// Path is the lock file's path.
func (l *Lock) Path() string { return l.path }

// SetURL records url in the lock file as where this process serves, for
// the processes it refuses to name. url must be one line.
func (l *Lock) SetURL(url string) error {
	if !oneLine(url) {
		return fmt.Errorf("dirlock: URL %q is not one line of printable text", url)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return fmt.Errorf("dirlock: %s is released", l.path)
	}
	return l.writeLocked(url)
}

// Release releases the directory. The lock file stays (see the package
// documentation). Calling it again does nothing.
func (l *Lock) Release() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return
	}
	_ = unlock(l.f)
	_ = l.f.Close()
	l.f = nil
}

func (l *Lock) write(url string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.writeLocked(url)
}

// writeLocked writes the file's content for url: in place, from the
// start, then cut to its length, so that a reader sees the header and the
// pid throughout (the lock is on the open file: a new file renamed over
// it would not be locked).
func (l *Lock) writeLocked(url string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\npid %d\n", header, l.pid)
	if url != "" {
		fmt.Fprintf(&b, "url %s\n", url)
	}
	if _, err := l.f.WriteAt([]byte(b.String()), 0); err != nil {
		return fmt.Errorf("dirlock: write %s: %w", l.path, err)
	}
	if err := l.f.Truncate(int64(b.Len())); err != nil {
		return fmt.Errorf("dirlock: write %s: %w", l.path, err)
	}
	return nil
}

// readOwner reads what f says of its owner. An empty file (just created)
// says nothing; a file that does not start with header is not a lock file.
func readOwner(f *os.File) (Owner, error) {
	b := make([]byte, maxRead)
	n, err := f.ReadAt(b, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return Owner{}, err
	}
	return ParseOwner(b[:n])
}

// ParseOwner reads the content of a lock file: an empty one says nothing
// (Owner's zero value); one that does not start with the lock file's
// header is refused with ErrNotLockFile. Lines it does not know, and a pid
// or URL that is not valid (the file may have been written by anyone who
// can write in the directory), are left out, so that what it returns is
// safe to print.
func ParseOwner(b []byte) (Owner, error) {
	var o Owner
	if len(b) == 0 {
		return o, nil
	}
	first, rest, _ := bytes.Cut(b, []byte("\n"))
	if string(first) != header {
		return o, ErrNotLockFile
	}
	for line := range strings.SplitSeq(string(rest), "\n") {
		k, v, _ := strings.Cut(line, " ")
		switch k {
		case "pid":
			if p, err := strconv.Atoi(v); err == nil && p > 0 && strconv.Itoa(p) == v {
				o.PID = p
			}
		case "url":
			if oneLine(v) && len(v) <= 512 {
				o.URL = v
			}
		}
	}
	return o, nil
}

// oneLine reports whether s is printable text without spaces that a
// terminal would show as it is.
func oneLine(s string) bool {
	return s != "" && !strings.ContainsAny(s, " \t") && escape.Line(s) == s
}

// kind names what mode describes.
func kind(m fs.FileMode) string {
	switch {
	case m&fs.ModeSymlink != 0:
		return "symbolic link"
	case m.IsDir():
		return "directory"
	}
	return "special file"
}

// unwrapPath drops the path an *fs.PathError repeats.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
