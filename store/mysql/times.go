package mysql

import (
	"fmt"
	"time"

	"github.com/courier-go/courier/store/internal/sqlstore"
)

// times reads and writes DATETIME(6) columns holding UTC.
var times = sqlstore.Times{
	Encode: func(t time.Time) any { return formatTime(t) },
	Decode: decodeTime,
}

// utcTime scans a DATETIME(6) column into *t.
func utcTime(t *time.Time) *sqlstore.Time { return times.Dest(t) }

// datetimeLayout is DATETIME(6) as text.
const datetimeLayout = "2006-01-02 15:04:05.000000"

// formatTime renders t in UTC for a DATETIME(6) column. Passing text rather
// than a time.Time keeps the value independent of the DSN's loc.
func formatTime(t time.Time) string { return t.UTC().Format(datetimeLayout) }

// decodeTime reads a DATETIME(6) column holding UTC, with or without
// parseTime in the DSN: the driver returns text, or a time.Time whose wall
// clock is the stored text read in the DSN's loc, which is re-read as UTC.
func decodeTime(v any) (time.Time, error) {
	switch x := v.(type) {
	case time.Time:
		return time.Date(x.Year(), x.Month(), x.Day(), x.Hour(), x.Minute(), x.Second(), x.Nanosecond(), time.UTC), nil
	case []byte:
		return parseTime(string(x))
	case string:
		return parseTime(x)
	default:
		return time.Time{}, fmt.Errorf("mysql: cannot read %T as a DATETIME", v)
	}
}

func parseTime(s string) (time.Time, error) {
	t, err := time.ParseInLocation("2006-01-02 15:04:05.999999", s, time.UTC)
	if err != nil {
		return t, fmt.Errorf("mysql: read DATETIME %q: %w", s, err)
	}
	return t, nil
}
