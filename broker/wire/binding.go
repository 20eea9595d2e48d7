package wire

import (
	"strconv"
	"strings"

	"github.com/courier-go/courier/broker/cloudevents"
)

// Binding is a broker's way of carrying a message's headers: which header
// or property holds each field and the prefix of CloudEvents attributes.
// The zero Binding is none of them; use the constants.
type Binding int

// The bindings of Courier's brokers.
const (
	// NATS: JetStream message headers; the id in Nats-Msg-Id, CloudEvents
	// attributes prefixed ce-, datacontenttype in a content-type header.
	NATS Binding = iota + 1
	// Kafka: record headers; the id in Courier-Id, CloudEvents attributes
	// prefixed ce_, datacontenttype in a content-type header.
	Kafka
	// AMQP: the id, type and content type in the message-id, type and
	// content-type properties (broker.Raw: PropertyMessageID, PropertyType,
	// HeaderContentType), the rest in the headers table; CloudEvents
	// attributes prefixed cloudEvents: (cloudEvents_ is read too).
	AMQP
	// HTTP: request headers of the webhook publisher's raw mode; the id in
	// webhook-id, CloudEvents attributes prefixed ce-, datacontenttype in
	// Content-Type. Encode only (see the package documentation).
	HTTP
)

// String returns the binding's name.
func (b Binding) String() string {
	switch b {
	case NATS:
		return "NATS"
	case Kafka:
		return "Kafka"
	case AMQP:
		return "AMQP"
	case HTTP:
		return "HTTP"
	}
	return "Binding(" + strconv.Itoa(int(b)) + ")"
}

// IDHeader returns the name of the header that carries the message id.
func (b Binding) IDHeader() string {
	switch b {
	case NATS:
		return HeaderNATSMsgID
	case AMQP:
		return PropertyMessageID
	case HTTP:
		return HeaderWebhookID
	}
	return HeaderID
}

// TypeHeader returns the name of the header that carries the message type.
func (b Binding) TypeHeader() string {
	if b == AMQP {
		return PropertyType
	}
	return HeaderType
}

// Prefixes returns the binding's CloudEvents attribute prefixes: Encode
// writes the first, Decode reads either.
func (b Binding) Prefixes() (write, alsoRead string) {
	switch b {
	case Kafka:
		return cloudevents.PrefixKafka, ""
	case AMQP:
		return cloudevents.PrefixAMQP, cloudevents.PrefixAMQPUnderscore
	case HTTP:
		return cloudevents.PrefixHTTP, ""
	}
	return cloudevents.PrefixNATS, ""
}

// eventContentType returns the header that carries datacontenttype next
// to Courier's Content-Type, "" where Content-Type carries it (HTTP, AMQP's
// content-type property).
func (b Binding) eventContentType() string {
	if b == NATS || b == Kafka {
		return cloudevents.ContentTypeHeader
	}
	return ""
}

// courier reports whether name is a header Courier writes a field in.
func (b Binding) courier(name string) bool {
	switch name {
	case b.IDHeader(), HeaderKey, b.TypeHeader(), HeaderVersion, HeaderOccurredAt, HeaderContentType:
		return true
	}
	return false
}

// attribute reports whether name is a CloudEvents attribute Courier writes
// with prefix (in any case), or the header that carries datacontenttype.
func (b Binding) attribute(prefix, name string) bool {
	ct := b.eventContentType()
	return ct != "" && name == ct || cloudevents.Written(prefix, name)
}

// foreign reports whether name is a header the broker adds to a delivery
// itself, not one the message was published with: JetStream's Nats-*, and
// RabbitMQ's redelivery count, dead-lettering history and shovel or
// federation origin.
func (b Binding) foreign(name string) bool {
	switch b {
	case NATS:
		return strings.HasPrefix(name, natsPrefix)
	case AMQP:
		switch name {
		case HeaderDeliveryCount, "x-death", "x-received-from":
			return true
		}
		return strings.HasPrefix(name, "x-first-death-") || strings.HasPrefix(name, "x-last-death-")
	}
	return false
}

// field names header name in errors: "header Courier-Key", or the AMQP
// property it stands for.
func (b Binding) field(name string) string {
	if b == AMQP {
		switch name {
		case PropertyMessageID:
			return "property message-id"
		case PropertyType:
			return "property type"
		}
	}
	return "header " + name
}
