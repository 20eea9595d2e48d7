package amqp

// Features says what RabbitMQ, through this package, gives Courier. It is
// the one place these properties are stated; the conformance test and the
// documentation follow it.
var Features = struct {
	// Dedup: RabbitMQ does not drop a message published twice.
	Dedup bool
	// PerKeyOrder: a queue delivers one publisher's messages in publish
	// order to a single (active) consumer.
	PerKeyOrder bool
	// AttemptsSurviveClose: a quorum queue counts deliveries itself
	// (x-delivery-count), so Attempt goes on counting on another
	// subscriber.
	AttemptsSurviveClose bool
	// RedeliversWhileOpen: RabbitMQ redelivers an unacknowledged delivery
	// only when its channel closes (or consumer_timeout, 30 minutes by
	// default, closes it).
	RedeliversWhileOpen bool
	// OversizeRejected: a message over max_message_size is refused for
	// good (broker.ErrRejected).
	OversizeRejected bool
	// UnroutableFails: a message no queue takes fails (mandatory flag and
	// basic.return) instead of being acknowledged and lost.
	UnroutableFails bool
	// BrokerDelay: RabbitMQ does not delay a redelivery; Retry waits in
	// the consumer's process.
	BrokerDelay bool
	// Extend: RabbitMQ has no per-delivery deadline to extend.
	Extend bool
}{
	Dedup:                false,
	PerKeyOrder:          true,
	AttemptsSurviveClose: true,
	RedeliversWhileOpen:  false,
	OversizeRejected:     true,
	UnroutableFails:      true,
	BrokerDelay:          false,
	Extend:               false,
}
