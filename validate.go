package courier

import (
	"fmt"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"
)

// Limits bounds what Validate accepts. The zero value means the defaults.
type Limits struct {
	// MaxPayloadBytes caps the payload size. Default 1 MiB, NATS's default
	// max_payload; raise it only together with the broker's limit. A
	// broker's limit counts more than the payload (NATS's the headers,
	// Kafka's max.message.bytes the record's framing), so a payload right
	// at 1 MiB passes this check and is refused there for good, as a dead
	// letter: keep payloads well under it.
	MaxPayloadBytes int
	// MaxHeaderBytes caps the total size of header names and values.
	// Default 64 KiB.
	MaxHeaderBytes int
}

// Default limits.
const (
	DefaultMaxPayloadBytes = 1 << 20
	DefaultMaxHeaderBytes  = 64 << 10
)

// Fixed limits, the same for every writer: the byte lengths of a topic,
// type and content type (MaxNameBytes) and of a key (MaxKeyBytes).
const (
	MaxNameBytes = 255
	MaxKeyBytes  = 1024
)

func (l Limits) withDefaults() Limits {
	if l.MaxPayloadBytes <= 0 {
		l.MaxPayloadBytes = DefaultMaxPayloadBytes
	}
	if l.MaxHeaderBytes <= 0 {
		l.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	return l
}

// Validate checks that the message can be stored and published: id and
// occurred time set, topic, key and type non-empty valid UTF-8 without
// control characters (topic and type also without white space), version at
// least 1, payload and headers within limits, header names that
// [CheckHeaderName] accepts, and header values free of line breaks and NUL.
// It returns a [*ValidationError] that names the field and the fix.
//
// The checks run in a fixed order and the first that fails is reported, so
// a writer in any language can report the same one: ID, Topic, Key, Type,
// Version, ContentType, Payload, OccurredAt, then each header in the
// bytewise order of the names (its name, then its value), then the headers'
// total size. The texts are part of the outbox contract
// (docs/contract.md): a character is named by its code point (U+0009) and a
// header by its name quoted with [QuoteHeaderName].
func (m *Message) Validate(limits Limits) error {
	limits = limits.withDefaults()
	if m.ID == uuid.Nil {
		return &ValidationError{Field: "ID", Problem: "is the nil UUID", Fix: "build messages with courier.NewMessage or courier.NewJSON, which set a UUIDv7"}
	}
	if err := checkName("Topic", m.Topic, MaxNameBytes, false, `set a topic such as "orders"`); err != nil {
		return err
	}
	if err := checkName("Key", m.Key, MaxKeyBytes, true, `set the ordering key, usually the aggregate id such as "order-42"`); err != nil {
		return err
	}
	if err := checkName("Type", m.Type, MaxNameBytes, false, `set the message type such as "OrderPlaced"`); err != nil {
		return err
	}
	if m.Version < 1 {
		return &ValidationError{Field: "Version", Problem: fmt.Sprintf("is %d", m.Version), Fix: "use 1 or more (courier.WithVersion)"}
	}
	if err := checkName("ContentType", m.ContentType, MaxNameBytes, true, `set a media type such as "application/json"`); err != nil {
		return err
	}
	if len(m.Payload) > limits.MaxPayloadBytes {
		return &ValidationError{Field: "Payload", Problem: fmt.Sprintf("is %d bytes, over the limit of %d", len(m.Payload), limits.MaxPayloadBytes),
			Fix: "store large data elsewhere and send a reference, or raise the limit together with the broker's"}
	}
	if m.OccurredAt.IsZero() {
		return &ValidationError{Field: "OccurredAt", Problem: "is not set", Fix: "set when the event happened (courier.WithOccurredAt)"}
	}
	names := make([]string, 0, len(m.Headers))
	size := 0
	for name, value := range m.Headers {
		names = append(names, name)
		size += len(name) + len(value)
	}
	slices.Sort(names) // bytewise, so every language names the same header
	for _, name := range names {
		if err := CheckHeaderName(name); err != nil {
			return err
		}
		if value := m.Headers[name]; !utf8.ValidString(value) || strings.ContainsAny(value, "\r\n\x00") {
			return &ValidationError{Field: headerField(name), Problem: "has a line break, NUL or invalid UTF-8 in its value",
				Fix: "encode the value (for example base64) or remove the offending characters"}
		}
	}
	if size > limits.MaxHeaderBytes {
		return &ValidationError{Field: "Headers", Problem: fmt.Sprintf("total %d bytes, over the limit of %d", size, limits.MaxHeaderBytes),
			Fix: "move bulky metadata into the payload"}
	}
	return nil
}

// checkName checks a topic, key, type or content type: set, at most
// maxBytes long, UTF-8, without control characters (Unicode category Cc)
// and, unless spaces, without white space (Unicode's White_Space). A
// character that is both, such as a tab, is named a control character.
func checkName(field, s string, maxBytes int, spaces bool, fix string) error {
	switch {
	case s == "":
		return &ValidationError{Field: field, Problem: "is empty", Fix: fix}
	case len(s) > maxBytes:
		return &ValidationError{Field: field, Problem: fmt.Sprintf("is %d bytes, over the limit of %d", len(s), maxBytes), Fix: "shorten it"}
	case !utf8.ValidString(s):
		return &ValidationError{Field: field, Problem: "is not valid UTF-8", Fix: "use UTF-8 text"}
	}
	for _, r := range s {
		what := ""
		switch {
		case unicode.IsControl(r):
			what = "a control character"
		case !spaces && unicode.IsSpace(r):
			what = "white space"
		default:
			continue
		}
		return &ValidationError{Field: field, Problem: fmt.Sprintf("contains %s (U+%04X)", what, r), Fix: "remove it"}
	}
	return nil
}

// headerField is the ValidationError field naming the header name.
func headerField(name string) string { return "Headers[" + QuoteHeaderName(name) + "]" }

// QuoteHeaderName quotes a header name the way validation errors name it,
// a way every language can reproduce: in double quotes, the bytes 0x20 to
// 0x7E as they are but for `"` and `\`, written `\"` and `\\`, and every
// other byte of the name written `\xHH` (lower-case hex), so
// QuoteHeaderName("naïve\t") is "na\xc3\xafve\x09" in quotes.
func QuoteHeaderName(name string) string {
	var b strings.Builder
	b.Grow(len(name) + 2)
	b.WriteByte('"')
	for i := 0; i < len(name); i++ {
		switch c := name[i]; {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c >= 0x20 && c <= 0x7e:
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, `\x%02x`, c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// CheckHeaderName returns a [*ValidationError] when name cannot be a
// message header's name: it is not an HTTP token (RFC 9110), the form
// header names take on every broker; or a transport acts on it. Courier
// writes Courier-* headers itself (but Courier-Correlation-Id and
// Courier-Causation-Id, which are the message's), NATS acts on Nats-*
// (Nats-Rollup purges a stream), and HTTP clients, servers and proxies act
// on the names that carry credentials (Authorization, Cookie, Proxy-*), route
// (Host, Forwarded, X-Forwarded-*, X-Real-Ip, method overrides), frame or
// encode the body (Content-*, Transfer-Encoding, Connection, Upgrade and
// the other hop-by-hop names), or sign a webhook (Webhook-*), so a message
// header sent as an HTTP header by the webhook publisher must not be one of
// them. Names are compared without regard to case.
func CheckHeaderName(name string) error {
	if !isToken(name) {
		return &ValidationError{Field: headerField(name), Problem: "is not a valid header name",
			Fix: "use letters, digits and !#$%&'*+-.^_`|~ only, no spaces or colons"}
	}
	if name == HeaderCorrelationID || name == HeaderCausationID {
		return nil
	}
	lower := strings.ToLower(name)
	if strings.HasPrefix(lower, "courier-") || strings.HasPrefix(lower, "nats-") {
		return &ValidationError{Field: headerField(name), Problem: "uses a reserved prefix (Courier-, Nats-)",
			Fix: "choose another name; Courier sets these headers itself and brokers act on them"}
	}
	if httpReserved(lower) {
		return &ValidationError{Field: headerField(name), Problem: "is a name HTTP acts on (credentials, routing, framing or a webhook signature)",
			Fix: "choose another name; sent as a webhook's request header it would change how the request is authenticated, routed or read"}
	}
	return nil
}

// httpReserved reports whether lower, a header name in lower case, is one
// HTTP clients, servers or proxies act on.
func httpReserved(lower string) bool {
	for _, prefix := range []string{"proxy-", "x-forwarded-", "content-", "sec-", "webhook-", "if-"} {
		if strings.HasPrefix(lower, prefix) {
			return true
		}
	}
	switch lower {
	case "authorization", "www-authenticate", "cookie", "cookie2", "set-cookie", "set-cookie2",
		"host", "forwarded", "via", "max-forwards", "origin", "x-real-ip",
		"x-http-method", "x-http-method-override", "x-method-override", "x-original-url", "x-rewrite-url",
		"connection", "keep-alive", "te", "trailer", "transfer-encoding", "upgrade", "expect", "range",
		"accept-encoding":
		return true
	}
	return false
}

// isToken reports whether s is an HTTP token (RFC 9110), the form header
// names must take on every broker Courier supports.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' {
			continue
		}
		if !strings.ContainsRune("!#$%&'*+-.^_`|~", rune(c)) {
			return false
		}
	}
	return true
}
