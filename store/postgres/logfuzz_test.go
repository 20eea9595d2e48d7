package postgres_test

import (
	"bytes"
	"maps"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/store/postgres"
)

// DecodeLogMessage reads what arrives from PostgreSQL's log, which any
// session that can call pg_logical_emit_message can write under the prefix:
// whatever the bytes, it returns a message or an error and never panics,
// and a message it returns encodes to bytes that decode to it again.
func FuzzDecodeLogMessage(f *testing.F) {
	at := time.Date(2026, 11, 30, 17, 0, 0, 123456000, time.UTC)
	for _, m := range []courier.Message{
		courier.NewMessage("orders", "order-42", "OrderPlaced", []byte(`{"total":12}`), courier.WithOccurredAt(at), courier.WithVersion(3)),
		{ID: uuid.Must(uuid.NewV7()), Topic: "t", Type: "T", Version: 1, ContentType: courier.ContentTypeBinary,
			Payload: []byte{0, 1, 2}, Headers: map[string]string{"b": "2", "a": "1"}, OccurredAt: at},
	} {
		b := postgres.EncodeLogMessage(nil, &m)
		f.Add(b)
		f.Add(b[:len(b)/2])
	}
	f.Add([]byte{})
	f.Add([]byte{1})
	f.Add([]byte{9, 0, 0})
	// A header count as large as the rest of the message, and a length
	// prefix past its end.
	f.Add(append(append([]byte{1}, make([]byte, 16)...), 0, 1, 0, 0, 0, 0, 0x7f))
	f.Add(append(append([]byte{1}, make([]byte, 16)...), 0, 1, 0xff, 0xff, 0xff, 0xff, 0x0f))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := postgres.DecodeLogMessage(b)
		if err != nil {
			return
		}
		again, err := postgres.DecodeLogMessage(postgres.EncodeLogMessage(nil, &m))
		if err != nil {
			t.Fatalf("the encoding of a decoded message does not decode: %v", err)
		}
		if !sameLogMessage(m, again) {
			t.Fatalf("decoded %+v, then %+v", m, again)
		}
	})
}

func sameLogMessage(a, b courier.Message) bool {
	return a.ID == b.ID && a.Topic == b.Topic && a.Key == b.Key && a.Type == b.Type && a.Version == b.Version &&
		a.ContentType == b.ContentType && bytes.Equal(a.Payload, b.Payload) && a.OccurredAt.Equal(b.OccurredAt) &&
		maps.Equal(a.Headers, b.Headers)
}
