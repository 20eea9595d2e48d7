package kafka

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
)

// Publisher produces messages to Kafka through a franz-go client it owns.
// It is safe for concurrent use; Close it when done.
type Publisher struct {
	cl  *kgo.Client
	cfg PublisherConfig
	// mu makes one call's records all buffered before any is sent (the
	// client flushes manually), so that a failure fails every later
	// record of its partition in the call: see KeepsKeyOrder.
	mu sync.Mutex
}

var (
	_ broker.Publisher   = (*Publisher)(nil)
	_ broker.OrderKeeper = (*Publisher)(nil)
)

// NewPublisher returns a Publisher on the cluster cfg names. It does not
// connect yet: the first Publish does, and an unreachable cluster shows up
// there as broker.ErrUnavailable. It fails when cfg is invalid (see
// PublisherConfig.Validate).
func NewPublisher(cfg PublisherConfig) (*Publisher, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg.CloudEvents = cfg.CloudEvents.Clone()
	opts := append([]kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.ClientID(clientID),
		kgo.ProducerBatchMaxBytes(int32(cfg.MaxMessageBytes)),
		kgo.RecordDeliveryTimeout(cfg.AckTimeout),
		kgo.ManualFlushing(),
		kgo.MaxBufferedRecords(maxBuffered),
	}, cfg.Options...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafka: new client: %w", err)
	}
	return &Publisher{cl: cl, cfg: cfg}, nil
}

// Client returns the franz-go client the Publisher produces with.
func (p *Publisher) Client() *kgo.Client { return p.cl }

// Close flushes nothing and closes the client: records still unacknowledged
// fail, and their Publish calls report broker.ErrUnavailable.
func (p *Publisher) Close() { p.cl.Close() }

// ErrNoTopic is wrapped by the error Publish returns for a message whose
// Kafka topic does not exist (and the cluster does not create topics on
// first use). Kafka is up; the message cannot be stored until an operator
// creates the topic or the message's topic is corrected, so the failure
// counts against the message (it is neither broker.ErrUnavailable nor
// broker.ErrRejected).
var ErrNoTopic = errors.New("kafka: the topic does not exist")

// Publish implements broker.Publisher. It hands every message to the client
// (records of one key go to one partition, in slice order) and waits for
// Kafka's acknowledgements (acks=all), at most AckTimeout or until ctx ends.
//
// Errors, per message:
//
//   - broker.ErrUnavailable: no acknowledgement in time (the cluster is
//     unreachable, a partition has no leader, too few in-sync replicas),
//     ctx ended, the client is closed, or Kafka answered with an error it
//     calls retriable after the client's own retries. Also any error that
//     is not one of Kafka's: a network failure is not the message's fault.
//   - broker.ErrRejected, for good: a record larger than MaxMessageBytes
//     (refused by the client) or than the topic's max.message.bytes
//     (MESSAGE_TOO_LARGE, RECORD_LIST_TOO_LARGE), a record the broker calls
//     invalid (INVALID_RECORD), a topic name Kafka cannot hold (over 249
//     characters, or other than letters, digits, '.', '_' and '-'), however
//     the cluster answers it (INVALID_TOPIC_EXCEPTION, unknown topic or no
//     answer). Each error names the topic and the fix.
//   - ErrNoTopic, counted: the topic does not exist (the client asks the
//     cluster's metadata a few times first, see franz-go's
//     UnknownTopicRetries).
//   - Any other error of Kafka's (not authorised to write the topic, a
//     policy violation, a timestamp out of range) counts against the
//     message without being permanent.
//
// Kafka refuses a whole batch when the batch is over the topic's
// max.message.bytes, or when one of its records is invalid or has a
// timestamp out of range, and franz-go then fails every record buffered for
// that partition with the same answer, innocent messages among them.
// Publish therefore produces each message that failed so alone, in order,
// and reports what Kafka says of it alone: only a message too large or
// invalid by itself is rejected. After a message of a key that is not stored, other
// than rejected for good, the later messages of its key in msgs are not
// produced again: they fail with broker.ErrUnavailable, so that a key's
// order holds (see KeepsKeyOrder).
func (p *Publisher) Publish(ctx context.Context, msgs []courier.Message) []error {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.AckTimeout)
	defer cancel()
	errs := p.produceLegal(ctx, msgs)
	type topicKey struct{ topic, key string }
	var held map[topicKey]error // keys with a message not stored, for KeepsKeyOrder
	for i, err := range errs {
		k := topicKey{msgs[i].Topic, msgs[i].Key}
		if first, ok := held[k]; ok {
			if err != nil {
				errs[i] = broker.Unavailable(fmt.Errorf("kafka: topic %q: not stored: an earlier message of key %q failed: %w", p.cfg.Topic(msgs[i].Topic), msgs[i].Key, first))
			}
			continue
		}
		if oneRecordsFault(err) && ctx.Err() == nil {
			err = p.produce(ctx, msgs[i:i+1])[0]
		}
		if err == nil {
			errs[i] = nil
			continue
		}
		errs[i] = p.classify(&msgs[i], err)
		if !broker.Permanent(errs[i]) {
			if held == nil {
				held = make(map[topicKey]error)
			}
			held[k] = errs[i]
		}
	}
	return errs
}

