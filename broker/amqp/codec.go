package amqp

import (
	"fmt"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
	"github.com/courier-go/courier/broker/cloudevents"
	"github.com/courier-go/courier/broker/wire"
)

// Header names Courier sets on every AMQP message (see package
// broker/wire); the id, the type and the content type travel in
// properties.
const (
	HeaderKey        = wire.HeaderKey
	HeaderVersion    = wire.HeaderVersion
	HeaderOccurredAt = wire.HeaderOccurredAt
)

// Names under which [broker.Raw] carries AMQP properties, so that Decode
// reads a message from its Raw alone.
const (
	RawMessageID   = wire.PropertyMessageID
	RawType        = wire.PropertyType
	RawContentType = wire.HeaderContentType
)

// ErrMalformed is returned (wrapped) by Decode for a delivery that lacks
// Courier's headers or carries invalid ones. It is courier.ErrMalformed.
var ErrMalformed = courier.ErrMalformed

// Publishing converts a message to the AMQP message Publish sends: the
// headers package broker/wire writes, the id, type and content type as
// properties, persistent, OccurredAt as the timestamp property (to the
// second), the payload as body.
func Publishing(m *courier.Message) amqp091.Publishing { return publishing(m, nil) }

// publishing converts a message to an AMQP message, with its CloudEvents
// attributes when ce is set.
func publishing(m *courier.Message, ce *cloudevents.Config) amqp091.Publishing {
	pub := amqp091.Publishing{
		Headers:      make(amqp091.Table, len(m.Headers)+10),
		DeliveryMode: amqp091.Persistent,
		Timestamp:    m.OccurredAt.UTC(),
		Body:         m.Payload,
	}
	wire.AMQP.Encode(m, ce, func(name, value string) {
		switch name {
		case RawMessageID:
			pub.MessageId = value
		case RawType:
			pub.Type = value
		case RawContentType:
			pub.ContentType = value
		default:
			pub.Headers[name] = value
		}
	})
	return pub
}

// raw returns d as broker.Raw: its headers as strings, plus the message-id,
// type and content-type properties.
func raw(d *amqp091.Delivery) broker.Raw {
	h := make(map[string][]string, len(d.Headers)+3)
	for k, v := range d.Headers {
		h[k] = []string{headerString(v)}
	}
	for name, v := range map[string]string{RawMessageID: d.MessageId, RawType: d.Type, RawContentType: d.ContentType} {
		if v != "" {
			h[name] = []string{v}
		}
	}
	return broker.Raw{Subject: d.RoutingKey, Headers: h, Data: d.Body}
}

// headerString renders an AMQP header value as text.
func headerString(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case []byte:
		return string(v)
	case time.Time:
		return v.UTC().Format(time.RFC3339Nano)
	default:
		return fmt.Sprint(v)
	}
}

// Decode converts a delivery's raw form back to a Courier message (see
// package broker/wire). It fails with an error wrapping ErrMalformed when a
// required header or property is missing or invalid. A delivery without
// Courier-Version that carries CloudEvents attributes
// (cloudEvents:specversion or cloudEvents_specversion) is decoded from
// them. The headers RabbitMQ adds to a delivery (x-delivery-count, x-death,
// …) are not the message's.
func (c Config) Decode(r broker.Raw) (courier.Message, error) {
	m, err := wire.AMQP.Decode(r.Headers, r.Data)
	if err != nil {
		return courier.Message{}, err
	}
	m.Topic = c.Topic(r.Subject)
	return m, nil
}
