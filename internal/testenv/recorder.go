package testenv

import (
	"fmt"
	"sync"
	"testing"
)

// Recorder is a testing.TB that records the failures a check reports
// instead of failing the test, so that a test can prove its own check
// fails when it should. Fatal and Fatalf record and return: the check
// goes on.
type Recorder struct {
	testing.TB

	mu       sync.Mutex
	failures []string
}

// Record returns a Recorder that logs and skips through t.
func Record(t testing.TB) *Recorder { return &Recorder{TB: t} }

// Failures returns what the check reported, in order.
func (r *Recorder) Failures() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.failures...)
}

func (r *Recorder) record(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failures = append(r.failures, s)
}

// Helper does nothing: the lines reported are the check's.
func (r *Recorder) Helper() {}

// Error records its arguments as fmt.Sprint formats them.
func (r *Recorder) Error(args ...any) { r.record(fmt.Sprint(args...)) }

// Errorf records a failure.
func (r *Recorder) Errorf(format string, args ...any) { r.record(fmt.Sprintf(format, args...)) }

// Fatal records a failure and returns.
func (r *Recorder) Fatal(args ...any) { r.record(fmt.Sprint(args...)) }

// Fatalf records a failure and returns.
func (r *Recorder) Fatalf(format string, args ...any) { r.record(fmt.Sprintf(format, args...)) }

// Fail records a failure.
func (r *Recorder) Fail() { r.record("failed") }

// FailNow records a failure and returns.
func (r *Recorder) FailNow() { r.record("failed") }

// Failed reports whether a failure was recorded.
func (r *Recorder) Failed() bool { return len(r.Failures()) > 0 }
