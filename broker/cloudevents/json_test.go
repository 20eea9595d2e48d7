package cloudevents_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker/cloudevents"
	"github.com/courier-go/courier/broker/internal/cetest"
)

// jsonMessages are messages whose payloads take each path of DataMember.
func jsonMessages() map[string]courier.Message {
	at := courier.WithOccurredAt(time.Date(2026, 11, 30, 12, 0, 0, 123456789, time.UTC))
	withHeaders := courier.NewMessage("orders", "order-42", "OrderPlaced", []byte(`{"total": 7, "note": "<b>&</b>"}`),
		courier.WithContentType(courier.ContentTypeJSON), courier.WithVersion(3), at,
		courier.WithHeader("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
		courier.WithHeader(courier.HeaderCorrelationID, "c-\"1\"\u2028"))
	return map[string]courier.Message{
		"json with white space inside": withHeaders,
		"json with white space around": courier.NewMessage("orders", "k", "T", []byte(" {\"a\":1}\n"), courier.WithContentType("application/json"), at),
		"json typed but not json":      courier.NewMessage("orders", "k", "T", []byte("{nope"), courier.WithContentType("application/vnd.shop+json"), at),
		"json null":                    courier.NewMessage("orders", "k", "T", []byte("null"), courier.WithContentType(courier.ContentTypeJSON), at),
		"binary":                       courier.NewMessage("orders", "k", "T", []byte{0, 0xff, '"', '\\', 0x7f}, at),
		"text":                         courier.NewMessage("orders", "k", "T", []byte("plain text"), courier.WithContentType("text/plain; charset=utf-8"), at),
		"empty":                        courier.NewMessage("orders", "k\twith\ttabs", "T", nil, at),
		"large version":                courier.NewMessage("orders", "k", "T", []byte("x"), courier.WithVersion(1<<40), at),
	}
}

// JSON writes an event that ParseJSON reads back into the same message,
// byte for byte, and that the CloudEvents Go SDK reads as the event the
// binary content mode carries.
func TestJSONRoundTrip(t *testing.T) {
	cfg := &cloudevents.Config{Source: "https://shop.example.com/orders"}
	for name, m := range jsonMessages() {
		t.Run(name, func(t *testing.T) {
			b, err := cfg.JSON(&m)
			if err != nil {
				t.Fatal(err)
			}
			if !json.Valid(b) || !utf8.Valid(b) {
				t.Fatalf("not JSON: %s", b)
			}
			e, err := cloudevents.ParseJSON(b)
			if err != nil {
				t.Fatalf("ParseJSON(%s): %v", b, err)
			}
			got, err := e.Message()
			if err != nil {
				t.Fatalf("Message: %v", err)
			}
			if len(got.Payload) == 0 && len(m.Payload) == 0 {
				got.Payload = m.Payload
			}
			if d := cetest.SameMessage(got, m); d != "" {
				t.Fatalf("%s\nfrom %s", d, b)
			}

			var sdk event.Event
			if err := json.Unmarshal(b, &sdk); err != nil {
				t.Fatalf("SDK: %v", err)
			}
			if err := sdk.Validate(); err != nil {
				t.Fatalf("SDK: %v", err)
			}
			if d := cetest.Diff(&sdk, m, cfg.Source); len(d) > 0 {
				t.Fatalf("SDK reads %v:\n%s", sdk, strings.Join(d, "\n"))
			}
		})
	}
}

// A JSON payload is the data member itself; anything else is base64.
func TestDataMember(t *testing.T) {
	for _, tc := range []struct {
		ct, payload, name, value string
	}{
		{"application/json", `{"a":[1,2]}`, "data", `{"a":[1,2]}`},
		{"application/cloudevents+json; charset=utf-8", `"s"`, "data", `"s"`},
		{"application/json", ` 1`, "data_base64", `"IDE="`},
		{"application/json", `null`, "data_base64", `"bnVsbA=="`},
		{"application/json", "\"\xff\"", "data_base64", `"Iv8i"`},
		{"text/plain", `{"a":1}`, "data_base64", `"eyJhIjoxfQ=="`},
		{"application/json", ``, "", ``},
	} {
		name, value := cloudevents.DataMember(tc.ct, []byte(tc.payload))
		if name != tc.name || string(value) != tc.value {
			t.Errorf("DataMember(%q, %q) = %s %s, want %s %s", tc.ct, tc.payload, name, value, tc.name, tc.value)
		}
	}
	if _, err := cloudevents.ReadData("", json.RawMessage(`1`), json.RawMessage(`"MQ=="`)); !errors.Is(err, courier.ErrMalformed) {
		t.Errorf("data and data_base64: %v", err)
	}
	if _, err := cloudevents.ReadData("text/plain", json.RawMessage(`{}`), nil); !errors.Is(err, courier.ErrMalformed) {
		t.Errorf("text data that is an object: %v", err)
	}
	if _, err := cloudevents.ReadData("", nil, json.RawMessage(`"%%"`)); !errors.Is(err, courier.ErrMalformed) {
		t.Errorf("data_base64 not base64: %v", err)
	}
}

// Times are RFC 3339's: offsets past 23:59 are refused, by the JSON format
// and by the binary content mode alike.
func TestTimeOffsets(t *testing.T) {
	for offset, ok := range map[string]bool{"Z": true, "+23:59": true, "-00:00": true, "+24:00": false, "+23:60": false, "-99:00": false} {
		ts := "2018-04-05T17:31:00" + offset
		_, err := cloudevents.ParseJSON([]byte(`{"specversion":"1.0","id":"1","source":"/s","type":"t","time":"` + ts + `"}`))
		if (err == nil) != ok {
			t.Errorf("JSON time %s: %v", ts, err)
		}
		h := map[string]string{"ce-specversion": "1.0", "ce-id": "1", "ce-type": "t", "ce-subject": "k", "ce-time": ts}
		_, err = cloudevents.Decode("ce-", func(k string) string { return h[k] })
		if (err == nil) != ok {
			t.Errorf("binary time %s: %v", ts, err)
		}
	}
}

// A message's time is one RFC 3339 can write again in UTC: an event whose
// time falls past the year 9999 in UTC is a valid CloudEvent, but not a
// message.
func TestTimeWritableInUTC(t *testing.T) {
	ts := "9999-12-31T23:59:59-23:59"
	e, err := cloudevents.ParseJSON([]byte(`{"specversion":"1.0","id":"1","source":"/s","type":"t","subject":"k","time":"` + ts + `"}`))
	if err != nil {
		t.Fatalf("JSON time %s: %v", ts, err)
	}
	if _, err := e.Message(); !errors.Is(err, courier.ErrMalformed) || !strings.Contains(err.Error(), "time") {
		t.Errorf("message of an event at %s: %v; want ErrMalformed naming the time", ts, err)
	}
	h := map[string]string{"ce-specversion": "1.0", "ce-id": "1", "ce-type": "t", "ce-subject": "k", "ce-time": ts}
	if _, err := cloudevents.Decode("ce-", func(k string) string { return h[k] }); !errors.Is(err, courier.ErrMalformed) {
		t.Errorf("binary time %s: %v; want ErrMalformed", ts, err)
	}
}

// An event without Courier's extensions still makes a message when it has
// what Courier needs (a subject for the key, a time); courierheaders must
// hold a JSON object.
func TestEventMessage(t *testing.T) {
	e, err := cloudevents.ParseJSON([]byte(`{"specversion":"1.0","id":"evt-1","source":"/billing","type":"InvoicePaid",
		"subject":"inv-9","time":"2026-11-30T12:00:00+01:00","datacontenttype":"text/plain","data":"paid"}`))
	if err != nil {
		t.Fatal(err)
	}
	m, err := e.Message()
	if err != nil {
		t.Fatal(err)
	}
	if m.Topic != "" || m.Key != "inv-9" || m.Type != "InvoicePaid" || m.Version != 1 || string(m.Payload) != "paid" ||
		m.ContentType != "text/plain" || !m.OccurredAt.Equal(time.Date(2026, 11, 30, 11, 0, 0, 0, time.UTC)) {
		t.Fatalf("message %+v", m)
	}
	e.Subject = ""
	if _, err := e.Message(); !errors.Is(err, courier.ErrMalformed) || !strings.Contains(err.Error(), "subject") {
		t.Errorf("without subject: %v", err)
	}
	for _, h := range []string{`"[]"`, `"{\"a\":1}"`, `7`, `"nope"`} {
		e, err := cloudevents.ParseJSON([]byte(`{"specversion":"1.0","id":"1","source":"/s","type":"t","subject":"k","time":"2026-11-30T12:00:00Z","courierheaders":` + h + `}`))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.Message(); !errors.Is(err, courier.ErrMalformed) || !strings.Contains(err.Error(), "courierheaders") {
			t.Errorf("courierheaders %s: %v", h, err)
		}
	}
}

// AppendString writes what encoding/json reads back, for every valid
// UTF-8 string.
func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "plain", "\"\\/\b\f\n\r\t\x00\x1f\x7f", "<b>&amp;</b>", "\u2028\u2029", "注文-42", "\U0001F600"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			return
		}
		b := cloudevents.AppendString(nil, s)
		var back string
		if err := json.Unmarshal(b, &back); err != nil || back != s {
			t.Fatalf("AppendString(%q) = %s, read back as %q (%v)", s, b, back, err)
		}
	})
}

