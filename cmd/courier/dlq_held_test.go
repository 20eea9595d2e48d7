package main

import (
	"fmt"
	"strings"
	"testing"
)

// courier dlq list marks a dead letter that holds its key, and dlq show
// lists the messages held behind it, in order, and what replay and
// discard do to them, on every dialect; a key from the database is
// escaped for the terminal.
func TestDLQShowsHeldKeys(t *testing.T) {
	for name, open := range dlqDatabases(t) {
		t.Run(name, func(t *testing.T) {
			d := open(t)
			db := []string{"--database-url", d.url}
			cause := holdKey(t, d.url, "orders", "order-\x1b[2J", 3)
			code, out, errOut := runCLI(t, append([]string{"dlq", "list"}, db...)...)
			if code != 0 || !strings.Contains(out, fmt.Sprintf("relay:%d", cause)) || !strings.Contains(out, "(holds its key) rejected: order-") {
				t.Fatalf("dlq list: exit %d\n%s%s", code, out, errOut)
			}
			code, out, errOut = runCLI(t, append([]string{"dlq", "show", fmt.Sprintf("relay:%d", cause)}, db...)...)
			if code != 0 || strings.Contains(out, "\x1b") || !strings.Contains(out, `holds its key: 3 message(s) of key order-\x1b[2J wait behind it`) ||
				!strings.Contains(out, fmt.Sprintf("courier dlq replay relay:%d publishes it, then these in order", cause)) {
				t.Fatalf("dlq show: exit %d\n%s%s", code, out, errOut)
			}
			// The held messages, in order: T1, T2, T3 (holdKey's).
			i1, i2, i3 := strings.Index(out, " T1 "), strings.Index(out, " T2 "), strings.Index(out, " T3 ")
			if i1 < 0 || i2 < i1 || i3 < i2 {
				t.Fatalf("dlq show lists the held messages out of order (T1 at %d, T2 at %d, T3 at %d):\n%s", i1, i2, i3, out)
			}
		})
	}
}
