package testenv_test

import (
	"strings"
	"testing"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/internal/testenv"
)

// CheckDelivery compares a stream with the order messages were written
// in: it passes a stream in write order (with a duplicate after the
// first copy), and fails one in which a key's messages are out of order
// or one is missing.
func TestCheckDelivery(t *testing.T) {
	a1 := courier.NewMessage("t", "a", "T", nil)
	a2 := courier.NewMessage("t", "a", "T", nil)
	a3 := courier.NewMessage("t", "a", "T", nil)
	b1 := courier.NewMessage("t", "b", "T", nil)
	written := []courier.Message{a1, b1, a2, a3}
	for name, c := range map[string]struct {
		got  []courier.Message
		want string // a failure that must be reported; "" for none
		dups int
	}{
		"in write order":               {[]courier.Message{a1, a2, b1, a3}, "", 0},
		"a duplicate after the first":  {[]courier.Message{a1, a2, a3, a2, b1}, "", 1},
		"a key out of order":           {[]courier.Message{a1, a3, a2, b1}, "key a out of order: message " + a3.ID.String() + " at stream position 1 after position 2", 0},
		"a duplicate does not hide it": {[]courier.Message{a2, a1, a2, a3, b1}, "key a out of order", 1},
		"one missing":                  {[]courier.Message{a1, a2, a3}, "never reached the broker", 0},
	} {
		t.Run(name, func(t *testing.T) {
			rec := testenv.Record(t)
			dups := testenv.CheckDelivery(rec, written, c.got)
			failures := strings.Join(rec.Failures(), "\n")
			switch {
			case c.want == "" && failures != "":
				t.Errorf("reported %q; want nothing", failures)
			case c.want != "" && !strings.Contains(failures, c.want):
				t.Errorf("reported %q; want %q", failures, c.want)
			}
			if dups != c.dups {
				t.Errorf("%d duplicates; want %d", dups, c.dups)
			}
		})
	}
}
