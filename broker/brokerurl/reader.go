package brokerurl

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/courier-go/courier/broker"
)

// errNotOpen is Reader's error on a Broker that Open did not return.
var errNotOpen = errors.New("brokerurl: no broker is open: open one with Open")

// CanReadBack returns nil when the broker u names keeps what it is sent in
// a form Broker.Reader reads back (NATS JetStream, Kafka), and otherwise
// the error that Reader would return, saying why (its Kind's NoReadBack):
// check it before opening anything.
func (u URL) CanReadBack() error {
	if u.kind == nil {
		return nil
	}
	return u.kind.NoReadBack
}

// Reader returns a broker.Reader of what the broker keeps, for an audit
// that compares it with what the outbox says was published. Each broker's
// Kind says what it reads back (see its package):
//
//   - NATS: the JetStream stream the relay publishes into, Options.Stream
//     (default couriernats.DefaultStream, "COURIER"; a NATS URL names no
//     stream), its subjects mapped to topics by Options.SubjectPrefix,
//     NoPrefix and KeySubjects, read over the Broker's connection. With
//     topics, only the messages of those topics are passed; since is the
//     stream's (see couriernats.Reader).
//   - Kafka: the Kafka topics of topics (the URL's topic_prefix added),
//     through a client of the Reader's own (see kafka.Reader). topics are
//     required: Kafka has no wildcard over Courier's topics. A topic that
//     does not exist fails here, wrapping kafka.ErrNoTopic.
//   - RabbitMQ and webhooks: an error saying why nothing can be read
//     back (URL.CanReadBack): a queue hands each message to one consumer
//     and forgets it, and an endpoint keeps nothing Courier could read.
//
// The Reader belongs to the Broker: use it while the Broker is open, whose
// Close closes it too. It also implements io.Closer, to let go of it (and
// of a Kafka Reader's client) sooner; that leaves the Broker open. Reader
// fails once the Broker is closed.
func (b *Broker) Reader(ctx context.Context, topics []string) (broker.Reader, error) {
	if b.opened == nil {
		return nil, errNotOpen
	}
	if err := b.url.CanReadBack(); err != nil || b.opened.Reader == nil {
		return nil, cmp.Or(err, fmt.Errorf("%s keeps nothing Courier can read back", b.url.Where))
	}
	br, release, err := b.opened.Reader(ctx, topics)
	if err != nil {
		return nil, err
	}
	r := &reader{Reader: br, b: b, close: release}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		r.release()
		return nil, fmt.Errorf("brokerurl: %s is closed: open it again to read it back", b.url.Where)
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
