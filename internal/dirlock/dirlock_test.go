package dirlock_test

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/courier-go/courier/internal/dirlock"
	"github.com/courier-go/courier/internal/escape"
	"github.com/courier-go/courier/internal/testenv"
)

// Environment of the holder child process (see TestMain).
const (
	envHolderDir = "COURIER_TEST_DIRLOCK_HOLD"
	envHolderURL = "COURIER_TEST_DIRLOCK_URL"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(envHolderDir); dir != "" {
		hold(dir, os.Getenv(envHolderURL))
		return
	}
	goleak.VerifyTestMain(testenv.M(m))
}

// hold is the holder child process: it takes dir, records url, says
// "held" on standard output and waits to be killed.
func hold(dir, url string) {
	l, err := dirlock.Acquire(dir)
	if err == nil {
		err = l.SetURL(url)
	}
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(2)
	}
	fmt.Println("held")
	select {}
}

// startHolder runs the holder child process on dir and returns once it
// holds dir.
func startHolder(t *testing.T, dir, url string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envHolderDir+"="+dir, envHolderURL+"="+url)
	out, err := cmd.StdoutPipe()
	testenv.Must(t, err, "holder's stdout")
	testenv.Must(t, cmd.Start(), "start the holder")
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "held\n" {
		t.Fatalf("holder said %q (%v), want held", line, err)
	}
	return cmd
}

// A directory another process holds is refused, with the holder's pid and
// URL; once that process is SIGKILLed, the directory is free at once.
func TestOtherProcessHoldsUntilKilled(t *testing.T) {
	dir := t.TempDir()
	const url = "nats://127.0.0.1:4222"
	holder := startHolder(t, dir, url)
	l, err := dirlock.Acquire(dir)
	var held *dirlock.HeldError
	if !errors.As(err, &held) {
		if l != nil {
			l.Release()
		}
		t.Fatalf("Acquire while process %d holds %s: %v, want a *HeldError", holder.Process.Pid, dir, err)
	}
	want := dirlock.Owner{PID: holder.Process.Pid, URL: url}
	if held.Owner != want || held.Dir != dir {
		t.Fatalf("HeldError %+v, want owner %+v of %s", held, want, dir)
	}
	msg := err.Error()
	for _, s := range []string{dir, strconv.Itoa(want.PID), url} {
		if !strings.Contains(msg, s) {
			t.Errorf("error %q does not name %s", msg, s)
		}
	}

	testenv.Must(t, holder.Process.Kill(), "SIGKILL the holder")
	_ = holder.Wait()
	l, err = dirlock.Acquire(dir)
	testenv.Must(t, err, "Acquire after the holder was killed")
	defer l.Release()
	b, err := os.ReadFile(l.Path())
	testenv.Must(t, err, "read the lock file")
	o, err := dirlock.ParseOwner(b)
	if err != nil || o != (dirlock.Owner{PID: os.Getpid()}) {
		t.Fatalf("lock file after a takeover says %+v (%v), want this pid and no URL (the killed holder's is gone):\n%s", o, err, b)
	}
}

// Two Locks of one process exclude each other too; Release frees the
// directory, and a second Release does nothing.
func TestSameProcess(t *testing.T) {
	dir := t.TempDir()
	first, err := dirlock.Acquire(dir)
	testenv.Must(t, err, "first Acquire")
	testenv.Must(t, first.SetURL("nats://127.0.0.1:1234"), "SetURL")
	_, err = dirlock.Acquire(dir)
	var held *dirlock.HeldError
	if !errors.As(err, &held) || held.Owner.PID != os.Getpid() || held.Owner.URL != "nats://127.0.0.1:1234" ||
		!strings.Contains(err.Error(), "this process") {
		t.Fatalf("second Acquire in the process: %v, want a *HeldError naming this process and its URL", err)
	}
	first.Release()
	first.Release()
	if err := first.SetURL("nats://x:1"); err == nil {
		t.Error("SetURL after Release succeeded")
	}
	again, err := dirlock.Acquire(dir)
	testenv.Must(t, err, "Acquire after Release")
	again.Release()
}

// A file of the lock file's name that Courier did not write, or a
// symbolic link there, is refused and left as it was.
func TestForeignFileLeftAlone(t *testing.T) {
	t.Run("file", func(t *testing.T) {
		dir := t.TempDir()
		path := filepath.Join(dir, dirlock.FileName)
		testenv.Must(t, os.WriteFile(path, []byte("someone's notes\n"), 0o600), "write")
		if l, err := dirlock.Acquire(dir); !errors.Is(err, dirlock.ErrNotLockFile) {
			if l != nil {
				l.Release()
			}
			t.Fatalf("Acquire over a foreign file: %v, want ErrNotLockFile", err)
		}
		if b, _ := os.ReadFile(path); string(b) != "someone's notes\n" {
			t.Fatalf("the foreign file now holds %q", b)
		}
	})
	t.Run("symlink", func(t *testing.T) {
		dir := t.TempDir()
		target := filepath.Join(t.TempDir(), "precious")
		testenv.Must(t, os.WriteFile(target, []byte("precious\n"), 0o600), "write")
		testenv.Must(t, os.Symlink(target, filepath.Join(dir, dirlock.FileName)), "symlink")
		if l, err := dirlock.Acquire(dir); !errors.Is(err, dirlock.ErrNotLockFile) {
			if l != nil {
				l.Release()
			}
			t.Fatalf("Acquire over a symbolic link: %v, want ErrNotLockFile", err)
		}
		if b, _ := os.ReadFile(target); string(b) != "precious\n" {
			t.Fatalf("the link's target now holds %q", b)
		}
	})
}

// A lock file written by anyone who can write in the directory yields
// only a pid and a URL safe to print.
func FuzzParseOwner(f *testing.F) {
	head := "courier lock: the process below uses this directory; the lock is released when it ends\n"
	for _, s := range []string{"", head, head + "pid 42\nurl nats://127.0.0.1:4222\n", head + "pid -1\nurl \x1b]0;x\x07\n",
		head + "pid 007\n", "pid 1\n", head + "url a b\n", head + "url nats://h:1\u202e\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		o, err := dirlock.ParseOwner(b)
		if err != nil {
			if o != (dirlock.Owner{}) || !errors.Is(err, dirlock.ErrNotLockFile) {
				t.Fatalf("ParseOwner(%q) = %+v, %v", b, o, err)
			}
			return
		}
		if o.PID < 0 || escape.Line(o.URL) != o.URL || strings.ContainsAny(o.URL, " \t") || len(o.URL) > 512 {
			t.Fatalf("ParseOwner(%q) = %+v: not safe to print", b, o)
		}
	})
}
