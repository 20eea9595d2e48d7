package escape_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/courier-go/courier/internal/escape"
)

func TestLine(t *testing.T) {
	for in, want := range map[string]string{
		"":                                   "",
		"connection refused":                 "connection refused",
		"héllo wörld, 日本語, emoji 🚀":          "héllo wörld, 日本語, emoji 🚀",
		`C:\path and "quotes"`:               `C:\path and "quotes"`,
		"\x1b]0;pwn\a":                       `\x1b]0;pwn\x07`,
		"\x1b[2J\x1b[H":                      `\x1b[2J\x1b[H`,
		"ok\rFAKE":                           `ok\rFAKE`,
		"two\nlines\tand tab":                `two\nlines\tand tab`,
		"del\x7f":                            `del\x7f`,
		"c1 \u009b31m csi":                   `c1 \u009b31m csi`,
		"nel \u0085":                         `nel \u0085`,
		"abc\u202edcba.exe":                  `abc\u202edcba.exe`,
		"\u2066isolate\u2069":                `\u2066isolate\u2069`,
		"zero\u200bwidth\ufeff":              `zero\u200bwidth\ufeff`,
		"line\u2028sep\u2029":                `line\u2028sep\u2029`,
		"tag \U000e0041":                     `tag \U000e0041`,
		"bad \xff\xfe utf8":                  `bad \xff\xfe utf8`,
		"truncated \xe2\x80":                 `truncated \xe2\x80`,
		"\x00nul":                            `\x00nul`,
		"soft\u00adhyphen":                   `soft\u00adhyphen`,
		"arabic letter mark \u061c":          `arabic letter mark \u061c`,
		"HTTP 502: <html>\x1b[31mred</html>": `HTTP 502: <html>\x1b[31mred</html>`,
	} {
		if got := escape.Line(in); got != want {
			t.Errorf("Line(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestText(t *testing.T) {
	in := "{\n\t\"a\": \"\x1b]0;pwn\a\"\r\n}\u202e"
	want := "{\n\t\"a\": \"\\x1b]0;pwn\\x07\"\\r\n}\\u202e"
	if got := escape.Text(in); got != want {
		t.Errorf("Text(%q) = %q, want %q", in, got, want)
	}
}

// encoding/json leaves DEL, C1 controls and format characters in its
// output; JSON escapes them and the document decodes to the same value.
func TestJSON(t *testing.T) {
	v := map[string]string{"error": "\x1b]0;pwn\a \x7f \u009b \u202e \U000e0041 \u2028 ok é"}
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.ContainsRune(string(raw), 0x202e) || !strings.ContainsRune(string(raw), 0x9b) {
		t.Fatalf("encoding/json escaped what this test expects it to leave: %s", raw)
	}
	got := escape.JSON(raw)
	for _, r := range string(got) {
		if escape.Unsafe(r) {
			t.Fatalf("JSON left %U in %s", r, got)
		}
	}
	if !strings.Contains(string(got), `\u202e`) || !strings.Contains(string(got), `\udb40\udc41`) || !strings.Contains(string(got), "ok é") {
		t.Fatalf("JSON = %s", got)
	}
	var back map[string]string
	if err := json.Unmarshal(got, &back); err != nil || back["error"] != v["error"] {
		t.Fatalf("escaped JSON decodes to %q, %v; want %q", back["error"], err, v["error"])
	}
	if plain := []byte(`{"a":"b"}` + "\n"); &escape.JSON(plain)[0] != &plain[0] {
		t.Error("JSON copied a document that needed nothing")
	}
}

// slog's JSON handler, as the CLI's --log-format json uses it, writes one
// record per Write; through JSONWriter nothing a terminal acts on is left.
func TestJSONWriterWithSlog(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(escape.JSONWriter(&buf), nil))
	log.Warn("publish failed", "error", "HTTP 500: \u009b2J \u202eevil", "topic", "orders")
	out := buf.String()
	for _, r := range out {
		if r != '\n' && escape.Unsafe(r) {
			t.Fatalf("log line holds %U: %s", r, out)
		}
	}
	var rec map[string]any
	if err := json.Unmarshal([]byte(out), &rec); err != nil || rec["error"] != "HTTP 500: \u009b2J \u202eevil" {
		t.Fatalf("log line %s: %v", out, err)
	}
}

// slog's text handler, the CLI's default log format, quotes such values
// itself: nothing to add there.
func TestSlogTextHandlerQuotes(t *testing.T) {
	var buf bytes.Buffer
	slog.New(slog.NewTextHandler(&buf, nil)).Warn("x", "error", "\x1b]0;pwn\a \u009b \u202e")
	for _, r := range strings.TrimSuffix(buf.String(), "\n") {
		if escape.Unsafe(r) {
			t.Fatalf("text log holds %U: %q", r, buf.String())
		}
	}
}

// Whatever the input: Line's result holds nothing unsafe and is UTF-8, and
// is the input itself when that held nothing unsafe; Text differs only in
// keeping newlines and tabs; JSON of the input's encoding decodes back to
// it and holds nothing unsafe.
func FuzzLine(f *testing.F) {
	for _, s := range []string{"", "plain", "\x1b]0;pwn\a", "a\u202eb", "\xff", "\xe2\x80", "\u0085\u2028", "tab\tnl\ncr\r", "\U000e0041", "日本"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		line, text := escape.Line(s), escape.Text(s)
		for name, out := range map[string]string{"Line": line, "Text": text} {
			if !utf8.ValidString(out) {
				t.Fatalf("%s(%q) = %q: not UTF-8", name, s, out)
			}
			for _, r := range out {
				if escape.Unsafe(r) && !(name == "Text" && (r == '\n' || r == '\t')) {
					t.Fatalf("%s(%q) = %q holds %U", name, s, out, r)
				}
			}
		}
		clean := utf8.ValidString(s) && !strings.ContainsFunc(s, escape.Unsafe)
		if clean != (line == s) {
			t.Fatalf("Line(%q) = %q: changed %v, but the input was clean %v", s, line, line != s, clean)
		}
		if strings.ReplaceAll(strings.ReplaceAll(line, `\n`, "\n"), `\t`, "\t") != strings.ReplaceAll(strings.ReplaceAll(text, `\n`, "\n"), `\t`, "\t") {
			t.Fatalf("Line %q and Text %q differ by more than newlines and tabs", line, text)
		}
		if !utf8.ValidString(s) {
			return
		}
		raw, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		esc := escape.JSON(raw)
		var back string
		if err := json.Unmarshal(esc, &back); err != nil || back != s {
			t.Fatalf("JSON(%s) = %s decodes to %q, %v", raw, esc, back, err)
		}
		for _, r := range string(esc) {
			if escape.Unsafe(r) {
				t.Fatalf("JSON(%s) = %s holds %U", raw, esc, r)
			}
		}
	})
}
