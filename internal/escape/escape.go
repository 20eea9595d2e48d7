// Package escape makes text that came from outside safe to show on a
// terminal: dead letters' errors (a remote endpoint's answer), topics, keys,
// header values and payloads, whatever a database or a broker handed over.
//
// A terminal acts on control characters instead of showing them: ESC starts
// sequences that set the window's title, move the cursor, rewrite lines or,
// on some terminals, write files or answer back with typed input; a carriage
// return lets a later text overwrite an earlier one. Unicode's format
// characters (bidirectional overrides and isolates, zero-width characters)
// make a text read differently from what it holds: an error that says one
// thing and displays another. What the CLI prints of such text goes through
// this package, which writes each of those characters as a visible escape,
// such as \x1b or \u202e:
//
//   - C0 controls (U+0000 to U+001F) and DEL (U+007F): \t, \n and \r for
//     those three, \xHH for the others;
//   - C1 controls (U+0080 to U+009F), which some terminals read as ESC
//     sequences;
//   - format characters (Unicode category Cf: U+200B to U+200F, U+202A to
//     U+202E, U+2060 to U+2064, U+2066 to U+2069, U+FEFF, …) and the line
//     and paragraph separators U+2028 and U+2029: \uHHHH (\UHHHHHHHH beyond
//     U+FFFF);
//   - bytes that are not UTF-8: \xHH.
//
// Line escapes them all, for a value printed on one line. Text keeps
// newlines and tabs, for text shown as a block (a payload). JSON escapes
// them inside encoded JSON, where encoding/json leaves DEL, C1 controls and
// format characters as they are. Backslashes are not escaped: the result is
// for reading, not for decoding back.
package escape

import (
	"fmt"
	"io"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// Line returns s with every character a terminal would act on, or that makes
// text display other than it reads, written as a visible escape (see the
// package documentation). It returns s itself when nothing needs escaping.
func Line(s string) string { return escape(s, false) }

// Text is Line for text shown as a block of lines: it keeps newlines and
// tabs as they are, and escapes everything else Line does, carriage returns
// included.
func Text(s string) string { return escape(s, true) }

// Unsafe reports whether r is a character Line escapes (a valid rune; Line
// also escapes bytes that are not UTF-8).
func Unsafe(r rune) bool {
	switch {
	case r < 0x20, r == 0x7f, r >= 0x80 && r <= 0x9f:
		return true
	case r < 0xa0:
		return false
	}
	return unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp)
}

// escape is Line, or Text when keepLines.
func escape(s string, keepLines bool) string {
	first := firstUnsafe(s, keepLines)
	if first < 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	b.WriteString(s[:first])
	for i := first; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case keepLines && (r == '\n' || r == '\t'):
			b.WriteRune(r)
		case !Unsafe(r):
			b.WriteString(s[i : i+size])
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x80:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r <= 0xffff:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			fmt.Fprintf(&b, `\U%08x`, r)
		}
		i += size
	}
	return b.String()
}

// firstUnsafe returns the index of the first byte of s to escape, -1 when
// there is none.
func firstUnsafe(s string, keepLines bool) int {
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c < 0x7f {
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && size == 1) || (Unsafe(r) && !(keepLines && (r == '\n' || r == '\t'))) {
			return i
		}
		i += size
	}
	return -1
}

// JSON returns the encoded JSON b with the characters Line escapes that
// encoding/json leaves as they are (DEL, C1 controls, format characters)
// written as \u escapes, and bytes that are not UTF-8 as \ufffd. Those
// characters can only stand inside JSON strings, where a \u escape decodes
// to the same character: the JSON means what it meant. It returns b itself
// when nothing needs escaping.
func JSON(b []byte) []byte {
	var out []byte
	last := 0
	for i := 0; i < len(b); {
		c := b[i]
		if c < 0x7f {
			i++
			continue
		}
		r, size := utf8.DecodeRune(b[i:])
		bad := r == utf8.RuneError && size == 1
		if !bad && !Unsafe(r) {
			i += size
			continue
		}
		if out == nil {
			out = make([]byte, 0, len(b)+16)
		}
		out = append(out, b[last:i]...)
		switch {
		case bad:
			out = append(out, `\ufffd`...)
		case r > 0xffff:
			hi, lo := utf16.EncodeRune(r)
			out = fmt.Appendf(out, `\u%04x\u%04x`, hi, lo)
		default:
			out = fmt.Appendf(out, `\u%04x`, r)
		}
		i += size
		last = i
	}
	if out == nil {
		return b
	}
	return append(out, b[last:]...)
}

// JSONWriter returns a writer that writes to w what it is given, passed
// through JSON. Each Write must hold whole characters, as log/slog's JSON
// handler's do (one record per Write).
func JSONWriter(w io.Writer) io.Writer { return jsonWriter{w} }

type jsonWriter struct{ w io.Writer }

func (j jsonWriter) Write(p []byte) (int, error) {
	if _, err := j.w.Write(JSON(p)); err != nil {
		return 0, err
	}
	return len(p), nil
}
