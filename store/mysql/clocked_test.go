package mysql

import (
	"fmt"
	"testing"
	"time"
)

// With a clock, each UTC_TIMESTAMP(6) becomes a placeholder whose argument
// takes its place among the others; without, nothing changes.
func TestClocked(t *testing.T) {
	const q = "UPDATE t SET a = ?, until = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND WHERE b = ? AND until <= UTC_TIMESTAMP(6)"
	if got, args := clocked(nil, q, 1, 2, 3); got != q || len(args) != 3 {
		t.Fatalf("without a clock: %q %v", got, args)
	}
	at := time.Date(2030, 1, 2, 3, 4, 5, 6000, time.FixedZone("x", 3600))
	got, args := clocked(func() time.Time { return at }, q, 1, 2, 3)
	const now = "2030-01-02 02:04:05.000006"
	want := []any{1, now, 2, 3, now}
	if got != "UPDATE t SET a = ?, until = ? + INTERVAL ? MICROSECOND WHERE b = ? AND until <= ?" || fmt.Sprint(args) != fmt.Sprint(want) {
		t.Fatalf("with a clock: %q %v, want the arguments %v", got, args, want)
	}
}
