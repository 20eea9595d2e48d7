package failgroup_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/courier-go/courier/failgroup"
	"github.com/courier-go/courier/store"
)

func TestNormalize(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`subject "courier.orders": nats: maximum payload exceeded: the message's payload is 2000000 bytes and the server's max_payload is 1048576 bytes`,
			`subject "…": nats: maximum payload exceeded: the message's payload is # bytes and the server's max_payload is # bytes`},
		{"order 0190a1b2-7c3d-7e4f-8a9b-0c1d2e3f4a5b not found", "order # not found"},
		{"order ord_42 not found", "order # not found"},
		{"runtime error: index out of range [6] with length 0", "runtime error: index out of range [#] with length #"},
		{"POST https://hooks.example.com/in/77: 503 Service Unavailable", "POST https://hooks.example.com/in/#: # Service Unavailable"},
		{"key 'alice' is locked", "key '…' is locked"},
		{"quote `x y` and an \"unclosed one", "quote `…` and an \"unclosed one"},
		{"  many\n\tspaces  here ", "many spaces here"},
		{"", ""},
		{"日本語のエラー 12件", "日本語のエラー #"},
	} {
		if got := failgroup.Normalize(c.in); got != c.want {
			t.Errorf("Normalize(%q)\n got %q\nwant %q", c.in, got, c.want)
		}
	}
}

// Errors alike up to the preview a summary holds are one cause, so that a
// group counts the same from a summary and from a whole dead letter.
func TestNormalizeReadsThePreviewOnly(t *testing.T) {
	head := strings.Repeat("é", store.ErrorPreview)
	if a, b := failgroup.OfDeadLetter(head+" tail one"), failgroup.OfDeadLetter(head); a.ID() != b.ID() {
		t.Fatalf("an error and its preview are two causes: %q and %q", a.Pattern, b.Pattern)
	}
}

func TestCauses(t *testing.T) {
	a := failgroup.OfDeadLetter(`subject "courier.orders": nats: maximum payload exceeded: the message's payload is 2000000 bytes`)
	b := failgroup.OfDeadLetter(`subject "courier.refunds": nats: maximum payload exceeded: the message's payload is 3100000 bytes`)
	if a.ID() != b.ID() || a.Class != "nats" || a.Side != failgroup.Relay {
		t.Fatalf("two payloads too large: %+v (%s) and %+v (%s); want one cause of class nats", a, a.ID(), b, b.ID())
	}
	if c := failgroup.OfDeadLetter("subject \"courier.orders\": nats: no responders available for request"); c.ID() == a.ID() {
		t.Fatalf("another error has the same cause: %+v", c)
	}
	if len(a.ID()) != 12 || strings.Trim(a.ID(), "0123456789abcdef") != "" {
		t.Fatalf("ID %q: want 12 hexadecimal digits", a.ID())
	}

	p1 := failgroup.OfParked("billing", store.ReasonFailed, "handler panicked at payment.(*Service).charge (charge.go:42): card 4242 declined")
	p2 := failgroup.OfParked("billing", store.ReasonFailed, "handler panicked at payment.(*Service).charge (charge.go:42): card 5555 declined")
	if p1.ID() != p2.ID() || p1.Site != "payment.(*Service).charge (charge.go:42)" || p1.Pattern != "card # declined" || p1.Class != "failed: panic" {
		t.Fatalf("two panics at one site: %+v and %+v; want one cause with the site kept whole", p1, p2)
	}
	for what, other := range map[string]failgroup.Cause{
		"another line":     failgroup.OfParked("billing", store.ReasonFailed, "handler panicked at payment.(*Service).charge (charge.go:43): card 4242 declined"),
		"another consumer": failgroup.OfParked("refunds", store.ReasonFailed, "handler panicked at payment.(*Service).charge (charge.go:42): card 4242 declined"),
		"another reason":   failgroup.OfParked("billing", store.ReasonMalformed, "handler panicked at payment.(*Service).charge (charge.go:42): card 4242 declined"),
		"an error":         failgroup.OfParked("billing", store.ReasonFailed, "card 4242 declined"),
		"the relay side":   failgroup.OfDeadLetter("card 4242 declined"),
	} {
		if other.ID() == p1.ID() {
			t.Errorf("%s has the same cause: %+v", what, other)
		}
	}
	if e := failgroup.OfParked("billing", store.ReasonFailed, "card 4242 declined"); e.Site != "" || e.Class != store.ReasonFailed {
		t.Fatalf("an error without a panic: %+v", e)
	}
}

func FuzzNormalize(f *testing.F) {
	for _, s := range []string{`subject "a": x 12`, "handler panicked at f (a.go:1): 'q", "`", "\xff\xfe", "a'b'c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n := failgroup.Normalize(s)
		if again := failgroup.Normalize(n); again != n && utf8.RuneCountInString(n) <= store.ErrorPreview {
			t.Fatalf("Normalize is not stable: %q → %q → %q", s, n, again)
		}
		if strings.ContainsAny(n, "0123456789") {
			t.Fatalf("Normalize(%q) = %q holds a digit", s, n)
		}
		_ = failgroup.OfParked("c", "failed", s).ID()
	})
}
