package timestamp

import (
	"fmt"
	"time"
)

// Format writes t in UTC, RFC 3339 with nanoseconds (no trailing zeros).
func Format(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// Append appends Format(t) to b.
func Append(b []byte, t time.Time) []byte { return t.UTC().AppendFormat(b, time.RFC3339Nano) }

// ParseRFC3339 reads an RFC 3339 timestamp as written, in its own offset.
// It refuses an offset beyond ±23:59, which time.Parse takes and RFC 3339
// does not.
func ParseRFC3339(s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, err
	}
	if s[len(s)-1] != 'Z' {
		off := s[len(s)-6:] // ±hh:mm, the layout made sure of it
		if off[1:3] > "23" || off[4:6] > "59" {
			return time.Time{}, fmt.Errorf("offset %s is out of range (±23:59 at most)", off)
		}
	}
	return t, nil
}

// Parse reads the time of a message: an RFC 3339 timestamp (see
// ParseRFC3339), returned in UTC. It also refuses a time whose UTC falls
// outside the years 0000 to 9999, which Format could not write again as
// RFC 3339.
func Parse(s string) (time.Time, error) {
	t, err := ParseRFC3339(s)
	if err != nil {
		return time.Time{}, err
	}
	t = t.UTC()
	if y := t.Year(); y < 0 || y > 9999 {
		return time.Time{}, fmt.Errorf("%q is in the year %d in UTC, outside the years 0000 to 9999 that RFC 3339 writes", s, y)
	}
	return t, nil
}
