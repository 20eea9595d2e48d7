package timestamp_test

import (
	"testing"
	"time"

	"github.com/courier-go/courier/broker/internal/timestamp"
)

func TestParse(t *testing.T) {
	for s, want := range map[string]time.Time{
		"2026-11-30T12:00:00Z":                time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC),
		"2026-11-30T12:00:00.000000005+01:00": time.Date(2026, 11, 30, 11, 0, 0, 5, time.UTC),
		"2026-11-30T12:00:00-23:59":           time.Date(2026, 12, 1, 11, 59, 0, 0, time.UTC),
		"0000-01-01T00:00:00Z":                time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC),
	} {
		got, err := timestamp.Parse(s)
		if err != nil || !got.Equal(want) || got.Location() != time.UTC {
			t.Errorf("Parse(%q) = %v, %v; want %v", s, got, err, want)
		}
		if back, err := timestamp.Parse(timestamp.Format(got)); err != nil || !back.Equal(got) {
			t.Errorf("Format(%v) = %q does not parse back: %v", got, timestamp.Format(got), err)
		}
	}
	for _, s := range []string{"", "yesterday", "2026-11-30 12:00:00Z", "2026-11-30T12:00:00+24:00", "2026-11-30T12:00:00+23:60",
		"9999-12-31T23:59:59-23:59", "0000-01-01T00:00:00+01:00"} {
		if got, err := timestamp.Parse(s); err == nil {
			t.Errorf("Parse(%q) = %v; want an error", s, got)
		}
	}
}

// ParseRFC3339 keeps the offset and takes any year RFC 3339 writes.
func TestParseRFC3339(t *testing.T) {
	got, err := timestamp.ParseRFC3339("9999-12-31T23:59:59-23:59")
	if _, off := got.Zone(); err != nil || off != -(23*3600+59*60) || got.Year() != 9999 {
		t.Fatalf("ParseRFC3339 = %v, %v; want it in its own offset", got, err)
	}
	if _, err := timestamp.ParseRFC3339("2026-11-30T12:00:00+24:00"); err == nil {
		t.Fatal("offset +24:00 taken")
	}
}

// Parse never panics, and a time it reads is written and read again
// unchanged.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"2026-11-30T12:00:00Z", "2026-11-30T12:00:00.1-23:59", "9999-12-31T23:59:59-23:59", "+", "2026-11-30T12:00:00+99:99"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := timestamp.Parse(s)
		if err != nil {
			return
		}
		back, err := timestamp.Parse(timestamp.Format(got))
		if err != nil || !back.Equal(got) {
			t.Fatalf("%q reads as %v, written %q, read again %v, %v", s, got, timestamp.Format(got), back, err)
		}
	})
}
