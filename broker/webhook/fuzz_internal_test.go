package webhook

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker/cloudevents"
)

const fuzzSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// fuzzHandler is a Handler whose deliveries a goroutine decodes, checks
// against what the request's body says, and acknowledges.
func fuzzHandler(f *testing.F) *Handler {
	h, err := NewHandler(HandlerConfig{VerifierConfig: VerifierConfig{Secrets: []string{fuzzSecret}}, Wait: time.Second})
	if err != nil {
		f.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			d, err := h.Next(ctx)
			if err != nil {
				return
			}
			_, _ = h.Decode(d.Raw())
			_ = d.Ack(ctx)
		}
	}()
	f.Cleanup(func() {
		cancel()
		<-done
		_ = h.Close()
	})
	return h
}

// The Handler never panics on a request; it answers 200 only for a
// correctly signed body that decodes into a message and carries none of
// the raw-mode headers, else a 4xx, and the consumer gets exactly what the
// body says.
func FuzzHandler(f *testing.F) {
	keys, err := parseSigningKeys([]string{fuzzSecret})
	if err != nil {
		f.Fatal(err)
	}
	id := "0192d5f0-7c1e-7a3b-8f00-000000000042"
	for _, m := range fuzzMessages() {
		b, err := envelope(&m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, true, id, "", "")
	}
	ce, _ := (&cloudevents.Config{Source: "/fuzz"}).JSON(&[]courier.Message{fuzzMessages()[0]}[0])
	f.Add(ce, true, id, "", "")
	f.Add([]byte(`{"type":"T","timestamp":"2026-11-30T12:00:00Z","topic":"o","key":"k","version":1}`), true, id, HeaderType, "Other")
	f.Add([]byte(`{"type":"T","timestamp":"2026-11-30T12:00:00Z","topic":"o","key":"k","version":1,"data":1,"data_base64":"AA=="}`), true, id, "", "")
	f.Add([]byte(`{"n":1}`), false, "x.1", HeaderSignature, "v1a,AAAA v1,")
	f.Add([]byte(`null`), true, "msg_1", "", "")
	h := fuzzHandler(f)
	f.Fuzz(func(t *testing.T, body []byte, sign bool, id, header, value string) {
		r := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
		ts := time.Now().Unix()
		r.Header.Set(HeaderID, id)
		r.Header.Set(HeaderTimestamp, strconv.FormatInt(ts, 10))
		if sign {
			r.Header.Set(HeaderSignature, signature(keys, id, ts, body))
		}
		if validHeaderName(header) && validValue(value) {
			r.Header.Set(header, value)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		_, derr := decodeBody(id, body)
		rawHeader := false
		for _, name := range unsignedHeaders() {
			rawHeader = rawHeader || len(r.Header.Values(name)) > 0
		}
		signed := sign && id != "" && !bytes.Contains([]byte(id), []byte(".")) && r.Header.Get(HeaderSignature) == signature(keys, id, ts, body)
		switch {
		case rec.Code == http.StatusOK:
			if !signed || derr != nil || rawHeader {
				t.Fatalf("answered 200 to body %q id %q header %s: signed %v, decode %v", body, id, header, signed, derr)
			}
		case rec.Code >= 400 && rec.Code < 500:
			if signed && derr == nil && !rawHeader && r.Header.Get(HeaderID) == id {
				t.Fatalf("answered %d %s to a signed message %q", rec.Code, rec.Body, body)
			}
		default:
			t.Fatalf("answered %d %s", rec.Code, rec.Body)
		}
	})
}

// validHeaderName reports whether name can be set on a request.
func validHeaderName(name string) bool {
	return courier.CheckHeaderName(name) == nil || name == HeaderType || name == HeaderSignature
}

// fuzzMessages are messages whose envelopes seed the fuzzers.
func fuzzMessages() []courier.Message {
	at := courier.WithOccurredAt(time.Date(2026, 11, 30, 12, 0, 0, 5, time.UTC))
	return []courier.Message{
		courier.NewMessage("orders", "order-42", "OrderPlaced", []byte(`{"total": 7}`), courier.WithContentType(courier.ContentTypeJSON), at,
			courier.WithHeader("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")),
		courier.NewMessage("orders", "k\"\\\u2028", "T", []byte{0, 0xff}, at, courier.WithVersion(1<<40)),
		courier.NewMessage("o", "k", "T", nil, at),
	}
}

// A message's envelope decodes into the same message, byte for byte; a
// message JSON cannot carry is refused, never altered.
func FuzzEnvelope(f *testing.F) {
	for _, m := range fuzzMessages() {
		h := ""
		for k := range m.Headers {
			h = k
		}
		f.Add(m.Topic, m.Key, m.Type, m.ContentType, m.Version, m.Payload, h, m.Headers[h], m.OccurredAt.UnixNano())
	}
	f.Add("t", "k", "T", "text/plain", 1, []byte("null"), "", "", int64(0))
	f.Add("t", "k", "T", "application/json", 1, []byte(" [1] "), "a", "\xff", int64(-1))
	f.Fuzz(func(t *testing.T, topic, key, typ, ct string, version int, payload []byte, hname, hvalue string, at int64) {
		if topic == "" || key == "" || typ == "" || version < 1 {
			return // the outbox never writes such a message
		}
		m := courier.Message{ID: uuid.Must(uuid.NewV7()), Topic: topic, Key: key, Type: typ, ContentType: ct, Version: version,
			Payload: payload, OccurredAt: time.Unix(0, at).UTC()}
		if hname != "" {
			m.Headers = map[string]string{hname: hvalue}
		}
		b, err := envelope(&m)
		if err != nil {
			valid := true
			for _, s := range []string{topic, key, typ, ct, hname, hvalue} {
				valid = valid && utf8.ValidString(s)
			}
			if valid {
				t.Fatalf("envelope of valid UTF-8 refused: %v", err)
			}
			return
		}
		got, err := decodeBody(m.ID.String(), b)
		if err != nil {
			if !errors.Is(err, courier.ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			if m.OccurredAt.Year() < 0 || m.OccurredAt.Year() > 9999 {
				return // outside RFC 3339
			}
			t.Fatalf("envelope %s does not decode: %v", b, err)
		}
		if got.ID != m.ID || got.Topic != m.Topic || got.Key != m.Key || got.Type != m.Type || got.Version != m.Version ||
			got.ContentType != m.ContentType || !bytes.Equal(got.Payload, m.Payload) || !got.OccurredAt.Equal(m.OccurredAt) ||
			!maps.Equal(got.Headers, m.Headers) {
			t.Fatalf("envelope %s decodes into %+v, want %+v", b, got, m)
		}
	})
}
