package failgroup

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/courier-go/courier/store"
)

// The sides a failure comes from, as dead-letter references name them
// (relay:ID, consumer:ID).
const (
	// Relay: a relay-side dead letter, which the broker kept rejecting.
	Relay = "relay"
	// Consumer: a consume-side dead letter, which a consumer parked.
	Consumer = "consumer"
)

// panicPrefix starts the error of a handler run that panicked
// (inbox.PanicError), which names the panic's site: "handler panicked at
// SITE: VALUE".
const panicPrefix = "handler panicked at "

// Cause is what a failure's fingerprint is made of: the failures with the
// same Cause form one group.
type Cause struct {
	// Side is Relay or Consumer.
	Side string `json:"side"`
	// Consumer is, consumer side, the consumer (one handler) that parked
	// the message; empty relay side.
	Consumer string `json:"consumer,omitempty"`
	// Reason is, consumer side, why it was parked: store.ReasonFailed,
	// store.ReasonMalformed or store.ReasonNewerVersion; empty relay side.
	Reason string `json:"reason,omitempty"`
	// Site is, when the handler panicked, where: the function and the
	// file and line of the frame that panicked.
	Site string `json:"site,omitempty"`
	// Class is the kind of error, for people: consume side the reason
	// (with "panic" when the handler panicked), relay side the first part
	// of the error that holds no data (such as "nats").
	Class string `json:"class"`
	// Pattern is the error without what differs between messages: each
	// word holding a digit (ids, numbers, sizes, UUIDs) is "#" and each
	// quoted text "…".
	Pattern string `json:"pattern"`
}

// OfDeadLetter is the cause of a relay-side dead letter, from its last
// error (its first store.ErrorPreview characters, as a summary holds).
func OfDeadLetter(lastError string) Cause {
	p := Normalize(lastError)
	return Cause{Side: Relay, Class: classOf(p), Pattern: p}
}

// OfParked is the cause of a message consumer parked for reason, from its
// last error (its first store.ErrorPreview characters, as a summary holds).
func OfParked(consumer, reason, lastError string) Cause {
	c := Cause{Side: Consumer, Consumer: consumer, Reason: reason, Class: reason}
	msg := preview(lastError)
	if rest, ok := strings.CutPrefix(msg, panicPrefix); ok {
		if i := strings.Index(rest, "): "); i >= 0 {
			c.Site, msg = rest[:i+1], rest[i+3:]
			c.Class = reason + ": panic"
		}
	}
	c.Pattern = Normalize(msg)
	return c
}

// ID is the cause's fingerprint: 12 hexadecimal digits, the same in every
// process and every release that groups alike, used by the dashboard's
// links and by courier dlq --group.
func (c Cause) ID() string {
	sum := sha256.Sum256([]byte(strings.Join([]string{c.Side, c.Consumer, c.Reason, c.Site, c.Pattern}, "\x00")))
	return hex.EncodeToString(sum[:6])
}

// preview is the part of an error a summary holds.
func preview(s string) string {
	if utf8.RuneCountInString(s) <= store.ErrorPreview {
		return s
	}
	return string([]rune(s)[:store.ErrorPreview])
}

// Normalize returns an error's first store.ErrorPreview characters without
// what differs between messages failing alike: each word (a run of
// letters, digits, '_' and '-') that holds a digit becomes "#", each text
// in quotes ("…", '…' or `…`) becomes "…" in its quotes, each run of
// white space one space, and each other control character (an escape
// sequence's start) or invalid byte U+FFFD.
func Normalize(msg string) string {
	msg = preview(msg)
	var b strings.Builder
	for i := 0; i < len(msg); {
		r, n := utf8.DecodeRuneInString(msg[i:])
		switch {
		case r == '"' || r == '\'' || r == '`':
			if end := strings.IndexRune(msg[i+n:], r); end >= 0 && quoted(r, msg, i) {
				b.WriteRune(r)
				b.WriteString("…")
				b.WriteRune(r)
				i += n + end + n
				continue
			}
			b.WriteRune(r)
			i += n
		case word(r):
			j := i
			digit := false
			for j < len(msg) {
				r, n := utf8.DecodeRuneInString(msg[j:])
				if !word(r) {
					break
				}
				digit = digit || unicode.IsDigit(r)
				j += n
			}
			if digit {
				b.WriteByte('#')
			} else {
				b.WriteString(msg[i:j])
			}
			i = j
		case unicode.IsSpace(r):
			for i < len(msg) {
				r, n := utf8.DecodeRuneInString(msg[i:])
				if !unicode.IsSpace(r) {
					break
				}
				i += n
			}
			b.WriteByte(' ')
		case unicode.IsControl(r) || r == utf8.RuneError:
			b.WriteRune(utf8.RuneError) // an escape sequence or a stray byte: shown, never sent
			i += n
		default:
			b.WriteRune(r)
			i += n
		}
	}
	return strings.TrimSpace(b.String())
}

// quoted reports whether the quote q at msg[i] opens a quoted text: a
// double quote or a backquote always does; a single quote only where a
// word does not go on through it (so "message's" keeps its apostrophe,
// and so does "#'s" once normalised).
func quoted(q rune, msg string, i int) bool {
	if q != '\'' || i == 0 {
		return true
	}
	prev, _ := utf8.DecodeLastRuneInString(msg[:i])
	return !word(prev) && prev != '#' // a word that Normalize replaced
}

// word reports whether r belongs to a word.
func word(r rune) bool {
	return unicode.IsLetter(r) || unicode.IsDigit(r) || r == '_' || r == '-'
}

// classOf is the first part of a normalised error, its parts separated by
// ": ", that holds no data ("#" or "…"): "nats" in
// `subject "…": nats: maximum payload exceeded`. The pattern itself when
// every part holds data.
func classOf(pattern string) string {
	for part := range strings.SplitSeq(pattern, ": ") {
		if part != "" && !strings.ContainsAny(part, "#…") {
			return part
		}
	}
	return pattern
}