// produceLegal is produce for the messages whose topic name Kafka can
// hold; the others fail at once, refused for good (see classify), instead
// of after the client's metadata retries or the record's timeout.
func (p *Publisher) produceLegal(ctx context.Context, msgs []courier.Message) []error {
	legal := make([]courier.Message, 0, len(msgs))
	for i := range msgs {
		if legalTopic(p.cfg.Topic(msgs[i].Topic)) {
			legal = append(legal, msgs[i])
		}
	}
	if len(legal) == len(msgs) {
		return p.produce(ctx, msgs)
	}
	produced := p.produce(ctx, legal)
	errs := make([]error, len(msgs))
	for i := range msgs {
		if legalTopic(p.cfg.Topic(msgs[i].Topic)) {
			errs[i], produced = produced[0], produced[1:]
		} else {
			errs[i] = errIllegalTopic
		}
	}
	return errs
}

// errIllegalTopic is the error produceLegal gives a message whose topic
// name Kafka cannot hold.
var errIllegalTopic = errors.New("not produced")

// KeepsKeyOrder implements broker.OrderKeeper: it is true, so the relay
// hands the Publisher a key's run of messages at once. Records of one key go
// to one partition, whose order the idempotent producer keeps across its
// retries; when a record fails, franz-go fails the partition's later
// records too, and Publish reports every later message of the key as not
// stored, also when it produces a message again alone (see Publish).
func (p *Publisher) KeepsKeyOrder() bool { return true }

// oneRecordsFault reports whether err may be the fault of one record of its
// batch: Kafka answers for a whole batch, and franz-go then fails every
// record buffered for the partition with that answer.
func oneRecordsFault(err error) bool {
	return errors.Is(err, kerr.MessageTooLarge) || errors.Is(err, kerr.InvalidRecord) || errors.Is(err, kerr.InvalidTimestamp)
}

// maxBuffered is the most records the client buffers: twice the relay's
// largest batch. A call with more fails the rest as an outage.
const maxBuffered = 20_000

