// Package testwait holds the small waits and failure helpers that tests
// share: Must, Eventually, WhileProgressing, the Lazy failure argument and
// the output Buffer. It imports nothing of Courier, so that non-test
// packages that tests use (broker/brokertest's conformance suite) can use
// it as internal/testenv does.
package testwait

import (
	"bytes"
	"fmt"
	"sync"
	"testing"
	"time"
)

// Must fails the test on a non-nil error.
func Must(t testing.TB, err error, what string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// Eventually polls cond every 10ms until it is true or timeout passes, then
// fails the test with msg.
func Eventually(t testing.TB, timeout time.Duration, cond func() bool, msg string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %s: "+msg, append([]any{timeout}, args...)...)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// WhileProgressing polls check every 10ms until it reports done. It waits
// for as long as the state check reports keeps changing, however slow the
// machine, and fails the test with msg once the state has stayed the same
// for stall: the work stopped, rather than took long. The failure shows
// the state it stopped at (msg's own arguments are best Lazy, so that they
// too show what was true then).
func WhileProgressing(t testing.TB, stall time.Duration, check func() (done bool, state any), msg string, args ...any) {
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

// Lazy formats the value fn returns when it is printed, so a failure message
// shows the state at the time of failure, not when the check began.
type Lazy func() any

// String implements fmt.Stringer.
func (l Lazy) String() string { return fmt.Sprintf("%+v", l()) }

// Format formats the value fn returns with the verb and flags it is
// printed with, so that %d or %5.1f format the value, not the function;
// %v shows a struct's field names, as String does.
func (l Lazy) Format(f fmt.State, verb rune) {
	if verb == 'v' && !f.Flag('#') {
		fmt.Fprint(f, l.String())
		return
	}
	fmt.Fprintf(f, fmt.FormatString(f, verb), l())
}

// Buffer is a bytes.Buffer that a process (exec.Cmd's Stdout or Stderr)
// writes to while the test reads it.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write implements io.Writer.
func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
