package nats

import (
	natsgo "github.com/nats-io/nats.go"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker/cloudevents"
	"github.com/courier-go/courier/broker/wire"
)

// Header names Courier sets on every JetStream message (see package
// broker/wire); the message id travels in JetStream's Nats-Msg-Id.
const (
	HeaderKey         = wire.HeaderKey
	HeaderType        = wire.HeaderType
	HeaderVersion     = wire.HeaderVersion
	HeaderOccurredAt  = wire.HeaderOccurredAt
	HeaderContentType = wire.HeaderContentType
)

// ErrMalformed is returned (wrapped) by FromNATS for a message that lacks
// Courier's headers or carries invalid ones. It is courier.ErrMalformed.
var ErrMalformed = courier.ErrMalformed

// ToNATS converts a message to a JetStream message: its subject (see
// MessageSubject), its
// headers as package broker/wire writes them, its payload as data.
func (c Config) ToNATS(m *courier.Message) *natsgo.Msg { return c.natsMsg(m, nil) }

// natsMsg converts a message to a JetStream message, with its CloudEvents
// attributes when ce is set.
func (c Config) natsMsg(m *courier.Message, ce *cloudevents.Config) *natsgo.Msg {
	h := make(natsgo.Header, len(m.Headers)+8)
	wire.NATS.Encode(m, ce, func(name, value string) { h[name] = []string{value} })
	return &natsgo.Msg{Subject: c.MessageSubject(m.Topic, m.Key), Header: h, Data: m.Payload}
}

// FromNATS converts a JetStream message back to a Courier message (see
// package broker/wire). It fails with an error wrapping ErrMalformed when a
// required header is missing or invalid. A message without Courier-Version
// that carries CloudEvents attributes (ce-specversion) is decoded from
// them.
func (c Config) FromNATS(msg *natsgo.Msg) (courier.Message, error) {
	m, err := wire.NATS.Decode(msg.Header, msg.Data)
	if err != nil {
		return courier.Message{}, err
	}
	m.Topic = c.Topic(msg.Subject)
	return m, nil
}
