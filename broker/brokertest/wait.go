package brokertest

import (
	"bytes"
	"fmt"
	"sync"
	"testing"
	"time"
)

// must fails the test on a non-nil error.
func must(t testing.TB, err error, what string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// whileProgressing polls check every 10ms until it reports done. It waits
// for as long as the state check reports keeps changing, however slow the
// machine, and fails the test with msg once the state has stayed the same
// for stall: the work stopped, rather than took long. The failure shows
// the state it stopped at (msg's own arguments are best lazy, so that they
// too show what was true then).
func whileProgressing(t testing.TB, stall time.Duration, check func() (done bool, state any), msg string, args ...any) {
	t.Helper()
	done, last := check()
	changed := time.Now()
	for !done {
		if time.Since(changed) > stall {
			t.Fatalf("no progress for %s (stuck at %v): "+msg, append([]any{stall, last}, args...)...)
		}
		time.Sleep(10 * time.Millisecond)
		var state any
		if done, state = check(); state != last {
			last, changed = state, time.Now()
		}
	}
}

// lazy formats the value fn returns when it is printed, so a failure
// message shows the state at the time of failure, not when the check
// began.
type lazy func() any

// String implements fmt.Stringer.
func (l lazy) String() string { return fmt.Sprintf("%+v", l()) }

// Format formats the value fn returns with the verb and flags it is
// printed with, so that %d formats the value, not the function; %v shows a
// struct's field names, as String does.
func (l lazy) Format(f fmt.State, verb rune) {
	if verb == 'v' && !f.Flag('#') {
		fmt.Fprint(f, l.String())
		return
	}
	fmt.Fprintf(f, fmt.FormatString(f, verb), l())
}

// outputBuffer is a bytes.Buffer that a process (exec.Cmd's Stderr) writes
// to while the test reads it.
type outputBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write implements io.Writer.
func (s *outputBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *outputBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
