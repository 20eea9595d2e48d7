// Package amqp publishes Courier messages to RabbitMQ and consumes them,
// over AMQP 0-9-1 (github.com/rabbitmq/amqp091-go).
//
// # Topology
//
// Messages go to one durable topic exchange (Config.Exchange, default
// "courier") with routing key RoutingKeyPrefix+Topic. Consumers read from
// durable quorum queues bound to the exchange; [EnsureTopology] declares the
// exchange, a queue and its bindings:
//
//	cfg, err := amqp.ParseURL("amqp://guest:guest@127.0.0.1:5672/?exchange=courier")
//	if err != nil {
//		return err
//	}
//	if err := amqp.EnsureTopology(ctx, cfg, amqp.Topology{Queue: "billing", Topics: []string{"orders"}}); err != nil {
//		return err
//	}
//	pub, err := amqp.NewPublisher(ctx, amqp.PublisherConfig{Config: cfg})
//	if err != nil {
//		return err
//	}
//	sub, err := amqp.NewSubscriber(ctx, amqp.SubscriberConfig{Config: cfg, Queue: "billing"})
//	if err != nil {
//		return err
//	}
//
// # Message mapping
//
// A message becomes a persistent AMQP message (delivery mode 2) with its
// payload as body and these properties and headers (package broker/wire
// writes and reads them, as it does every broker's):
//
//	message-id           property: the message id (UUID)
//	type                 property: message type
//	content-type         property: payload media type
//	timestamp            property: OccurredAt, to the second
//	Courier-Key          header: ordering key
//	Courier-Version      header: schema version
//	Courier-Occurred-At  header: RFC 3339 time, to the nanosecond
//
// plus the message's own headers (trace context, correlation id, …) as
// string headers. [broker.Raw] carries the properties as the headers
// Message-Id, Type and Content-Type, so a parked delivery decodes again from
// its Raw alone. The headers RabbitMQ adds to deliveries (x-delivery-count,
// x-death, x-first-death-*, x-last-death-*, x-received-from) are not copied
// into decoded messages.
//
// # CloudEvents
//
// With PublisherConfig.CloudEvents set, a message also carries the
// CloudEvents attributes of the AMQP binding's binary content mode as
// headers (cloudEvents:id, cloudEvents:source, cloudEvents:type, …; the
// content-type property is datacontenttype; see package broker/cloudevents),
// next to Courier's headers, which stay. The binding allows the prefixes
// "cloudEvents:" and "cloudEvents_"; Courier writes the first, which the
// CloudEvents Go SDK reads, and Decode reads both: it leaves the attributes
// out of a decoded message's headers, and decodes a message that carries
// CloudEvents attributes instead of Courier's headers (see package
// broker/wire).
//
// RabbitMQ does not deduplicate: a message the relay publishes twice (its
// confirm was lost to a connection drop) is delivered twice, and the inbox
// recognises the second copy by its message id.
//
// # Publishing
//
// The [Publisher] publishes a batch on a channel in confirm mode with the
// mandatory flag, every message in flight at once, then waits for all the
// confirms. Outcomes (see broker.Publisher):
//
//   - ack: the message is in every queue its routing key reaches; for quorum
//     queues that means a majority of their replicas wrote it to disk.
//   - basic.return then ack: no queue is bound to the routing key, so the
//     message went nowhere. It fails with an error wrapping [ErrUnroutable]
//     that names the exchange and routing key and says to bind a queue; it
//     counts against the message (an operator can bind one in time).
//   - nack: RabbitMQ refused the message (a queue at its x-max-length with
//     x-overflow=reject-publish, or an internal error of a queue). It counts
//     against the message and names the routing key.
//   - channel closed with 404 NOT_FOUND (the exchange does not exist) or 403
//     ACCESS_REFUSED (the user may not write to it): counts against the
//     message and names the exchange and the fix.
//   - channel closed with 406 PRECONDITION_FAILED "message size … is larger
//     than configured max size …" (RabbitMQ's max_message_size, 128 MiB by
//     default in 3.x, 16 MiB in 4.x): wraps broker.ErrRejected, so the relay
//     makes the message a dead letter at once. RabbitMQ says so by closing
//     the channel, under the messages after it in the batch (they fail as
//     broker.ErrUnavailable and are retried); the Publisher then remembers
//     the limit and refuses larger messages before sending them. Set
//     PublisherConfig.MaxMessageSize to the broker's limit to have that from
//     the start.
//   - everything else (connection refused or lost, channel closed for any
//     other reason, a confirm that does not come within ConfirmTimeout or
//     before ctx ends, publishing blocked by a memory or disk alarm) wraps
//     broker.ErrUnavailable: an outage never produces dead letters.
//
// NewPublisher does not connect; the first Publish does (Publisher.Connect
// connects at once, to report a wrong URL or credentials at start-up).
// After a connection loss the next Publish dials again, spaced by
// Config.Backoff: a Publish inside the backoff window fails at once with
// broker.ErrUnavailable instead of waiting. A confirm that does not come in
// time drops the connection too (unless RabbitMQ said it blocks publishing),
// since a connection whose peer went silent is only noticed after two
// missed heartbeats. Calls into the client that wait for the broker's
// answer (opening a channel) are not bounded by ctx, only by the
// connection's heartbeat.
//
// # Consuming
//
// A [Subscriber] consumes one queue with manual acknowledgements and a
// prefetch window (QoS). The inbox consumer acknowledges a delivery after
// its transaction committed, so a crash in between brings the message again
// and the inbox skips it. Delivery.Attempt is the quorum queue's
// x-delivery-count plus one (classic queues only say whether a message was
// redelivered: 2 then). Retry holds the delivery for the delay and then
// rejects it with requeue, so it comes again at once to some consumer of
// the queue: the delay is kept by this process, not by RabbitMQ, it holds
// one prefetch slot meanwhile, and it is cut short when the subscriber
// closes or its connection drops (the message then comes back at once).
// Extend does nothing: RabbitMQ keeps an unacknowledged delivery with its
// consumer until the channel closes, or until consumer_timeout (30 minutes
// by default) closes the channel. Drop acknowledges the delivery: the inbox
// consumer has parked the message in its own store, and a second dead
// letter in RabbitMQ would only be replayed twice.
//
// After a connection loss Next reconnects, spaced by Config.Backoff, and
// resumes consuming; deliveries taken before the loss are redelivered.
//
// # Per-key order
//
// A queue delivers in order, but several consumers of one queue (or a
// prefetch window with Retry) interleave a key's messages. For per-key
// order declare the queue with Topology.SingleActiveConsumer: RabbitMQ then
// delivers to one consumer at a time and fails over to the next when it
// goes away, and run the inbox consumer with KeepOrder. The other instances
// only stand by; to share the keys among them, use key partitions.
//
// # Key partitions
//
// Topology.Partitions spreads a consumer's messages by key over several
// queues: a consistent-hash exchange, PartitionExchange(Queue) (the
// rabbitmq_consistent_hash_exchange plugin, which RabbitMQ ships: enable it
// with rabbitmq-plugins), bound to the exchange for the topics, hashes each
// message's Courier-Key header onto one of the quorum queues
// PartitionQueue(Queue, 0), PartitionQueue(Queue, 1), …, each with a
// single active consumer. A key's messages therefore sit in one queue, in
// order.
//
// SubscriberConfig.Partitions (the same number) shares those queues among
// the instances of the consumer. The instances announce themselves every
// MemberHeartbeat on a fanout exchange, MembersExchange(Queue), each hearing it
// through an exclusive queue of its own; one unheard of for MemberTimeout
// is gone. The partitions are spread evenly over the instances alive
// (rendezvous hashing, so a change moves few), and an instance consumes
// each partition it holds on a channel of its own. RabbitMQ's single active
// consumer makes it the one holder: a newcomer's consumer waits until the
// holder's is gone, then receives what the holder left unacknowledged
// first. Giving a partition up waits (at most MemberTimeout) for the
// deliveries handed out to be settled, then closes the channel; an instance
// that is killed or frozen loses its partitions once RabbitMQ closes its
// connection (two missed Config.Heartbeats) and the others have noticed it
// gone. An instance that wakes from a freeze gives up every partition it
// held and takes its share again. Subscriber.Partitions says what an
// instance holds; its Logger says when that changes.
//
// NewSubscriber checks that the partition queues exist in that number
// (declare them with EnsureTopology) and refuses a count that disagrees.
// The number cannot change while messages wait: declare the partitions
// under a new Queue name, move the consumers there, and delete the old
// queues once they are empty. The queue Queue itself is not used with
// Partitions; a consumer that switched to them leaves it to drain with an
// instance of the old kind, or to be deleted.
//
// # Dead letters
//
// Courier's own dead letters live in its database: the relay parks what
// RabbitMQ refuses, and the inbox consumer parks what its handler keeps
// failing. RabbitMQ's dead-lettering is a second, independent mechanism;
// [Topology] sets it up when asked:
//
//   - x-dead-letter-exchange (Topology.DeadLetterExchange) and
//     x-dead-letter-routing-key (Topology.DeadLetterRoutingKey): where a
//     quorum queue sends a message it gives up on.
//   - x-delivery-limit (Topology.DeliveryLimit): how many times a quorum
//     queue redelivers a message before giving up on it. RabbitMQ 3.x has
//     no limit unless one is set; RabbitMQ 4.x sets 20 by default. Without
//     a dead-letter exchange a message over the limit is DELETED. Set it
//     above the inbox consumer's MaxDeliveries (and count the redeliveries
//     that connection drops cause), so that the inbox parks a failing
//     message before RabbitMQ drops or dead-letters it.
//
// Drop acknowledges, so messages the inbox parks never reach the
// dead-letter exchange; what arrives there is what a delivery limit or a
// message TTL (x-message-ttl) removed.
package amqp
