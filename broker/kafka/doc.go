// Package kafka publishes Courier messages to Apache Kafka and consumes them
// through a consumer group, with github.com/twmb/franz-go.
//
// A message becomes a Kafka record on topic TopicPrefix+Topic whose key is
// the message's key and whose value is its payload, with these headers
// (package broker/wire writes and reads them, as it does every broker's):
//
//	Courier-Id           message id (the inbox's deduplication id)
//	Courier-Key          ordering key (also the record key)
//	Courier-Type         message type
//	Courier-Version      schema version
//	Courier-Occurred-At  RFC 3339 time
//	Content-Type         payload media type
//
// plus the message's own headers (trace context, correlation id, …). The
// record's timestamp is the time of publication, not OccurredAt, so that a
// replayed dead letter is not at once older than the topic's retention.
//
// # CloudEvents
//
// With PublisherConfig.CloudEvents set, a record also carries the
// CloudEvents attributes of the Kafka binding's binary content mode (ce_id,
// ce_source, ce_type, ce_subject, … and content-type; see package
// broker/cloudevents), next to Courier's headers, which stay. FromRaw
// leaves those attributes out of a decoded message's headers, and decodes a
// record that carries CloudEvents attributes instead of Courier's headers
// (see package broker/wire; the record key stands in for a missing
// ce_subject).
//
// # Partitions and order
//
// Records are partitioned by franz-go's default partitioner, which hashes a
// record key with murmur2 exactly as the Java client does: a key lands on the
// same partition whichever client produced it, and the messages of one key
// keep their order within it. The producer is franz-go's default: acks=all
// and idempotent, so a retry inside the client neither duplicates nor
// reorders records. Adding partitions to a topic moves keys to other
// partitions; order holds again only for messages published after the
// change.
//
// The Publisher is a broker.OrderKeeper: the relay hands it a key's whole
// run of messages in one call instead of one per round trip. Publish buffers
// every record of a call before the client sends any (manual flushing, one
// call at a time), so a batch Kafka refuses fails all the later records of
// its partition in the call, and those are reported not stored: nothing of
// a key is stored after a message of it that failed.
//
// # Consumer groups: keys shared among instances
//
// The members of a consumer group (Subscribers with one Group) share the
// topics' partitions, and so the keys: a key's records reach one member at
// a time, in order (broker.KeySharer). When members come and go the group
// rebalances; the Subscriber commits a partition's offset only past the
// records acknowledged in an unbroken run (after the inbox's transaction
// committed), and, when the partition is revoked, commits that much and
// drops the records it had not handed out. The partition's next member
// therefore starts at or before its oldest record not applied; records
// that come again are skipped by the inbox, and one that the previous
// member is still applying waits for its transaction. A member that is
// killed or frozen keeps its partitions until the group's session timeout
// (kgo.SessionTimeout in SubscriberConfig.Options; 45s by default) expires;
// one that wakes after losing them commits nothing more for them and drops
// their records it had not handed out. With the inbox consumer's KeepOrder, a key's messages are applied
// in order across every member.
//
// # Features
//
// What the conformance suite (package broker/brokertest) checks of this
// package, declared in its TestConformance:
//
//   - No deduplication by message id: Kafka's idempotent producer removes
//     the duplicates of its own retries, not a message the relay publishes
//     again after a crash. Consumers use the inbox, which does.
//   - Per-key order from one publisher (see above), also pipelined: many
//     messages of a key in one call (broker.OrderKeeper).
//   - A message larger than MaxMessageBytes is refused for good
//     (broker.ErrRejected).
//   - An unacknowledged delivery comes again after its subscriber closes, or
//     after a rebalance moved its partition; Attempt is counted by the
//     Subscriber, in memory, so it starts again at 1 in a new Subscriber.
//
// # Errors
//
// Publish sorts Kafka's answers as package broker asks (see
// Publisher.Publish for each case): an unreachable cluster, timeouts and
// Kafka's retriable errors wrap broker.ErrUnavailable; a record Kafka
// refuses for what it is (too large, invalid, an invalid topic name) wraps
// broker.ErrRejected; a topic that does not exist wraps ErrNoTopic and
// counts against the message, since an operator may create it.
//
// # Reading back
//
// A Reader reads back the records a topic's partitions keep, without a
// consumer group and without committing, for an audit (courier audit)
// that compares them with what the outbox says was published: the
// records of a window of time, each partition from the offset Kafka finds
// by timestamp to its end offset, and the time from which retention has
// kept everything.
//
// # Durability
//
// With acks=all Kafka acknowledges a record once every in-sync replica has
// it in memory; Kafka does not fsync before acknowledging and relies on
// replication instead. Run topics with replication.factor=3 and
// min.insync.replicas=2 so that an acknowledged record survives the loss of
// a broker; with one replica an acknowledged record can be lost in a power
// failure (the outbox row is marked published by then).
package kafka
