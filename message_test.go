package courier_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/courier-go/courier"
)

type OrderPlaced struct {
	OrderID string `json:"order_id"`
	Total   int    `json:"total"`
}

type renamed struct{}

func (renamed) MessageType() string { return "shop.Renamed" }

func TestNewJSON(t *testing.T) {
	m, err := courier.NewJSON("orders", "order-1", &OrderPlaced{OrderID: "order-1", Total: 42})
	if err != nil {
		t.Fatal(err)
	}
	if m.Type != "OrderPlaced" || m.ContentType != courier.ContentTypeJSON || m.Version != 1 {
		t.Fatalf("type %q content type %q version %d", m.Type, m.ContentType, m.Version)
	}
	if m.ID.Version() != 7 {
		t.Fatalf("id %s is UUID version %d, want 7", m.ID, m.ID.Version())
	}
	var back OrderPlaced
	if err := m.DecodeJSON(&back); err != nil || back.Total != 42 {
		t.Fatalf("decode: %+v %v", back, err)
	}
	if err := m.Validate(courier.Limits{}); err != nil {
		t.Fatalf("valid message rejected: %v", err)
	}
	if courier.TypeName(renamed{}) != "shop.Renamed" {
		t.Fatal("Typed not honoured")
	}
	if _, err := courier.NewJSON("orders", "k", func() {}); err == nil {
		t.Fatal("encoding a func should fail")
	}
}

func TestIDsIncrease(t *testing.T) {
	prev := courier.NewMessage("t", "k", "T", nil).ID
	for range 1000 {
		id := courier.NewMessage("t", "k", "T", nil).ID
		if strings.Compare(id.String(), prev.String()) <= 0 {
			t.Fatalf("UUIDv7 ids not increasing: %s then %s", prev, id)
		}
		prev = id
	}
}

