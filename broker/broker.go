package broker

import (
	"context"
	"errors"
	"time"

	"github.com/courier-go/courier"
)

// Publisher sends messages to a broker.
type Publisher interface {
	// Publish sends every message in msgs and waits for the broker to
	// acknowledge each one, or for ctx to end. It returns one error per
	// message, in order: nil where the broker has acknowledged the message
	// (it will not be lost by the broker, within the broker's own durability
	// settings). Messages are handed to the broker in slice order.
	//
	// A failure that is not the message's fault (the broker is unreachable,
	// did not answer in time, or is not ready to store messages) must wrap
	// [ErrUnavailable], so the relay retries without counting it against the
	// message's attempts. Any other error counts as a failed attempt: the
	// broker answered and refused the message, because of the message (too
	// large, invalid) or because of where it goes (a subject no stream
	// binds, a topic that does not exist). Such a refusal repeats until
	// someone changes the message or the broker's configuration, so the
	// message must end up a dead letter rather than hold its key back for
	// ever; its error should name the destination and the fix. When an
	// error could mean either (NATS answers "no responders" both for a
	// subject no stream binds and for a JetStream that is still starting),
	// the implementation must find out which before counting it, and report
	// ErrUnavailable when it cannot tell: an outage must never produce dead
	// letters.
	//
	// A refusal that no retry can change, because the broker judged the
	// message itself (larger than the broker or the destination accepts, an
	// invalid subject or headers), should wrap [ErrRejected]: the relay then
	// makes the message a dead letter at once, with this error as its
	// reason, instead of retrying it MaxAttempts times. A refusal that an
	// operator may lift without touching the message (a subject no stream
	// binds yet) must not wrap ErrRejected: it is retried until MaxAttempts,
	// so binding the subject in time lets the message through. An error
	// wrapping both ErrUnavailable and ErrRejected is treated as
	// ErrUnavailable.
	Publish(ctx context.Context, msgs []courier.Message) []error
}

// OrderKeeper is implemented by a Publisher that can take several messages
// of one key in one Publish call and still keep their order, so that the
// relay hands it a key's run of messages at once ("pipelined") instead of
// waiting for each acknowledgement before it sends the next. Kafka's
// idempotent producer is such a publisher: it keeps a partition's order
// across its own retries, and fails a partition's later records when one
// fails.
//
// KeepsKeyOrder reports whether, for the Publish calls that follow, this
// promise holds: within one call, messages that share a topic and a key
// are stored by the broker in slice order; and when one of them fails with
// an error that does not wrap [ErrRejected], none of the later messages of
// that topic and key in the call is stored (each of them fails too). A
// message rejected for good does not hold back the later ones: the relay
// makes it a dead letter, and its key moves on.
//
// A publisher whose support depends on the broker (a server version, a
// stream setting) reports it when it knows; false keeps the relay at one
// message per key per round trip, which is always safe.
type OrderKeeper interface {
	KeepsKeyOrder() bool
}

// KeepsKeyOrder reports whether p implements [OrderKeeper] and keeps a key's
// order when pipelined.
func KeepsKeyOrder(p Publisher) bool {
	ok, is := p.(OrderKeeper)
	return is && ok.KeepsKeyOrder()
}

// ErrUnavailable marks publish errors caused by the broker rather than by the
// message: connection lost, timeouts, a broker or stream not ready to store
// messages. It does not cover a broker that answers that nothing accepts the
// message's subject: that counts against the message (see Publisher).
var ErrUnavailable = errors.New("broker unavailable")

// Unavailable wraps err so that errors.Is(result, ErrUnavailable) holds.
// The result's text is err's, prefixed with "broker unavailable: ". nil, and
// an error that wraps ErrUnavailable already, are returned as they are.
func Unavailable(err error) error { return mark(err, ErrUnavailable, "broker unavailable: ") }

// ErrRejected marks publish errors that are permanent: the broker refused the
// message for what it is (too large for the broker or for the stream that
// would store it, an invalid subject or invalid headers) and will refuse it
// on every attempt. The relay makes such a message a dead letter at once,
// with the broker's reason as its last error; replay it once the message's
// destination accepts it (a raised size limit) or discard it. It does not
// cover a destination that does not exist yet (see Publisher).
var ErrRejected = errors.New("broker rejected the message")

// Rejected wraps err so that errors.Is(result, ErrRejected) holds. The
// result's text is err's, prefixed with "rejected by the broker for good: ".
// nil, and an error that wraps ErrRejected already, are returned as they
// are.
func Rejected(err error) error { return mark(err, ErrRejected, "rejected by the broker for good: ") }

