package nats

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// since moves only for what the limits removed: a full stream's removals,
// an age limit's, never a deletion's or a purge's.
func TestSinceOf(t *testing.T) {
	now := time.Date(2026, 12, 3, 18, 0, 0, 0, time.UTC)
	from := now.Add(-time.Hour)
	first, last := now.Add(-30*time.Minute), now.Add(-time.Minute)
	for _, c := range []struct {
		name string
		cfg  jetstream.StreamConfig
		st   jetstream.StreamState
		want time.Time
	}{
		{"all kept", jetstream.StreamConfig{MaxMsgs: 10}, jetstream.StreamState{FirstSeq: 1, FirstTime: first, Msgs: 10}, time.Time{}},
		{"full by count", jetstream.StreamConfig{MaxMsgs: 10}, jetstream.StreamState{FirstSeq: 5, FirstTime: first, Msgs: 10}, first},
		{"full by bytes", jetstream.StreamConfig{MaxBytes: 1000}, jetstream.StreamState{FirstSeq: 5, FirstTime: first, Msgs: 3, Bytes: 950}, first},
		{"a limit per subject", jetstream.StreamConfig{MaxMsgsPerSubject: 1}, jetstream.StreamState{FirstSeq: 5, FirstTime: first, Msgs: 3}, first},
		{"below its limits: a deletion", jetstream.StreamConfig{MaxMsgs: 10}, jetstream.StreamState{FirstSeq: 2, FirstTime: first, Msgs: 3}, time.Time{}},
		{"no limits: a purge", jetstream.StreamConfig{}, jetstream.StreamState{FirstSeq: 9, LastSeq: 8, LastTime: last}, time.Time{}},
		{"emptied by its age limit", jetstream.StreamConfig{MaxAge: 45 * time.Minute},
			jetstream.StreamState{FirstSeq: 9, LastSeq: 8, LastTime: now.Add(-50 * time.Minute)}, now.Add(-50*time.Minute + time.Nanosecond)},
		{"an age limit", jetstream.StreamConfig{MaxAge: 45 * time.Minute}, jetstream.StreamState{FirstSeq: 5, FirstTime: first, Msgs: 3}, now.Add(-45 * time.Minute)},
		{"an age limit, lagging", jetstream.StreamConfig{MaxAge: 15 * time.Minute}, jetstream.StreamState{FirstSeq: 5, FirstTime: first, Msgs: 3}, first},
		{"removed before the window", jetstream.StreamConfig{MaxMsgs: 3}, jetstream.StreamState{FirstSeq: 5, FirstTime: from.Add(-time.Minute), Msgs: 3}, time.Time{}},
	} {
		if got := sinceOf(c.cfg, c.st, from, now); !got.Equal(c.want) {
			t.Errorf("%s: since %s, want %s", c.name, got, c.want)
		}
	}
}
