package contract

import (
	"fmt"
	"strings"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/internal/contract"
)

// The writers that cannot be given some messages, and why.
const (
	whyInvalidUTF8 = "a string of Python or JavaScript holds Unicode text, never bytes that are not UTF-8, and a PostgreSQL database in UTF-8 refuses them"
	whyNUL         = "PostgreSQL's text and jsonb cannot hold NUL"
)

var (
	notInInvalidUTF8 = []string{"node", "python", "postgres"}
	notInNUL         = []string{"postgres"}
)

// occurredAt is every vector's time but those that test it.
const occurredAt = "2026-03-01T09:30:00.123456Z"

// vector is one case: a message made by editing the base message, and the
// writers that cannot be given it.
type vector struct {
	name  string
	edit  func(m *contract.Message)
	notIn []string
	why   string
}

// base returns the message every vector edits, with the nth id.
func base(n int) contract.Message {
	return contract.Message{
		ID:          fmt.Sprintf("0195f3a2-7c00-7000-8000-%012x", n),
		Topic:       contract.Plain("orders"),
		Key:         contract.Plain("order-42"),
		Type:        contract.Plain("OrderPlaced"),
		Version:     1,
		ContentType: contract.Plain(courier.ContentTypeJSON),
		Payload:     contract.BytesOf([]byte(`{"order_id":"order-42","total":1999}`)),
		OccurredAt:  occurredAt,
	}
}

// Edits of the base message.
func topic(s string) func(*contract.Message) {
	return func(m *contract.Message) { m.Topic = contract.Plain(s) }
}
func key(s string) func(*contract.Message) {
	return func(m *contract.Message) { m.Key = contract.Plain(s) }
}
func typ(s string) func(*contract.Message) {
	return func(m *contract.Message) { m.Type = contract.Plain(s) }
}
func contentType(s string) func(*contract.Message) {
	return func(m *contract.Message) { m.ContentType = contract.Plain(s) }
}
func version(v int) func(*contract.Message) { return func(m *contract.Message) { m.Version = v } }
func header(name, value string) func(*contract.Message) {
	return headerText(name, contract.Plain(value))
}
func headerText(name string, value contract.Text) func(*contract.Message) {
	return func(m *contract.Message) {
		if m.Headers == nil {
			m.Headers = map[string]contract.Text{}
		}
		m.Headers[name] = value
	}
}
func set(field contract.Text, edit func(m *contract.Message, t contract.Text)) func(*contract.Message) {
	return func(m *contract.Message) { edit(m, field) }
}
func all(edits ...func(*contract.Message)) func(*contract.Message) {
	return func(m *contract.Message) {
		for _, e := range edits {
			e(m)
		}
	}
}
func setTopic(m *contract.Message, t contract.Text)       { m.Topic = t }
func setKey(m *contract.Message, t contract.Text)         { m.Key = t }
func setType(m *contract.Message, t contract.Text)        { m.Type = t }
func setContentType(m *contract.Message, t contract.Text) { m.ContentType = t }

