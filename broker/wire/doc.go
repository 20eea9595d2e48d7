// Package wire is Courier's one codec between a message and the headers
// and body a broker carries it in. Every broker package adapts its own
// header carrier to it (nats.Header, Kafka record headers, an AMQP table
// and properties, http.Header); the header names, which field is required,
// how a field is written and read, and how a message that carries only
// CloudEvents attributes is read are decided here, once.
//
// # Headers
//
// A message travels as its payload (the body) and these headers:
//
//	id            message id (UUID)         Courier-Id; JetStream: Nats-Msg-Id,
//	                                        AMQP: the message-id property,
//	                                        HTTP: webhook-id
//	Courier-Key   ordering key
//	type          message type              Courier-Type; AMQP: the type property
//	Courier-Version      schema version
//	Courier-Occurred-At  RFC 3339 time, nanoseconds, UTC
//	Content-Type  payload media type        AMQP: the content-type property
//
// plus the message's own headers. An own header named like one of these
// is not written (Courier's field wins), and neither is one named like a
// CloudEvents attribute the message carries (the attribute wins). Each
// name is written once. [Binding] says where a broker keeps each field;
// broker.Raw carries AMQP's properties under the names PropertyMessageID,
// PropertyType and HeaderContentType, so that a parked delivery decodes
// again from its Raw alone.
//
// # CloudEvents
//
// Given a cloudevents.Config, Encode also writes the CloudEvents
// attributes of the binding's binary content mode, with the binding's
// prefix (ce- for NATS and HTTP, ce_ for Kafka, cloudEvents: for AMQP),
// and datacontenttype where the binding carries it: a content-type header
// (NATS, Kafka; their header names are case-sensitive, so it stands next
// to Content-Type), the Content-Type header (HTTP) or property (AMQP).
//
// Decode reads a message that carries CloudEvents attributes (a
// specversion with one of the binding's prefixes; AMQP also reads
// cloudEvents_) and no Courier-Version header from the attributes alone
// (see cloudevents.Decode): the id from id, the type from type, the key
// from subject, or from the Courier-Key header when the event has no
// subject (Kafka puts a record's key there), the content type from the
// binding's content type, else Content-Type, else datacontenttype. A
// message that carries both keeps Courier's fields; the attributes are
// left out of its headers either way.
//
// # Errors
//
// Decode fails with an error wrapping courier.ErrMalformed that names the
// header (or AMQP property) when a required one is missing or invalid:
// the id (a UUID), the key, the type, the version (an integer) and the
// time (RFC 3339). The headers a broker adds to a delivery itself
// (JetStream's Nats-*, RabbitMQ's x-death and x-delivery-count, …) are not
// a message's and are left out of its headers.
//
// HTTP headers are written only, for the webhook publisher's raw mode: a
// webhook request's headers are not signed, so Courier reads a webhook's
// message from its signed body instead (package webhook), and Decode
// refuses the HTTP binding.
//
//	h := nats.Header{}
//	wire.NATS.Encode(&msg, nil, func(name, value string) { h[name] = []string{value} })
//	back, err := wire.NATS.Decode(h, msg.Payload) // back.Topic is the caller's
//	if err != nil {
//		return err
//	}
package wire
