package brokerurl

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/courier-go/courier/broker"
	"github.com/courier-go/courier/broker/kafka"
	couriernats "github.com/courier-go/courier/broker/nats"
)

// Why Reader reads nothing back from some brokers.
var (
	errAMQPKeepsNothing    = errors.New("RabbitMQ queues hand each message to one consumer and keep no copy: the audit reads NATS JetStream streams and Kafka topics")
	errWebhookKeepsNothing = errors.New("a webhook endpoint keeps nothing Courier can read back: the audit reads NATS JetStream streams and Kafka topics")
)

// CanReadBack returns nil when the broker u names keeps what it is sent in
// a form Broker.Reader reads back (NATS JetStream, Kafka), and otherwise
// the error that Reader would return, saying why: check it before
// opening anything.
func (u URL) CanReadBack() error {
	switch u.Kind {
	case AMQP:
		return errAMQPKeepsNothing
	case Webhook:
		return errWebhookKeepsNothing
	}
	return nil
}

// Reader returns a broker.Reader of what the broker keeps, for an audit
// that compares it with what the outbox says was published:
//
//   - NATS: the JetStream stream the relay publishes into, Options.Stream
//     (default couriernats.DefaultStream, "COURIER"; a NATS URL names no
//     stream), its subjects mapped to topics by Options.NATS, read over
//     the Broker's connection. With topics, only the messages of those
//     topics are passed; since is the stream's (see couriernats.Reader).
//   - Kafka: the Kafka topics of topics (the URL's topic_prefix added),
//     through a client of the Reader's own (see kafka.Reader). topics are
//     required: Kafka has no wildcard over Courier's topics. A topic that
//     does not exist fails here, wrapping kafka.ErrNoTopic.
//   - RabbitMQ and webhooks: an error saying why nothing can be read
//     back: a queue hands each message to one consumer and forgets it,
//     and an endpoint keeps nothing Courier could read.
//
// The Reader belongs to the Broker: use it while the Broker is open, whose
// Close closes it too. It also implements io.Closer, to let go of it (and
// of a Kafka Reader's client) sooner; that leaves the Broker open. Reader
// fails once the Broker is closed.
func (b *Broker) Reader(ctx context.Context, topics []string) (broker.Reader, error) {
	var r *reader
	switch b.kind {
	case NATS:
		nr, err := couriernats.NewReader(b.nc, couriernats.ReaderConfig{Config: b.opts.NATS, Stream: b.opts.stream()})
		if err != nil {
			return nil, err
		}
		r = &reader{Reader: nr}
		if len(topics) > 0 {
			r.Reader = onlyTopics{r: nr, topics: topics}
		}
	case Kafka:
		if len(topics) == 0 {
			return nil, fmt.Errorf("%s %s is a Kafka cluster, which keeps no list of Courier's topics: name the topics to read with --topic", b.opts.flag(), b.where)
		}
		kr, err := kafka.NewReader(ctx, kafka.ReaderConfig{Config: b.url.Kafka, Topics: topics})
		if err != nil {
			return nil, err
		}
		r = &reader{Reader: kr, close: kr.Close}
	case AMQP, Webhook:
		return nil, b.url.CanReadBack()
	default:
		return nil, fmt.Errorf("brokerurl: no broker is open: open one with Open")
	}
	r.b = b
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		r.release()
		return nil, fmt.Errorf("brokerurl: %s is closed: open it again to read it back", b.where)
	}
	b.readers = append(b.readers, r)
	return r, nil
}

// closeReaders closes the Readers made by Reader, and makes Reader fail
// from then on.
func (b *Broker) closeReaders() {
	b.mu.Lock()
	readers := b.readers
	b.readers, b.closed = nil, true
	b.mu.Unlock()
	for _, r := range readers {
		r.release()
	}
}

// reader is a Reader of a Broker (see Broker.Reader).
type reader struct {
	broker.Reader
	b     *Broker
	close func() // what it opened of its own; nil: nothing
	once  sync.Once
}

// Close lets go of the Reader, leaving its Broker open. It may be called
// more than once.
func (r *reader) Close() error {
	r.b.mu.Lock()
	r.b.readers = slices.DeleteFunc(r.b.readers, func(o *reader) bool { return o == r })
	r.b.mu.Unlock()
	r.release()
	return nil
}

func (r *reader) release() {
	r.once.Do(func() {
		if r.close != nil {
			r.close()
		}
	})
}

// onlyTopics passes on what r reads back of topics alone.
type onlyTopics struct {
	r      broker.Reader
	topics []string
}

func (o onlyTopics) ReadBack(ctx context.Context, from, to time.Time, fn func(broker.Stored) error) (time.Time, error) {
	return o.r.ReadBack(ctx, from, to, func(s broker.Stored) error {
		if !slices.Contains(o.topics, s.Message.Topic) {
			return nil
		}
		return fn(s)
	})
}
