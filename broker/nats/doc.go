// Package nats publishes Courier messages to NATS JetStream.
//
// A message becomes a JetStream message on subject SubjectPrefix+Topic
// (followed by the key's token with Config.KeySubjects; see Key
// partitions) with
// its payload as data and these headers (package broker/wire writes and
// reads them, as it does every broker's):
//
//	Nats-Msg-Id          message id: JetStream drops a re-publication inside
//	                     the stream's duplicate window (2 minutes by default)
//	Courier-Key          ordering key
//	Courier-Type         message type
//	Courier-Version      schema version
//	Courier-Occurred-At  RFC 3339 time
//	Content-Type         payload media type
//
// plus the message's own headers (trace context, correlation id, …).
// FromNATS leaves JetStream's own headers (Nats-*) out of a decoded
// message's headers.
//
// # CloudEvents
//
// With PublisherConfig.CloudEvents set, a message also carries the
// CloudEvents attributes of the NATS binding's binary content mode (ce-id,
// ce-source, ce-type, ce-subject, … and content-type; see package
// broker/cloudevents), next to Courier's headers, which stay. FromNATS
// leaves those attributes out of a decoded message's headers, and decodes a
// message that carries CloudEvents attributes instead of Courier's headers
// (see package broker/wire).
//
// # Errors
//
// Publish tells failures of the message from failures of the broker (see
// broker.Publisher). A message published on a subject no stream binds fails
// with an error wrapping ErrNoStream that names the subject: JetStream is up
// and will refuse it until a stream binds the subject, so it counts against
// the message, and the relay makes it a dead letter after MaxAttempts while
// other messages keep flowing. NATS answers such a publish with "no
// responders" (or not at all, when a plain subscriber listens on the
// subject), which it also does while JetStream is not ready: a server still
// starting, a clustered stream without a leader. Publish therefore asks
// JetStream which stream binds the subject before it blames the message, and
// reports broker.ErrUnavailable unless JetStream answers that none does. It
// asks before the first publish on each subject, too, so that such a message
// fails at once rather than after AckTimeout.
//
// Refusals that no retry can change wrap broker.ErrRejected, so the relay
// makes the message a dead letter at once with the broker's reason: a
// message larger than the server's max_payload (checked by the client
// before sending) or than the max_msg_size of the stream that binds its
// subject, headers over JetStream's 64 KiB, an invalid subject. A subject
// no stream binds is deliberately not among them: binding it is a change of
// configuration the message may live to see.
//
// # Atomic batches: a key's run pipelined
//
// On nats-server 2.12 and later JetStream takes atomic batches (ADR-50): up
// to 1,000 messages (the server's batch limit, max_msgs) sent with the headers
// Nats-Batch-Id, Nats-Batch-Sequence and, on the last, Nats-Batch-Commit,
// stored together and in order, or none of them, into a stream that allows
// atomic publish (allow_atomic). EnsureStream creates streams that allow it
// on such servers (StreamConfig.NoAtomicBatches turns that off); an existing
// stream keeps its settings (nats stream edit NAME --allow-batch).
//
// The Publisher implements broker.OrderKeeper with them. KeepsKeyOrder
// reports true when the connected server's version (from its INFO) is 2.12
// or later and every stream that captures the publisher's subjects allows
// atomic publish (looked up at most every 30 seconds); the relay then hands
// Publish each key's run of messages at once. Publish sends each run one of
// two ways, both keeping the key's order:
//
//   - As atomic batches, each waiting for the acknowledgement of the one
//     before, up to PublisherConfig.MaxBatches keys' batches at once. A
//     batch saves round trips but costs the server a fixed time of its own,
//     about 2 to 9 ms of CPU on nats-server 2.15 however small the batch.
//   - In rounds: every such key's next message at once, each sent only
//     after the acknowledgement of the key's message before it. A round
//     costs one round trip, whatever the number of keys.
//
// A call's longest runs go as batches and every other run, single
// messages included, in rounds, at the same time, split where the batches'
// cost (PublisherConfig.BatchTime each) plus the rounds' (the longest run
// left to them, times the round trip the Publisher measures) is least. One hot key's run of 1,000 is one batch; 500
// keys of two messages each are two rounds, not 500 batches. A batch is
// stored whole or not at all; when a batch or a message fails, the key's
// later messages in the call are not sent: they fail with
// broker.ErrUnavailable ("held back"). The promise holds even where batches
// are not to be had after all (a stream whose allow_atomic was turned off, a
// reconnect to an older server): the run then goes one message after the
// other, each waiting for the acknowledgement of the one before.
//
// Within a batch:
//
//   - A message the server would refuse for good (over max_payload or the
//     stream's max_msg_size with the batch headers, headers over 64 KiB) is
//     left out of the batch and published alone, between the batches before
//     and after it, so that it alone is rejected (broker.ErrRejected) and
//     the rest of its key's run is stored in order. A batch refused without
//     saying which message is at fault (a message gone missing, a bad
//     request) is published again one message at a time.
//   - Nats-Msg-Id still deduplicates, but JetStream refuses a whole batch
//     that holds a message id it has stored within the duplicate window (and
//     nats-server 2.12.0 refuses Nats-Msg-Id in batches altogether). A run
//     published again after part of it was stored (a relay that crashed
//     before it recorded the outcome) is therefore refused as a batch; the
//     Publisher then publishes it one message at a time, each duplicate
//     acknowledged and dropped as usual, until a message is stored afresh,
//     and goes on in batches from there. On a server that refuses the header
//     in batches it stops using batches (KeepsKeyOrder turns false).
//   - A server configured with a smaller batch limit (jetstream { limits {
//     batch { max_msgs } } }) refuses the batch, saying its limit; the
//     Publisher's batches take that size from then on. Too many batches open
//     on the stream (the limit max_inflight_per_stream, 50 by default) makes a
//     batch wait and try again, a few times, before it fails as
//     broker.ErrUnavailable.
//
// With PublisherConfig.NoAtomicBatches, on servers older than 2.12 (Debian's
// 2.9, say) and with streams that do not allow atomic
// publish, KeepsKeyOrder is false and Publish sends every message of a call
// at once, as before: the relay then publishes a key's messages one round
// trip apart.
//
// # Key partitions
//
// A durable consumer hands its messages to whichever instance pulls next,
// so several instances of one consumer apply a key's messages out of order.
// SubscriberConfig.Partitions shares the keys among the instances instead:
// each key is delivered to one instance at a time, in stream order, and
// with the inbox consumer's KeepOrder applied in order across all of them.
//
// It needs the key in the subject: publishers and subscribers set
// Config.KeySubjects, which makes a message's subject
// SubjectPrefix+Topic+"."+KeyToken(Key). The subscription then makes (once,
// for every instance) a work-queue stream, PartitionStream(Stream,
// Consumer), that sources the subscription's Topics from Stream through
// JetStream's partition() subject transform: each message lands there as
// "<partition>.<subject>", the partition a hash of the key's token alone,
// so a key's messages of every topic share one partition. The stream starts
// at the beginning of Stream, or just after what a durable consumer of the
// same name had acknowledged (switching a consumer over does not apply
// again what it applied), and carries Courier's mark in its description;
// a stream of that name without the mark, or made for other Topics or
// another partition count, is refused and left alone.
//
// The instances find each other on the core NATS subject
// "_COURIER.GROUP.<stream>.<consumer>", where each announces itself every
// MemberHeartbeat; one unheard of for MemberTimeout is gone. The partitions
// are spread evenly over the instances alive (rendezvous hashing, so a
// change moves few), and an instance consumes each partition it holds
// through a consumer of its own on the partition stream, "p<N>-<member>",
// filtering "<N>.>". JetStream lets no two consumers of a work queue
// filter the same subjects, which is what makes one instance the holder of
// a partition: a newcomer's consumer is refused until the holder deletes
// its own. Giving a partition up waits (at most MemberTimeout) for the
// deliveries handed out to be settled and their acknowledgements to reach
// the server, then deletes the consumer, so that the next holder starts at
// the oldest message not acknowledged and nothing comes twice. A holder
// that is gone (killed, frozen, cut off) has its consumer deleted by the
// instance that takes the partition over; what it had not acknowledged
// comes again, ahead of what follows, and the inbox skips what was
// applied. An instance that wakes from a freeze notices the gap, gives up
// every partition it held and takes its share again. Subscriber.Partitions
// says what an instance holds; its Logger says when that changes.
//
// A partition's deliveries reach Next in order and none is skipped: every
// delivery of a consumer carries its consumer sequence, one more than the
// delivery before, and the subscriber hands nothing on past a gap. Gaps
// happen: a pull that misses two of its heartbeats (a process paused, a
// host or network that stalled) pulls again while the server still answers
// the pull before, and nats.go drops what overflows its buffer of Prefetch
// deliveries as a slow consumer; what the server sends while the
// connection is down is lost. The server counts those delivered and would
// send them again only after AckWait, behind later messages of their keys.
// At the first delivery that does not follow the one before, the
// subscriber deletes the partition's consumer and makes a new one,
// "p<N>-<member>_<k>" (k counts the consumers the instance made of the
// partition), which starts again at the oldest message not acknowledged;
// what was handed out before the gap comes again, and the inbox skips what
// was applied. A pull's heartbeat is 2s, or two fifths of MemberTimeout
// when that is shorter (at least 500ms).
//
// It needs nats-server 2.10 or later (stream sources with subject
// transforms). On an older server (Debian's 2.9) NewSubscriber refuses
// Partitions, naming the server's version: run one instance of the
// consumer there (KeepOrder keeps a key's order inside it), or partition
// by hand, one topic and one consumer per partition.
//
// The partitions are fixed: every instance of a consumer must use the same
// Partitions, Topics and KeySubjects (an instance that disagrees is
// refused at start, and ignored by the others). To change them, let the
// old instances drain the partition stream, stop them, delete the stream
// (nats stream rm NAME) and start the new ones; the new stream then starts
// over from the beginning of Stream unless a durable consumer of the same
// name marks how far it got. Make Partitions at least the most instances
// you will run; an instance beyond that many holds nothing and stands by.
//
// # Reading back
//
// A Reader reads back what a stream holds without consuming it, for an
// audit (courier audit) that compares it with what the outbox says was
// published: the messages stored in a window of time, through an ordered
// consumer of its own that it deletes afterwards, and the time from which
// the stream's limits have kept everything. Only streams with limits
// retention can be read back: a work-queue or interest stream removes a
// message once it is consumed.
//
// # Durability
//
// A JetStream acknowledgement means the server has written the message to
// its store, not that the store reached the disk: by default nats-server
// flushes its file store lazily (sync_interval, two minutes), so a power loss
// or kernel crash can lose acknowledged messages (an independent 2025
// analysis of NATS 2.12 showed exactly that), and the outbox row is already
// marked published by then. Run the server with
//
//	jetstream { sync_interval: always }
//
// (server.Options.SyncAlways when embedded) to fsync every write before
// acknowledging it, at a cost in throughput, or run a three-node cluster with
// replicated streams so that an ack means a quorum holds the message. The
// embedded default (package embedded) syncs always.
package nats
