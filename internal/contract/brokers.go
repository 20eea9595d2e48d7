package contract

// Brokers is brokers.json: what the relay publishes on each broker for
// each valid message of messages.json, captured with the broker's own
// client, or why the broker refused it.
type Brokers struct {
	// Contract is Version.
	Contract int `json:"contract"`
	// Brokers holds the messages by broker: "nats" (JetStream, the
	// default subject prefix courier.), "kafka", "rabbitmq" (exchange
	// courier), "webhook" (raw body mode).
	Brokers map[string][]Published `json:"brokers"`
}

// Published is what a broker got for one valid vector: the message, or
// the error the relay dead-lettered it with.
type Published struct {
	// Name is the vector's name in messages.json.
	Name string `json:"name"`
	// Message is what the broker got; nil when the relay made the message a
	// dead letter.
	Message *BrokerMessage `json:"message,omitempty"`
	// DeadLetter is the error the relay recorded when the broker refused
	// the message for good, "" when it took it.
	DeadLetter string `json:"dead_letter,omitempty"`
}

// BrokerMessage is one message as a broker's own client receives it.
type BrokerMessage struct {
	// Destination is the NATS subject, the Kafka topic, the RabbitMQ
	// exchange and routing key ("courier orders"), or the webhook's
	// method and path ("POST /hooks").
	Destination string `json:"destination"`
	// Properties are what the broker carries beside headers: the Kafka
	// record's key; the AMQP message's properties (message_id, type,
	// content_type, delivery_mode, timestamp).
	Properties map[string]string `json:"properties,omitempty"`
	// Headers are the headers, [name, value] pairs sorted by name and
	// value. A webhook's webhook-timestamp and webhook-signature, which
	// differ from request to request, are "(per request)".
	Headers [][2]string `json:"headers"`
	// Body is the payload: the NATS data, the Kafka value, the AMQP body,
	// the request body.
	Body Digest `json:"body"`
}
