package wire_test

import (
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker/cloudevents"
	"github.com/courier-go/courier/broker/wire"
)

var bindings = []wire.Binding{wire.NATS, wire.Kafka, wire.AMQP}

// encode returns m's headers as Encode writes them, failing the test when
// a name comes twice.
func encode(t testing.TB, b wire.Binding, m *courier.Message, ce *cloudevents.Config) map[string][]string {
	t.Helper()
	h := map[string][]string{}
	b.Encode(m, ce, func(name, value string) {
		if _, dup := h[name]; dup {
			t.Fatalf("%v: header %q written twice", b, name)
		}
		h[name] = []string{value}
	})
	return h
}

// same reports how got, a decoded message, differs from want ("" when it
// does not); times compare as instants.
func same(got, want courier.Message) string {
	if got.ID != want.ID || got.Topic != want.Topic || got.Key != want.Key || got.Type != want.Type || got.Version != want.Version ||
		got.ContentType != want.ContentType || string(got.Payload) != string(want.Payload) || !got.OccurredAt.Equal(want.OccurredAt) ||
		!maps.Equal(got.Headers, want.Headers) {
		return "decoded " + dump(got) + ", want " + dump(want)
	}
	return ""
}

func dump(m courier.Message) string {
	var b strings.Builder
	b.WriteString(m.ID.String() + " " + m.Key + " " + m.Type + " " + m.ContentType + " " + m.OccurredAt.String())
	for k, v := range m.Headers {
		b.WriteString(" " + k + "=" + v)
	}
	return b.String()
}

