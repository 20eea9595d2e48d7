package cdc

import (
	"testing"
	"time"
)

// The recorder writes a batch at once when it is full or already overdue,
// waits out the rest of recordEvery otherwise, looks again for unseen rows
// every unseenRetry, and sleeps until woken when nothing waits.
func TestRecorderWait(t *testing.T) {
	r := &Relay{cfg: Config{BatchSize: 3}}
	now := time.Now()
	for _, c := range []struct {
		name   string
		rc     *recorder
		atMost time.Duration // the wait is at most this (and more than 0 when positive)
		ok     bool
	}{
		{"nothing", &recorder{}, 0, false},
		{"full", &recorder{pub: make([]*item, 3), since: now}, 0, true},
		{"overdue", &recorder{pub: make([]*item, 1), since: now.Add(-time.Second)}, 0, true},
		{"fresh", &recorder{pub: make([]*item, 1), since: now}, recordEvery, true},
		{"unseen only", &recorder{unseen: make([]unseen, 1)}, unseenRetry, true},
		{"fresh and unseen", &recorder{dead: make([]*item, 1), since: now, unseen: make([]unseen, 1)}, unseenRetry, true},
	} {
		c.rc.r = r
		wait, ok := c.rc.wait()
		if ok != c.ok || wait > c.atMost || (c.atMost > 0 && wait <= 0) {
			t.Errorf("%s: wait %v, %v; want at most %v, %v", c.name, wait, ok, c.atMost, c.ok)
		}
	}
}