// ParseJSON never panics and refuses with ErrMalformed; an event it takes
// that makes a message is written by JSON as an event that makes the same
// message again.
func FuzzParseJSON(f *testing.F) {
	cfg := &cloudevents.Config{Source: "/fuzz"}
	for _, m := range jsonMessages() {
		b, err := cfg.JSON(&m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"specversion":"1.0","id":"x","source":"#f","type":"t","subject":"k","time":"2018-04-05T17:31:00Z","courierversion":"7","couriertopic":5}`))
	f.Add([]byte(`{"specversion":"1.0","id":"x","source":"/s","type":"t","ext":1.5,"Data":1,"data":null,"data_base64":null}`))
	f.Add([]byte(`[{"specversion":"1.0"}]`))
	f.Add([]byte(`null`))
	for _, name := range []string{"valid-events.json", "invalid-events.json"} { // the conformance tests' events
		b, err := os.ReadFile(filepath.Join("testdata", "conformance", name))
		if err != nil {
			f.Fatal(err)
		}
		var file conformanceFile
		if err := json.Unmarshal(b, &file); err != nil {
			f.Fatal(err)
		}
		for _, tc := range file.Tests {
			f.Add([]byte(tc.Event))
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := cloudevents.ParseJSON(b)
		if err != nil {
			if !errors.Is(err, courier.ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		m, err := e.Message()
		if err != nil {
			if !errors.Is(err, courier.ErrMalformed) {
				t.Fatalf("Message: error %v does not wrap ErrMalformed", err)
			}
			return
		}
		again, err := cfg.JSON(&m)
		if err != nil {
			return // a string JSON cannot carry: refused, not altered
		}
		e2, err := cloudevents.ParseJSON(again)
		if err != nil {
			t.Fatalf("JSON wrote %s, which ParseJSON refuses: %v", again, err)
		}
		m2, err := e2.Message()
		if err != nil {
			t.Fatalf("JSON wrote %s, which makes no message: %v", again, err)
		}
		if len(m.Payload) == 0 && len(m2.Payload) == 0 {
			m2.Payload = m.Payload
		}
		if d := cetest.SameMessage(m2, m); d != "" {
			t.Fatalf("round trip through %s: %s", again, d)
		}
	})
}

// Decode never panics, refuses with ErrMalformed naming an attribute, and
// takes what it accepts from the attributes unchanged, with every
// binding's prefix.
func FuzzDecode(f *testing.F) {
	f.Add("1.0", "0192d5f0-7c1e-7a3b-8f00-000000000042", "/s", "OrderPlaced", "order-42", "2026-11-30T12:00:00Z", "2")
	f.Add("1.0", "evt-1", "", "t", "k", "2026-11-30T12:00:00.5+23:59", "")
	f.Add("0.3", "", "", "", "", "yesterday", "-1")
	f.Fuzz(func(t *testing.T, spec, id, source, typ, subject, tm, version string) {
		for _, prefix := range []string{cloudevents.PrefixHTTP, cloudevents.PrefixKafka, cloudevents.PrefixAMQP, cloudevents.PrefixAMQPUnderscore} {
			h := map[string]string{prefix + "specversion": spec, prefix + "id": id, prefix + "source": source, prefix + "type": typ,
				prefix + "subject": subject, prefix + "time": tm, prefix + "courierversion": version}
			m, err := cloudevents.Decode(prefix, func(k string) string { return h[k] })
			if err != nil {
				if !errors.Is(err, courier.ErrMalformed) || !strings.Contains(err.Error(), prefix) {
					t.Fatalf("error %v does not wrap ErrMalformed or name the attribute", err)
				}
				continue
			}
			if m.Key != subject || m.Type != typ || m.Version < 1 || m.OccurredAt.IsZero() {
				t.Fatalf("decoded %+v from subject %q type %q version %q time %q", m, subject, typ, version, tm)
			}
		}
	})
}
