package sqlstore

import (
	"errors"
	"strings"
	"testing"
	"time"
)

var micros = Times{
	Encode: func(t time.Time) any { return t.UnixMicro() },
	Decode: func(v any) (time.Time, error) {
		us, ok := v.(int64)
		if !ok {
			return time.Time{}, errors.New("not an int64")
		}
		return time.UnixMicro(us).UTC(), nil
	},
}

func TestTimeScan(t *testing.T) {
	var at time.Time
	d := micros.Dest(&at)
	if err := d.Scan(int64(1_700_000_000_123_456)); err != nil || !d.Valid {
		t.Fatalf("Scan = %v, valid %v", err, d.Valid)
	}
	if want := time.UnixMicro(1_700_000_000_123_456).UTC(); !at.Equal(want) || at.Location() != time.UTC {
		t.Errorf("scanned %v, want %v", at, want)
	}
	if err := d.Scan(nil); err != nil || d.Valid {
		t.Errorf("Scan(nil) = %v, valid %v", err, d.Valid)
	}
	if err := d.Scan("text"); err == nil {
		t.Error("Scan of a value Decode refuses succeeded")
	}
}

// The statements that record "now" take it from the dialect: an SQL
// expression, or a placeholder whose argument follows the others.
func TestNow(t *testing.T) {
	server := Dialect{Now: "UTC_TIMESTAMP(6)"}
	if q := server.ParkSQL(); !strings.HasSuffix(q, "?, ?, ?, ?, ?, ?, ?, ?, ?, UTC_TIMESTAMP(6))") {
		t.Errorf("ParkSQL = %s", q)
	}
	if args := server.now(); args != nil {
		t.Errorf("now() = %v, want none", args)
	}
	client := Dialect{Now: "?", NowArgs: func() []any { return []any{int64(7)} }}
	if q := client.ParkSQL(); strings.Count(q, "?") != 12 {
		t.Errorf("ParkSQL = %s, want 12 placeholders", q)
	}
	if args := client.now(); len(args) != 1 || args[0] != int64(7) {
		t.Errorf("now() = %v", args)
	}
}
