// Package cloudevents maps Courier messages to CloudEvents 1.0 attributes
// for the binary content mode of each broker binding, and back.
//
// Every broker publisher (nats, kafka, amqp, webhook) takes an optional
// *Config in its PublisherConfig.CloudEvents. With it, each message also
// carries these CloudEvents attributes, as headers named with the binding's
// prefix (PrefixNATS, PrefixKafka, PrefixAMQP, PrefixHTTP):
//
//	specversion     "1.0"
//	id              message id
//	source          Config.Source
//	type            message type
//	subject         ordering key
//	time            OccurredAt, RFC 3339 with nanoseconds
//	courierversion  schema version (an extension attribute)
//
// The payload is the event's data, unchanged, and datacontenttype is the
// message's content type, carried where each binding wants it: the
// Content-Type header (HTTP), the content-type property (AMQP), a
// "content-type" header (Kafka, NATS; see ContentTypeHeader).
//
// Courier's own headers stay: Courier's subscribers read them as before and
// leave the CloudEvents attributes out of a message's headers, and
// CloudEvents consumers ignore Courier's headers. A message header named
// like one of the attributes is replaced by the attribute (the webhook
// publisher refuses the message instead). The NATS, Kafka and AMQP decoders
// also accept a message that carries only CloudEvents attributes (see
// Decode).
//
// # JSON event format
//
// [Config.JSON] writes a message as one event in the JSON event format
// (MediaTypeJSON, the HTTP binding's structured content mode): the
// attributes above, datacontenttype, and two more extensions, couriertopic
// and courierheaders (the headers as a JSON object inside a string), so
// that the event's bytes hold the whole message. The payload is the data
// member when it is JSON, else data_base64 ([DataMember]). The webhook
// publisher sends this, signed, when it has CloudEvents on. [ParseJSON]
// reads an event and checks it as the specification asks (it passes the
// CloudEvents project's conformance tests of the format; see
// testdata/conformance), and [Event.Message] turns it into a message by the
// rules of Decode.
package cloudevents