func sample() courier.Message {
	m := courier.NewMessage("", "注文-42", "OrderPlaced", []byte(`{"total":7}`), courier.WithContentType(courier.ContentTypeJSON),
		courier.WithVersion(3), courier.WithCorrelationID("c-1"), courier.WithOccurredAt(time.Date(2026, 11, 30, 12, 0, 0, 5, time.UTC)))
	m.SetHeader(courier.HeaderTraceParent, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	return m
}

// Every binding reads back what it writes, with CloudEvents on or off.
func TestRoundTrip(t *testing.T) {
	for _, b := range bindings {
		for _, ce := range []*cloudevents.Config{nil, {Source: "/shop"}} {
			m := sample()
			h := encode(t, b, &m, ce)
			got, err := b.Decode(h, m.Payload)
			if err != nil {
				t.Fatalf("%v, CloudEvents %v: %v", b, ce != nil, err)
			}
			if d := same(got, m); d != "" {
				t.Errorf("%v, CloudEvents %v: %s", b, ce != nil, d)
			}
		}
	}
}

// Where each binding carries the id, the type and the content type.
func TestBindingNames(t *testing.T) {
	if wire.HeaderNATSMsgID != jetstream.MsgIDHeader {
		t.Fatalf("HeaderNATSMsgID %q, JetStream's %q", wire.HeaderNATSMsgID, jetstream.MsgIDHeader)
	}
	m := sample()
	for b, want := range map[wire.Binding][3]string{
		wire.NATS:  {"Nats-Msg-Id", "Courier-Type", "content-type"},
		wire.Kafka: {"Courier-Id", "Courier-Type", "content-type"},
		wire.AMQP:  {"Message-Id", "Type", ""},
		wire.HTTP:  {"webhook-id", "Courier-Type", ""},
	} {
		h := encode(t, b, &m, &cloudevents.Config{Source: "/shop"})
		if h[want[0]][0] != m.ID.String() || h[want[1]][0] != m.Type || h[wire.HeaderContentType][0] != m.ContentType {
			t.Errorf("%v: headers %v, want the id in %s, the type in %s", b, h, want[0], want[1])
		}
		if b.IDHeader() != want[0] || b.TypeHeader() != want[1] {
			t.Errorf("%v: IDHeader %q TypeHeader %q", b, b.IDHeader(), b.TypeHeader())
		}
		if want[2] != "" && h[want[2]][0] != m.ContentType {
			t.Errorf("%v: datacontenttype not in %s: %v", b, want[2], h)
		}
		prefix, _ := b.Prefixes()
		if h[prefix+"subject"][0] != m.Key || h[prefix+"specversion"][0] != "1.0" {
			t.Errorf("%v: CloudEvents attributes missing with prefix %q: %v", b, prefix, h)
		}
	}
}

// A message's own header named like a field Courier writes, or like a
// CloudEvents attribute the message carries, is not written: Courier's
// field or the attribute stands.
func TestOwnHeadersDoNotShadow(t *testing.T) {
	for _, b := range bindings {
		m := sample()
		prefix, _ := b.Prefixes()
		m.SetHeader(b.IDHeader(), "not-the-id")
		m.SetHeader(wire.HeaderKey, "not-the-key")
		m.SetHeader(strings.ToUpper(prefix)+"TYPE", "NotTheType")
		h := encode(t, b, &m, &cloudevents.Config{Source: "/shop"})
		if h[b.IDHeader()][0] != m.ID.String() || h[wire.HeaderKey][0] != m.Key || h[prefix+"type"][0] != m.Type {
			t.Errorf("%v: own headers shadow Courier's: %v", b, h)
		}
		if _, ok := h[strings.ToUpper(prefix)+"TYPE"]; ok {
			t.Errorf("%v: own header named like an attribute was written next to it", b)
		}
		// Without CloudEvents, the attribute-like header is the message's.
		if h := encode(t, b, &m, nil); h[strings.ToUpper(prefix)+"TYPE"][0] != "NotTheType" {
			t.Errorf("%v: own header %sTYPE lost without CloudEvents: %v", b, strings.ToUpper(prefix), h)
		}
	}
}

// A message without one of the required fields, or with an invalid one,
// is malformed, and the error names the header (AMQP: the property).
func TestDecodeMalformed(t *testing.T) {
	for _, b := range bindings {
		m := sample()
		good := encode(t, b, &m, nil)
		for _, tc := range []struct{ name, value, says string }{
			{b.IDHeader(), "", b.IDHeader()},
			{b.IDHeader(), "order-42", b.IDHeader()},
			{wire.HeaderKey, "", wire.HeaderKey},
			{b.TypeHeader(), "", b.TypeHeader()},
			{wire.HeaderVersion, "", wire.HeaderVersion},
			{wire.HeaderVersion, "two", wire.HeaderVersion},
			{wire.HeaderOccurredAt, "yesterday", wire.HeaderOccurredAt},
			{wire.HeaderOccurredAt, "2026-11-30T12:00:00+24:00", wire.HeaderOccurredAt},
			{wire.HeaderOccurredAt, "9999-12-31T23:59:59-23:59", wire.HeaderOccurredAt},
		} {
			h := maps.Clone(good)
			if tc.value == "" {
				delete(h, tc.name)
			} else {
				h[tc.name] = []string{tc.value}
			}
			_, err := b.Decode(h, nil)
			if !errors.Is(err, courier.ErrMalformed) || !strings.Contains(strings.ToLower(err.Error()), strings.ToLower(tc.says)) {
				t.Errorf("%v, %s=%q: %v; want ErrMalformed naming %s", b, tc.name, tc.value, err, tc.says)
			}
		}
	}
	_, err := wire.AMQP.Decode(map[string][]string{}, nil)
	if err == nil || !strings.Contains(err.Error(), "property message-id is missing") {
		t.Errorf("AMQP without message-id: %v; want it to name the property", err)
	}
}

// A message that carries only CloudEvents attributes (a CloudEvents
// producer's) is read from them; Courier-Key stands in for a missing
// subject; the content type comes from the binding's carrier, else
// Content-Type, else datacontenttype; the attributes and the broker's own
// headers are not the message's.
func TestDecodeEventOnly(t *testing.T) {
	for _, b := range bindings {
		write, alsoRead := b.Prefixes()
		for _, prefix := range []string{write, alsoRead} {
			if prefix == "" {
				continue
			}
			h := map[string][]string{
				prefix + "specversion": {"1.0"}, prefix + "id": {"evt-1"}, prefix + "source": {"/elsewhere"},
				prefix + "type": {"Shipped"}, prefix + "time": {"2026-11-30T12:00:00+01:00"},
				prefix + "datacontenttype": {"text/plain"}, wire.HeaderKey: {"parcel-7"}, "X-Tenant": {"acme"},
				"Nats-Expected-Stream": {"S"}, "x-death": {"[]"},
			}
			m, err := b.Decode(h, []byte("hi"))
			if err != nil {
				t.Fatalf("%v, prefix %s: %v", b, prefix, err)
			}
			own := map[string]string{"X-Tenant": "acme"}
			switch b {
			case wire.Kafka:
				own["Nats-Expected-Stream"], own["x-death"] = "S", "[]"
			case wire.NATS:
				own["x-death"] = "[]"
			case wire.AMQP:
				own["Nats-Expected-Stream"] = "S"
			}
			if m.Key != "parcel-7" || m.Type != "Shipped" || m.Version != 1 || m.ContentType != "text/plain" || string(m.Payload) != "hi" ||
				!m.OccurredAt.Equal(time.Date(2026, 11, 30, 11, 0, 0, 0, time.UTC)) || !maps.Equal(m.Headers, own) {
				t.Errorf("%v, prefix %s: %s; headers %v, want %v", b, prefix, dump(m), m.Headers, own)
			}
			h[wire.HeaderContentType] = []string{"text/csv"}
			if m, _ := b.Decode(h, nil); m.ContentType != "text/csv" {
				t.Errorf("%v: content type %q, want Content-Type's", b, m.ContentType)
			}
			delete(h, wire.HeaderKey)
			if _, err := b.Decode(h, nil); !errors.Is(err, courier.ErrMalformed) || !strings.Contains(err.Error(), prefix+"subject") {
				t.Errorf("%v: without subject or key: %v", b, err)
			}
		}
	}
}

// A message that carries Courier-Version is Courier's: its fields come
// from Courier's headers even when it carries CloudEvents attributes too.
func TestDecodeCourierWins(t *testing.T) {
	for _, b := range bindings {
		m := sample()
		h := encode(t, b, &m, &cloudevents.Config{Source: "/shop"})
		prefix, _ := b.Prefixes()
		h[prefix+"type"] = []string{"Other"}
		if got, err := b.Decode(h, nil); err != nil || got.Type != m.Type {
			t.Errorf("%v: %v, type %q; want Courier's %q", b, err, got.Type, m.Type)
		}
	}
}

// TypeOf finds the type of a delivery whichever broker carried it, and of
// one that carries only CloudEvents attributes.
func TestTypeOf(t *testing.T) {
	for _, b := range bindings {
		m := sample()
		if got := wire.TypeOf(encode(t, b, &m, nil)); got != m.Type {
			t.Errorf("%v: TypeOf = %q, want %q", b, got, m.Type)
		}
		write, alsoRead := b.Prefixes()
		for _, prefix := range []string{write, alsoRead} {
			if prefix == "" {
				continue
			}
			if got := wire.TypeOf(map[string][]string{prefix + "type": {"Shipped"}}); got != "Shipped" {
				t.Errorf("%v, CloudEvents prefix %s: TypeOf = %q", b, prefix, got)
			}
		}
	}
	if got := wire.TypeOf(map[string][]string{"X-Type": {"T"}, wire.HeaderType: {""}}); got != "" {
		t.Errorf("no type header: TypeOf = %q", got)
	}
}

func TestHTTPIsNotDecoded(t *testing.T) {
	m := sample()
	h := encode(t, wire.HTTP, &m, nil)
	if _, err := wire.HTTP.Decode(h, nil); err == nil || !strings.Contains(err.Error(), "signed") {
		t.Fatalf("HTTP headers decoded: %v", err)
	}
}

// Decode never panics and refuses only with ErrMalformed; a message it
// reads is written and read again unchanged, so what a consumer passes on
// stays what it got.
func FuzzDecode(f *testing.F) {
	m := sample()
	for i, b := range bindings {
		h := encode(f, b, &m, &cloudevents.Config{Source: "/shop"})
		prefix, _ := b.Prefixes()
		f.Add(uint8(i), h[b.IDHeader()][0], m.Key, m.Type, "3", h[wire.HeaderOccurredAt][0], m.ContentType, prefix+"subject", "k", false, []byte("x"))
		f.Add(uint8(i), m.ID.String(), "k", "T", "", "2026-11-30T12:00:00Z", "", prefix+"specversion", "1.0", true, []byte(nil))
	}
	f.Add(uint8(0), "{0192d5f0-7c1e-7a3b-8f00-000000000042}", "k", "T", "+1", "2026-11-30T12:00:00.1-23:59", "", "Nats-Msg-Id", "x", false, []byte(nil))
	f.Add(uint8(2), "", "", "", "-1", "", "", "x-death", "", true, []byte("{"))
	f.Add(uint8(1), "0192d5f0-7c1e-7a3b-8f00-000000000042", "k", "T", "1", "9999-12-31T23:59:59-23:59", "", "", "", false, []byte(nil))
	f.Fuzz(func(t *testing.T, bi uint8, id, key, typ, version, at, ct, name, value string, events bool, body []byte) {
		b := bindings[int(bi)%len(bindings)]
		prefix, _ := b.Prefixes()
		h := map[string][]string{}
		for k, v := range map[string]string{b.IDHeader(): id, wire.HeaderKey: key, b.TypeHeader(): typ, wire.HeaderVersion: version,
			wire.HeaderOccurredAt: at, wire.HeaderContentType: ct} {
			if v != "" {
				h[k] = []string{v}
			}
		}
		if events {
			for k, v := range map[string]string{"specversion": "1.0", "id": id, "type": typ, "subject": key, "time": at, "courierversion": version} {
				h[prefix+k] = []string{v}
			}
		}
		h[name] = append(h[name], value)
		got, err := b.Decode(h, body)
		if err != nil {
			if !errors.Is(err, courier.ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		if got.Key == "" || got.Type == "" || string(got.Payload) != string(body) {
			t.Fatalf("decoded %s from key %q type %q", dump(got), key, typ)
		}
		again, err := b.Decode(encode(t, b, &got, nil), got.Payload)
		if err != nil {
			t.Fatalf("written again, %s does not decode: %v", dump(got), err)
		}
		if d := same(again, got); d != "" {
			t.Fatalf("written again: %s", d)
		}
	})
}