// validVectors are messages every writer accepts.
var validVectors = []vector{
	{name: "json", edit: func(*contract.Message) {}},
	{name: "empty payload", edit: func(m *contract.Message) { m.Payload = contract.BytesOf(nil) }},
	{name: "binary payload", edit: func(m *contract.Message) {
		b := make([]byte, 256)
		for i := range b {
			b[i] = byte(i)
		}
		m.Payload = contract.BytesOf(b)
		m.ContentType = contract.Plain(courier.ContentTypeBinary)
	}},
	{name: "headers", edit: all(
		header("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
		header("tracestate", "congo=t61rcWkgMzE"),
		header("Courier-Correlation-Id", "0195f3a2-7c00-7000-8000-00000000c0de"),
		header("Courier-Causation-Id", "0195f3a2-7c00-7000-8000-00000000ca05"),
		header("x-tenant", "acme"),
	)},
	{name: "header names of every token character", edit: header("Aa0!#$%&'*+-.^_`|~z", "v")},
	{name: "header values empty, with tabs and unicode", edit: all(
		header("x-empty", ""), header("x-tab", "a\tb"), header("x-unicode", "Zoë ✓ 😀"))},
	{name: "header values Go's JSON escapes", edit: all(
		header("x-html", `<a href="/o?id=1&x=2">`), header("x-controls", "\b\f\x01\x1f\x7f\\"), header("x-separators", "\u2028\u2029"))},
	{name: "unicode", edit: all(
		topic("注文"), key("注文-42 with spaces"), typ("Bestellung.Eingegangen"),
		contentType("text/plain; charset=utf-8"),
		func(m *contract.Message) { m.Payload = contract.BytesOf([]byte("Grüße, 世界 😀")) })},
	{name: "key with white space", edit: key(" order 42\u00a0\u3000")},
	{name: "format characters are not white space", edit: all(topic("orders\u200b"), typ("\ufeffOrderPlaced"), key("\u200d"))},
	{name: "id of another UUID version", edit: func(m *contract.Message) { m.ID = "9b2e6f3c-1d4a-4e8b-9c7d-2f1a0b3c4d5e" }},
	{name: "version high", edit: version(1<<31 - 1)},
	{name: "topic at the limit", edit: set(contract.Repeat("t", courier.MaxNameBytes), setTopic)},
	{name: "key at the limit", edit: set(contract.Repeat("k", courier.MaxKeyBytes), setKey)},
	{name: "key of 1023 bytes in 3-byte characters", edit: set(contract.Repeat("注", courier.MaxKeyBytes/3), setKey)},
	{name: "type at the limit", edit: set(contract.Repeat("T", courier.MaxNameBytes), setType)},
	{name: "content type at the limit", edit: set(contract.Repeat("c", courier.MaxNameBytes), setContentType)},
	{name: "payload at the limit", edit: func(m *contract.Message) {
		m.Payload = contract.RepeatBytes("x", courier.DefaultMaxPayloadBytes)
		m.ContentType = contract.Plain(courier.ContentTypeBinary)
	}},
	{name: "headers at the limit", edit: headerText("x-big", contract.Repeat("v", courier.DefaultMaxHeaderBytes-len("x-big")))},
	{name: "key with every white space character", edit: key(" " + string(whiteSpace) + " ")},
	{name: "characters next to the refused ones", edit: all(
		topic("a\u00a1\u00ad\u180e\u200b\u2027\u202a\u205e\u2060\u3001"),
		typ("\u00a1\u00ad\u180e\u2060\ufeff"))},
	{name: "occurred at microsecond precision", edit: func(m *contract.Message) { m.OccurredAt = "1999-12-31T23:59:59.999999Z" }},
}

// whiteSpace are the characters of Unicode's White_Space that are not
// control characters: what a topic and a type must not hold.
var whiteSpace = []rune{0x20, 0xa0, 0x1680, 0x2000, 0x2001, 0x2002, 0x2003, 0x2004, 0x2005, 0x2006,
	0x2007, 0x2008, 0x2009, 0x200a, 0x2028, 0x2029, 0x202f, 0x205f, 0x3000}

// reservedHeaders are header names CheckHeaderName refuses although they
// are tokens: one of each reserved prefix and every reserved name, in
// varied case.
var reservedPrefixes = []string{
	"Courier-Attempt", "courier-correlation-id", "COURIER-CAUSATION-ID", "Nats-Rollup", "nats-msg-id",
	"Proxy-Authorization", "X-Forwarded-Host", "x-forwarded-proto", "Content-Type", "content-encoding",
	"Sec-Fetch-Mode", "Webhook-Signature", "webhook-id", "If-Match",
}

var reservedNames = []string{
	"Authorization", "WWW-Authenticate", "Cookie", "cookie2", "Set-Cookie", "Set-Cookie2",
	"Host", "Forwarded", "Via", "Max-Forwards", "Origin", "X-Real-IP",
	"X-HTTP-Method", "X-HTTP-Method-Override", "X-Method-Override", "X-Original-URL", "X-Rewrite-URL",
	"Connection", "Keep-Alive", "TE", "Trailer", "Transfer-Encoding", "Upgrade", "Expect", "Range",
	"Accept-Encoding",
}

// invalidVectors are messages every writer refuses.
func invalidVectors() []vector {
	vs := []vector{
		{name: "nil id", edit: func(m *contract.Message) { m.ID = "00000000-0000-0000-0000-000000000000" }},

		{name: "topic empty", edit: topic("")},
		{name: "topic with a space", edit: topic("or ders")},
		{name: "topic with a tab", edit: topic("or\tders")},
		{name: "topic with a no-break space", edit: topic("orders\u00a0")},
		{name: "topic with an ideographic space", edit: topic("注文\u3000")},
		{name: "topic with a line separator", edit: topic("orders\u2028")},
		{name: "topic with a next line", edit: topic("orders\u0085")},
		{name: "topic with DEL", edit: topic("orders\x7f")},
		{name: "topic with NUL", edit: topic("orders\x00"), notIn: notInNUL, why: whyNUL},
		{name: "topic over the limit", edit: set(contract.Repeat("t", courier.MaxNameBytes+1), setTopic)},
		{name: "topic over the limit in 2-byte characters", edit: set(contract.Repeat("é", 128), setTopic)},
		{name: "topic not UTF-8", edit: topic("orders\xff"), notIn: notInInvalidUTF8, why: whyInvalidUTF8},
		{name: "topic over the limit and not UTF-8", edit: set(contract.Repeat("\xff", courier.MaxNameBytes+1), setTopic), notIn: notInInvalidUTF8, why: whyInvalidUTF8},
		{name: "topic with a surrogate's bytes", edit: topic("orders\xed\xa0\x80"), notIn: notInInvalidUTF8, why: whyInvalidUTF8},

		{name: "key empty", edit: key("")},
		{name: "key with a tab", edit: key("order\t42")},
		{name: "key with a line feed", edit: key("order-42\n")},
		{name: "key with a next line", edit: key("order-42\u0085")},
		{name: "key with an escape", edit: key("\x1b[31morder")},
		{name: "key with NUL", edit: key("order\x0042"), notIn: notInNUL, why: whyNUL},
		{name: "key over the limit", edit: set(contract.Repeat("k", courier.MaxKeyBytes+1), setKey)},
		{name: "key over the limit in 3-byte characters", edit: set(contract.Repeat("注", courier.MaxKeyBytes/3+1), setKey)},
		{name: "key over the limit in 4-byte characters", edit: set(contract.Repeat("😀", courier.MaxKeyBytes/4+1), setKey)},
		{name: "key not UTF-8", edit: key("order-\xc3"), notIn: notInInvalidUTF8, why: whyInvalidUTF8},

		{name: "type empty", edit: typ("")},
		{name: "type with a space", edit: typ("Order Placed")},
		{name: "type with an em space", edit: typ("Order\u2003Placed")},
		{name: "type with a unit separator", edit: typ("Order\x1fPlaced")},
		{name: "type over the limit", edit: set(contract.Repeat("T", courier.MaxNameBytes+1), setType)},
		{name: "type not UTF-8", edit: typ("Order\x80"), notIn: notInInvalidUTF8, why: whyInvalidUTF8},

		{name: "version 0", edit: version(0)},
		{name: "version negative", edit: version(-3)},

		{name: "content type empty", edit: contentType("")},
		{name: "content type with a carriage return", edit: contentType("application/json\r")},
		{name: "content type over the limit", edit: set(contract.Repeat("c", courier.MaxNameBytes+1), setContentType)},

		{name: "payload over the limit", edit: func(m *contract.Message) {
			m.Payload = contract.RepeatBytes("x", courier.DefaultMaxPayloadBytes+1)
		}},

		{name: "occurred at not set", edit: func(m *contract.Message) { m.OccurredAt = "0001-01-01T00:00:00.000000Z" }},

		{name: "header name empty", edit: header("", "v")},
		{name: "header name with a space", edit: header("x-bad name", "v")},
		{name: "header name with a colon", edit: header("x-bad:", "v")},
		{name: "header name with a tab", edit: header("x-bad\tname", "v")},
		{name: "header name with a quote and a backslash", edit: header(`x-"bad"\name`, "v")},
		{name: "header name not ASCII", edit: header("x-naïve", "v")},
		{name: "header name with DEL", edit: header("x-bad\x7f", "v")},

		{name: "header value with a carriage return", edit: header("x-note", "a\rb")},
		{name: "header value with a line feed", edit: header("x-note", "a\r\nInjected: 1")},
		{name: "header value with NUL", edit: header("x-note", "a\x00b"), notIn: notInNUL, why: whyNUL},
		{name: "header value not UTF-8", edit: header("x-note", "a\xffb"), notIn: notInInvalidUTF8, why: whyInvalidUTF8},

		{name: "headers over the limit", edit: headerText("x-big", contract.Repeat("v", courier.DefaultMaxHeaderBytes-len("x-big")+1))},
		{name: "headers over the limit in many headers", edit: func(m *contract.Message) {
			for i := range 64 {
				headerText(fmt.Sprintf("x-h%02d", i), contract.Repeat("v", 1020))(m)
			}
		}},

		// Several problems: the first check in Validate's order names one.
		{name: "order: id before topic", edit: all(func(m *contract.Message) { m.ID = "00000000-0000-0000-0000-000000000000" }, topic(""), version(0))},
		{name: "order: topic before key", edit: all(topic(""), key(""))},
		{name: "order: key before type", edit: all(key("a\x01"), typ(""))},
		{name: "order: type before version", edit: all(typ("a b"), version(0))},
		{name: "order: version before content type", edit: all(version(0), contentType(""))},
		{name: "order: content type before payload", edit: all(contentType(""), func(m *contract.Message) {
			m.Payload = contract.RepeatBytes("x", courier.DefaultMaxPayloadBytes+1)
		})},
		{name: "order: payload before occurred at", edit: all(func(m *contract.Message) {
			m.Payload = contract.RepeatBytes("x", courier.DefaultMaxPayloadBytes+1)
			m.OccurredAt = "0001-01-01T00:00:00.000000Z"
		})},
		{name: "order: occurred at before headers", edit: all(func(m *contract.Message) { m.OccurredAt = "0001-01-01T00:00:00.000000Z" }, header("x bad", "v"))},
		{name: "order: a header before the total size", edit: all(
			headerText("x-big", contract.Repeat("v", courier.DefaultMaxHeaderBytes)), header("x-bad:", "v"))},
		{name: "order: headers by name, bytewise", edit: all(header("zz", "a\nb"), header("Zz bad", "v"), header("z z", "v"))},
		{name: "order: a header's name before its value", edit: all(header("b c", "v"), header("a b", "x\n"))},
		{name: "order: a header's value before the next name", edit: all(header("a", "x\n"), header("b c", "v"))},
		{name: "order: names by UTF-8 bytes, not UTF-16 units", edit: all(header("😀", "v"), header("Ａ", "v"))},
	}
	for _, name := range reservedPrefixes {
		vs = append(vs, vector{name: "header with a reserved prefix: " + name, edit: header(name, "v")})
	}
	for _, name := range reservedNames {
		vs = append(vs, vector{name: "header HTTP acts on: " + name, edit: header(name, "v")})
	}
	for _, r := range whiteSpace {
		vs = append(vs, vector{name: fmt.Sprintf("type with white space U+%04X", r), edit: typ("Order" + string(r) + "Placed")})
	}
	for _, r := range []rune{0x01, 0x1c, 0x1d, 0x1e, 0x80, 0x9f} {
		vs = append(vs, vector{name: fmt.Sprintf("key with a control character U+%04X", r), edit: key("order" + string(r) + "42")})
	}
	return vs
}

// batch is several messages written in one call: the ith (from 1) is
// edited by bad, or all are edited by bads in order when more are bad.
type batch struct {
	name string
	n    int
	bad  map[int]func(*contract.Message)
}

var batches = []batch{
	{name: "the second of three", n: 3, bad: map[int]func(*contract.Message){2: topic("")}},
	{name: "the first of two both invalid", n: 2, bad: map[int]func(*contract.Message){1: version(0), 2: topic("")}},
	{name: "the last of twelve", n: 12, bad: map[int]func(*contract.Message){12: header("Authorization", "Bearer x")}},
}

// messageOf returns the message of a vector, the nth.
func messageOf(n int, edit func(*contract.Message)) contract.Message {
	m := base(n)
	edit(&m)
	return m
}

// names checks that no two vectors share a name.
func names(vs ...[]vector) error {
	seen := map[string]bool{}
	for _, list := range vs {
		for _, v := range list {
			if seen[v.name] || strings.TrimSpace(v.name) != v.name || v.name == "" {
				return fmt.Errorf("vector name %q is empty, padded or used twice", v.name)
			}
			seen[v.name] = true
		}
	}
	return nil
}
