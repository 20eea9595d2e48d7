package idempotency

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func TestParseKey(t *testing.T) {
	good := map[string]string{
		`"8e03978e-40d5-43e8-bc93-6894a57f9324"`: "8e03978e-40d5-43e8-bc93-6894a57f9324",
		`8e03978e-40d5-43e8-bc93-6894a57f9324`:   "8e03978e-40d5-43e8-bc93-6894a57f9324",
		`  "a b"  `:                              "a b",
		`"say \"hi\" \\o/"`:                      `say "hi" \o/`,
		`order:42/attempt`:                       "order:42/attempt",
		`"` + strings.Repeat("k", 255) + `"`:     strings.Repeat("k", 255),
	}
	for in, want := range good {
		got, err := ParseKey(in, MaxKeyLength)
		if err != nil || got != want {
			t.Errorf("ParseKey(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	bad := []string{"", "   ", `""`, `"unterminated`, `"a"b`, `"bad \n escape"`, `"tab	inside"`, "ünïcode",
		`a b`, `a"b`, `a\b`, strings.Repeat("k", 256), `"` + strings.Repeat("k", 256) + `"`, `"\x"`}
	for _, in := range bad {
		if got, err := ParseKey(in, MaxKeyLength); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("ParseKey(%q) = %q, %v; want ErrInvalidKey", in, got, err)
		}
	}
}

func FuzzParseKey(f *testing.F) {
	for _, s := range []string{`"abc"`, `abc`, `"a\"b"`, ``, `"`, `"\`, `"a"b`, strings.Repeat("x", 300)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		key, err := ParseKey(in, MaxKeyLength)
		if err != nil {
			if !errors.Is(err, ErrInvalidKey) {
				t.Fatalf("error %v does not wrap ErrInvalidKey", err)
			}
			return
		}
		if key == "" || len(key) > MaxKeyLength {
			t.Fatalf("accepted key of %d bytes from %q", len(key), in)
		}
		for i := 0; i < len(key); i++ {
			if key[i] < 0x20 || key[i] > 0x7e {
				t.Fatalf("accepted non-printable byte in %q", key)
			}
		}
		// Quoting the key as an sf-string parses back to it.
		q := `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(key) + `"`
		if back, err := ParseKey(q, MaxKeyLength); err != nil || back != key {
			t.Fatalf("round trip of %q via %q: %q, %v", key, q, back, err)
		}
	})
}

func FuzzFingerprint(f *testing.F) {
	f.Add("POST", "/orders", []byte(`{"a":1}`), "POST", "/orders", []byte(`{"a":2}`))
	f.Add("POST", "/a", []byte("b"), "POST", "/ab", []byte(""))
	f.Fuzz(func(t *testing.T, m1, p1 string, b1 []byte, m2, p2 string, b2 []byte) {
		f1, f2 := Fingerprint(m1, p1, b1), Fingerprint(m2, p2, b2)
		if len(f1) != 32 || !bytes.Equal(f1, Fingerprint(m1, p1, b1)) {
			t.Fatal("fingerprint not a stable SHA-256")
		}
		same := m1 == m2 && p1 == p2 && bytes.Equal(b1, b2)
		if same != bytes.Equal(f1, f2) {
			t.Fatalf("requests (%q %q %q) and (%q %q %q): same=%v but fingerprints equal=%v", m1, p1, b1, m2, p2, b2, same, !same)
		}
	})
}