func TestCausedByCarriesCorrelationAndTrace(t *testing.T) {
	parent := courier.NewMessage("orders", "o-1", "OrderPlaced", nil,
		courier.WithHeader(courier.HeaderTraceParent, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"))
	child := courier.NewMessage("payments", "o-1", "ChargeRequested", nil, courier.CausedBy(parent))
	if child.Headers[courier.HeaderCausationID] != parent.ID.String() ||
		child.Headers[courier.HeaderCorrelationID] != parent.ID.String() ||
		child.Headers[courier.HeaderTraceParent] != parent.Headers[courier.HeaderTraceParent] {
		t.Fatalf("child headers %v", child.Headers)
	}
	grandchild := courier.NewMessage("shipping", "o-1", "Ship", nil, courier.CausedBy(child))
	if grandchild.Headers[courier.HeaderCorrelationID] != parent.ID.String() || grandchild.Headers[courier.HeaderCausationID] != child.ID.String() {
		t.Fatalf("grandchild headers %v", grandchild.Headers)
	}
	c := courier.HeaderCarrier{Msg: &grandchild}
	c.Set("tracestate", "x=1")
	if c.Get("tracestate") != "x=1" || len(c.Keys()) != 4 {
		t.Fatalf("carrier keys %v", c.Keys())
	}
}

func TestValidateNamesFieldAndFix(t *testing.T) {
	base := func() courier.Message { return courier.NewMessage("orders", "order-1", "OrderPlaced", []byte("{}")) }
	cases := []struct {
		name  string
		edit  func(*courier.Message)
		field string
	}{
		{"nil id", func(m *courier.Message) { m.ID = uuid.Nil }, "ID"},
		{"empty topic", func(m *courier.Message) { m.Topic = "" }, "Topic"},
		{"topic with space", func(m *courier.Message) { m.Topic = "or ders" }, "Topic"},
		{"empty key", func(m *courier.Message) { m.Key = "" }, "Key"},
		{"key with NUL", func(m *courier.Message) { m.Key = "a\x00b" }, "Key"},
		{"invalid utf-8 key", func(m *courier.Message) { m.Key = "\xff" }, "Key"},
		{"empty type", func(m *courier.Message) { m.Type = "" }, "Type"},
		{"long type", func(m *courier.Message) { m.Type = strings.Repeat("T", 256) }, "Type"},
		{"version 0", func(m *courier.Message) { m.Version = 0 }, "Version"},
		{"big payload", func(m *courier.Message) { m.Payload = make([]byte, courier.DefaultMaxPayloadBytes+1) }, "Payload"},
		{"no time", func(m *courier.Message) { m.OccurredAt = time.Time{} }, "OccurredAt"},
		{"bad header name", func(m *courier.Message) { m.SetHeader("bad name", "v") }, `Headers["bad name"]`},
		{"header line break", func(m *courier.Message) { m.SetHeader("x", "a\r\nInjected: 1") }, `Headers["x"]`},
		{"reserved header", func(m *courier.Message) { m.SetHeader("Nats-Rollup", "all") }, `Headers["Nats-Rollup"]`},
		{"credentials", func(m *courier.Message) { m.SetHeader("Authorization", "Bearer x") }, `Headers["Authorization"]`},
		{"routing", func(m *courier.Message) { m.SetHeader("x-forwarded-host", "evil.example") }, `Headers["x-forwarded-host"]`},
		{"body encoding", func(m *courier.Message) { m.SetHeader("Content-Encoding", "gzip") }, `Headers["Content-Encoding"]`},
		{"webhook signature", func(m *courier.Message) { m.SetHeader("Webhook-Signature", "v1,x") }, `Headers["Webhook-Signature"]`},
		{"big headers", func(m *courier.Message) { m.SetHeader("x", strings.Repeat("v", courier.DefaultMaxHeaderBytes)) }, "Headers"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := base()
			c.edit(&m)
			err := m.Validate(courier.Limits{})
			var ve *courier.ValidationError
			if !errors.As(err, &ve) || !errors.Is(err, courier.ErrInvalidMessage) {
				t.Fatalf("Validate = %v, want a ValidationError", err)
			}
			if ve.Field != c.field || ve.Fix == "" {
				t.Fatalf("field %q fix %q, want field %q and a fix", ve.Field, ve.Fix, c.field)
			}
		})
	}
	m := base()
	m.Payload = make([]byte, 10)
	if err := m.Validate(courier.Limits{MaxPayloadBytes: 5}); err == nil {
		t.Fatal("custom payload limit ignored")
	}
	m = base()
	m.Key = "注文-42 with spaces"
	if err := m.Validate(courier.Limits{}); err != nil {
		t.Fatalf("unicode key with spaces rejected: %v", err)
	}
}

// Validate never panics and names a field whenever it refuses.
func FuzzValidate(f *testing.F) {
	f.Add("orders", "order-1", "OrderPlaced", []byte("{}"), "traceparent", "00-abc")
	f.Add("", "\xff", "a b", []byte(nil), "bad name", "a\r\nb")
	f.Add("orders';DROP TABLE courier_outbox;--", "k' OR '1'='1", "T", []byte("'; DELETE"), "X-Sql", "1; DROP")
	f.Fuzz(func(t *testing.T, topic, key, typ string, payload []byte, hname, hvalue string) {
		m := courier.NewMessage(topic, key, typ, payload, courier.WithHeader(hname, hvalue))
		err := m.Validate(courier.Limits{})
		if err == nil {
			return
		}
		var ve *courier.ValidationError
		if !errors.As(err, &ve) || ve.Field == "" || ve.Problem == "" {
			t.Fatalf("Validate(%q, %q, %q) = %v: want a ValidationError naming the field", topic, key, typ, err)
		}
	})
}

// A header name is quoted the same way in every language: printable ASCII
// as it is but for the quote and the backslash, every other byte in hex.
func TestQuoteHeaderName(t *testing.T) {
	for name, want := range map[string]string{
		"":           `""`,
		"x-bad name": `"x-bad name"`,
		`a"b\c`:      `"a\"b\\c"`,
		"naïve\t":    `"na\xc3\xafve\x09"`,
		"\x7f\xff":   `"\x7f\xff"`,
	} {
		if got := courier.QuoteHeaderName(name); got != want {
			t.Errorf("QuoteHeaderName(%q) = %s, want %s", name, got, want)
		}
	}
}
