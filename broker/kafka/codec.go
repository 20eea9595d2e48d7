package kafka

import (
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
	"github.com/courier-go/courier/broker/cloudevents"
	"github.com/courier-go/courier/broker/wire"
)

// Header names Courier sets on every record (see package broker/wire).
const (
	HeaderID          = wire.HeaderID
	HeaderKey         = wire.HeaderKey
	HeaderType        = wire.HeaderType
	HeaderVersion     = wire.HeaderVersion
	HeaderOccurredAt  = wire.HeaderOccurredAt
	HeaderContentType = wire.HeaderContentType
)

// ErrMalformed is returned (wrapped) by FromRaw for a record that lacks
// Courier's headers or carries invalid ones. It is courier.ErrMalformed.
var ErrMalformed = courier.ErrMalformed

// ToRecord converts a message to a Kafka record: its Kafka topic, the
// message key as record key, its headers as package broker/wire writes
// them, its payload as value.
func (c Config) ToRecord(m *courier.Message) *kgo.Record { return c.record(m, nil) }

// record converts a message to a Kafka record, with its CloudEvents
// attributes when ce is set.
func (c Config) record(m *courier.Message, ce *cloudevents.Config) *kgo.Record {
	h := make([]kgo.RecordHeader, 0, len(m.Headers)+14)
	wire.Kafka.Encode(m, ce, func(name, value string) {
		h = append(h, kgo.RecordHeader{Key: name, Value: []byte(value)})
	})
	return &kgo.Record{Topic: c.Topic(m.Topic), Key: []byte(m.Key), Value: m.Payload, Headers: h}
}

// Raw returns a record as a broker.Raw: the Kafka topic as Subject, the
// record headers (repeated names keep every value), the value as Data. A
// record without a Courier-Key header gets one from its record key, so that
// records of other producers decode with their key.
func Raw(r *kgo.Record) broker.Raw {
	h := make(map[string][]string, len(r.Headers)+1)
	for _, rh := range r.Headers {
		h[rh.Key] = append(h[rh.Key], string(rh.Value))
	}
	if _, ok := h[HeaderKey]; !ok && len(r.Key) > 0 {
		h[HeaderKey] = []string{string(r.Key)}
	}
	return broker.Raw{Subject: r.Topic, Headers: h, Data: r.Value}
}

// FromRaw converts a delivery back to a Courier message (see package
// broker/wire). It fails with an error wrapping ErrMalformed when a
// required header is missing or invalid. A record without Courier-Version
// that carries CloudEvents attributes (ce_specversion) is decoded from
// them, its record key standing in for a missing ce_subject.
func (c Config) FromRaw(raw broker.Raw) (courier.Message, error) {
	m, err := wire.Kafka.Decode(raw.Headers, raw.Data)
	if err != nil {
		return courier.Message{}, err
	}
	m.Topic = c.MessageTopic(raw.Subject)
	return m, nil
}