// Permanent reports whether err is a refusal for good: it wraps ErrRejected
// and not ErrUnavailable (an error wrapping both is an outage, see
// Publisher). The relay makes such a message a dead letter at once, without
// counting attempts, and a publisher that keeps a key's order
// ([OrderKeeper]) goes on with the key's later messages after it, since no
// retry of it will come.
func Permanent(err error) bool {
	if errors.Is(err, ErrUnavailable) {
		return false
	}
	return errors.Is(err, ErrRejected)
}

// markedError is err marked with one of the package's sentinel errors.
type markedError struct {
	sentinel error
	prefix   string // put before err's text
	err      error
}

// mark wraps err so that errors.Is(result, sentinel) holds, unless err is
// nil or wraps sentinel already.
func mark(err, sentinel error, prefix string) error {
	if err == nil || errors.Is(err, sentinel) {
		return err
	}
	return &markedError{sentinel: sentinel, prefix: prefix, err: err}
}

func (e *markedError) Error() string { return e.prefix + e.err.Error() }

func (e *markedError) Unwrap() []error { return []error{e.sentinel, e.err} }

// RetryAfterError is implemented by publish errors that know when the
// broker will take messages again: an HTTP endpoint that answered 429 or 503
// with a Retry-After header, a circuit breaker that is open for a while
// longer. Such errors also wrap ErrUnavailable; RetryAfter is the delay the
// broker asked for, from the moment the error was made (0: no earlier than
// at once). A relay may wait at least that long before it publishes to the
// broker again, instead of its own backoff. Use [RetryAfter] to find it in an
// error chain.
type RetryAfterError interface {
	error
	RetryAfter() time.Duration
}

// RetryAfter returns the delay of the first error in err's chain that
// implements [RetryAfterError], and whether there is one.
func RetryAfter(err error) (time.Duration, bool) {
	var ra RetryAfterError
	if errors.As(err, &ra) {
		return ra.RetryAfter(), true
	}
	return 0, false
}

// Subscriber hands a consumer the messages of its subscription, one
// delivery at a time, until they are acknowledged. Brokers redeliver a
// message that is neither acknowledged nor dropped.
type Subscriber interface {
	// Next waits for the next delivery, or for ctx to end.
	Next(ctx context.Context) (Delivery, error)
	// Decode turns a delivery's raw form back into a message; an error
	// wrapping courier.ErrMalformed means it never will be (bad or missing
	// headers). Consumers use it again when they replay a parked delivery.
	Decode(raw Raw) (courier.Message, error)
	// Close stops the subscription. Deliveries not yet acknowledged are
	// redelivered later, to this consumer or another.
	Close() error
}

// KeySharer is implemented by a Subscriber whose consumer's instances share
// the keys among them: the messages are spread by key over partitions,
// each partition is delivered to one instance at a time, and a partition's
// messages come in the order the broker stores them; the partitions move
// between instances as they come and go. A partition that moves starts at
// its new owner at or before its oldest message not acknowledged, so with
// an inbox consumer that keeps order (inbox.ConsumerConfig.KeepOrder), a
// key's messages are applied in order across every instance.
type KeySharer interface {
	// SharesKeys reports whether this subscriber shares its consumer's
	// keys with the consumer's other instances (a broker's setting may
	// turn it off).
	SharesKeys() bool
	// Partitions returns the partitions this instance consumes now.
	Partitions() []int
}

// SharesKeys reports whether s implements [KeySharer] and shares its
// consumer's keys among its instances.
func SharesKeys(s Subscriber) bool {
	k, ok := s.(KeySharer)
	return ok && k.SharesKeys()
}

// Delivery is one delivery of one message.
type Delivery interface {
	// Raw is the delivery as received.
	Raw() Raw
	// Attempt counts deliveries of this message to this consumer: 1 the
	// first time. It includes deliveries lost to crashes, so the inbox
	// consumer counts failed handler runs itself to decide when to park.
	Attempt() int
	// Ack confirms the message; it is not delivered again.
	Ack(ctx context.Context) error
	// Retry asks for redelivery after delay.
	Retry(ctx context.Context, delay time.Duration) error
	// Extend tells the broker the message is still being worked on, so it is
	// not redelivered meanwhile.
	Extend(ctx context.Context) error
	// Drop stops redelivery without processing (the message was parked).
	Drop(ctx context.Context) error
}

// Raw is a delivery as the broker handed it over.
type Raw struct {
	// Subject is the broker's address of the message (subject, topic,
	// routing key).
	Subject string `json:"subject"`
	// Headers are the delivery's headers.
	Headers map[string][]string `json:"headers,omitempty"`
	// Data is the body.
	Data []byte `json:"-"`
}
