package postgres_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/store/postgres"
)

// A message survives LogOnly's encoding field for field; a damaged or
// unknown encoding is refused with what is wrong.
func TestLogMessageEncoding(t *testing.T) {
	at := time.Date(2026, 11, 30, 17, 0, 0, 123456000, time.UTC)
	for _, m := range []courier.Message{
		courier.NewMessage("orders", "order-42", "OrderPlaced", []byte(`{"total":12}`), courier.WithOccurredAt(at), courier.WithVersion(3)),
		{ID: uuid.Must(uuid.NewV7()), Topic: "t", Key: "", Type: "T", Version: 1, ContentType: courier.ContentTypeBinary,
			Payload: []byte{0, 1, 2}, Headers: map[string]string{"b": "2", "a": "1", "traceparent": "00-x"}, OccurredAt: at},
	} {
		b := postgres.EncodeLogMessage(nil, &m)
		got, err := postgres.DecodeLogMessage(b)
		if err != nil {
			t.Fatalf("decode: %v", err)
		}
		if got.ID != m.ID || got.Topic != m.Topic || got.Key != m.Key || got.Type != m.Type || got.Version != m.Version ||
			got.ContentType != m.ContentType || string(got.Payload) != string(m.Payload) || !got.OccurredAt.Equal(m.OccurredAt.Truncate(time.Microsecond)) ||
			len(got.Headers) != len(m.Headers) {
			t.Fatalf("decoded %+v, want %+v", got, m)
		}
		for k, v := range m.Headers {
			if got.Headers[k] != v {
				t.Fatalf("header %s = %q, want %q", k, got.Headers[k], v)
			}
		}
		if again := postgres.EncodeLogMessage(nil, &got); string(again) != string(b) {
			t.Fatal("the encoding is not deterministic")
		}
		for cut := 1; cut < len(b)-len(m.Payload); cut++ {
			if _, err := postgres.DecodeLogMessage(b[:cut]); err == nil {
				t.Fatalf("a message cut at byte %d of %d decoded", cut, len(b))
			}
		}
		b[0] = 9
		if _, err := postgres.DecodeLogMessage(b); err == nil || !strings.Contains(err.Error(), "format 9") {
			t.Fatalf("format 9: %v", err)
		}
	}
}
