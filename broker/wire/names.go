package wire

// Courier's headers (see the package documentation for where each binding
// carries the id, the type and the content type instead).
const (
	// HeaderID carries the message id where the broker has no header of
	// its own for it (Kafka).
	HeaderID = "Courier-Id"
	// HeaderKey carries the ordering key.
	HeaderKey = "Courier-Key"
	// HeaderType carries the message type (not on AMQP: PropertyType).
	HeaderType = "Courier-Type"
	// HeaderVersion carries the schema version, in decimal. Its presence
	// marks a message written by Courier: one that carries CloudEvents
	// attributes without it is read from the attributes.
	HeaderVersion = "Courier-Version"
	// HeaderOccurredAt carries when the event occurred, RFC 3339 with
	// nanoseconds, in UTC.
	HeaderOccurredAt = "Courier-Occurred-At"
	// HeaderContentType carries the payload's media type (on AMQP, the
	// content-type property, which broker.Raw carries under this name).
	HeaderContentType = "Content-Type"
)

// Headers of the webhook publisher's raw mode, next to Courier's.
const (
	// HeaderTopic carries the message's topic.
	HeaderTopic = "Courier-Topic"
	// HeaderNames lists the message's own header names as written,
	// space-separated: HTTP does not keep the case of header names.
	HeaderNames = "Courier-Header-Names"
)

// HeaderNATSMsgID is JetStream's deduplication header, which carries the
// message id on NATS: JetStream drops a message whose id it stored within
// the stream's duplicate window.
const HeaderNATSMsgID = "Nats-Msg-Id"

// natsPrefix starts the headers JetStream acts on or adds (Nats-Msg-Id,
// Nats-Expected-*, Nats-Batch-*, …): none is a message's own.
const natsPrefix = "Nats-"

// Names under which broker.Raw carries AMQP properties.
const (
	// PropertyMessageID is the message-id property: the message id.
	PropertyMessageID = "Message-Id"
	// PropertyType is the type property: the message type.
	PropertyType = "Type"
	// The content-type property travels as HeaderContentType.
)

// HeaderDeliveryCount is the header a RabbitMQ quorum queue adds to a
// delivery: how many times it delivered the message before.
const HeaderDeliveryCount = "x-delivery-count"

// Headers of a Standard Webhooks request (https://www.standardwebhooks.com).
const (
	// HeaderWebhookID carries the message id (the receiver's
	// deduplication id); it is signed.
	HeaderWebhookID = "webhook-id"
	// HeaderWebhookTimestamp carries when the request was signed, in Unix
	// seconds; it is signed.
	HeaderWebhookTimestamp = "webhook-timestamp"
	// HeaderWebhookSignature carries the request's signatures.
	HeaderWebhookSignature = "webhook-signature"
)
