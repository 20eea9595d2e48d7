package sqlstore

import "github.com/courier-go/courier/store"

// RecordColumns are the outbox columns [ScanRecord] reads, in its order.
const RecordColumns = `id, attempts, message_id, topic, ordering_key, type, version,
       content_type, payload, headers, occurred_at`

// ScanRecord reads a claimed row of RecordColumns, whose times t decodes.
func ScanRecord(row interface{ Scan(...any) error }, t Times) (store.Record, error) {
	var (
		r       store.Record
		m       = &r.Message
		headers []byte
	)
	if err := row.Scan(&r.Seq, &r.Attempts, &m.ID, &m.Topic, &m.Key, &m.Type, &m.Version,
		&m.ContentType, &m.Payload, &headers, t.Dest(&m.OccurredAt)); err != nil {
		return r, err
	}
	if err := DecodeJSON(headers, &m.Headers, "headers of row", r.Seq); err != nil {
		return r, err
	}
	if m.Payload == nil {
		m.Payload = []byte{}
	}
	return r, nil
}