// produce produces msgs and waits for each promise or for ctx; it returns
// the raw errors (nil for acknowledged records). One call at a time buffers
// all its records, then flushes them: the client sends nothing before every
// record of the call is buffered. Were a record buffered after an earlier
// record of its partition failed, franz-go would send it in a new batch,
// stored ahead of the failed record's retry.
func (p *Publisher) produce(ctx context.Context, msgs []courier.Message) []error {
	p.mu.Lock()
	defer p.mu.Unlock()
	type result struct {
		i   int
		err error
	}
	// Buffered for every promise, so a promise that comes after Publish
	// returned does not block the client.
	results := make(chan result, len(msgs))
	for i := range msgs {
		p.cl.Produce(ctx, p.toRecord(&msgs[i]), func(_ *kgo.Record, err error) {
			results <- result{i, err}
		})
	}
	_ = p.cl.Flush(ctx) // its only error is ctx's, seen below
	errs := make([]error, len(msgs))
	pending := make([]bool, len(msgs))
	for i := range pending {
		pending[i] = true
	}
	for left := len(msgs); left > 0; left-- {
		select {
		case r := <-results:
			errs[r.i], pending[r.i] = r.err, false
		case <-ctx.Done():
			for i, waiting := range pending {
				if waiting {
					errs[i] = fmt.Errorf("no acknowledgement: %w", ctx.Err())
				}
			}
			return errs
		}
	}
	return errs
}

// toRecord converts a message to a Kafka record, with its CloudEvents
// attributes when the Publisher has them on.
func (p *Publisher) toRecord(m *courier.Message) *kgo.Record {
	return p.cfg.record(m, p.cfg.CloudEvents)
}

// classify sorts err, the failure of m's record (see Publish).
func (p *Publisher) classify(m *courier.Message, err error) error {
	topic := p.cfg.Topic(m.Topic)
	var ke *kerr.Error
	isKafka := errors.As(err, &ke)
	var netErr net.Error
	if errors.Is(err, kerr.InvalidTopicException) || !legalTopic(topic) {
		// A name Kafka never holds: a broker that answers no more than
		// "unknown topic" for it (or nothing, until the record times out)
		// must not hold the key back for good as an outage.
		return broker.Rejected(fmt.Errorf("kafka: topic %q (message topic %q) is not a valid Kafka topic name (%w): use at most 249 characters of letters, digits, '.', '_' and '-', and check the topic prefix",
			topic, m.Topic, err))
	}
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, kgo.ErrRecordTimeout), errors.Is(err, kgo.ErrRecordRetries),
		errors.Is(err, kgo.ErrClientClosed), errors.Is(err, kgo.ErrMaxBuffered), errors.As(err, &netErr):
		return broker.Unavailable(fmt.Errorf("kafka: topic %q: %w", topic, err))
	case errors.Is(err, kerr.MessageTooLarge), errors.Is(err, kerr.RecordListTooLarge):
		return broker.Rejected(fmt.Errorf("kafka: topic %q: %w: the message's payload is %d bytes, over the client's MaxMessageBytes (%d) or the topic's max.message.bytes: shrink the payload (store large data elsewhere and send a reference) or raise both limits, then replay the dead letter",
			topic, err, len(m.Payload), p.cfg.MaxMessageBytes))
	case errors.Is(err, kerr.InvalidRecord):
		return broker.Rejected(fmt.Errorf("kafka: topic %q: %w: the broker's validation refused the record (a schema or policy check on the topic): fix the message, then replay the dead letter", topic, err))
	case errors.Is(err, kerr.UnknownTopicOrPartition), errors.Is(err, kerr.UnknownTopicID):
		return fmt.Errorf("%w: %q (message topic %q): create it (kafka-topics.sh --create --topic %s, or EnsureTopic) or check the message's topic and the topic prefix (%v)",
			ErrNoTopic, topic, m.Topic, topic, err)
	case isKafka && (ke.Retriable || errors.Is(err, kerr.CorruptMessage) || errors.Is(err, kerr.OutOfOrderSequenceNumber) ||
		errors.Is(err, kerr.InvalidProducerEpoch) || errors.Is(err, kerr.ClusterAuthorizationFailed)):
		// Kafka's own trouble or the producer's state, not the message:
		// a record corrupted in transit, the idempotent producer's
		// sequence, or a client not allowed to produce at all.
		return broker.Unavailable(fmt.Errorf("kafka: topic %q: %w", topic, err))
	case isKafka:
		return fmt.Errorf("kafka: topic %q: %w", topic, err)
	}
	return broker.Unavailable(fmt.Errorf("kafka: topic %q: %w", topic, err))
}
