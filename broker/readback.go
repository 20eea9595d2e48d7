package broker

import (
	"context"
	"time"

	"github.com/courier-go/courier"
)

// Stored is a message as a broker keeps it, read back by a [Reader]
// without consuming it.
type Stored struct {
	// Message is the message, decoded as the broker's subscriber decodes
	// it.
	Message courier.Message
	// At is when the broker stored it, on the broker's clock.
	At time.Time
	// Log and Offset are where the broker keeps it: an ordered log (a
	// NATS stream, a Kafka topic's partition, as "orders/2") and the
	// message's place in it. A log is delivered in offset order, so a
	// key's messages in one log reach its consumer in offset order.
	Log    string
	Offset int64
	// Err is why the stored message does not decode as a Courier message
	// (no message id, malformed headers), nil when it does; Message then
	// holds what could be read of it.
	Err error
}

// Reader reads back what a broker keeps, without consuming it, so that
// an audit can compare it with what the database says was published.
// NATS JetStream (a stream with limits retention) and Kafka keep messages
// after delivery and can be read back; a RabbitMQ queue hands each message
// to one consumer and forgets it, and a webhook endpoint keeps nothing
// Courier could read.
type Reader interface {
	// ReadBack calls fn with each message the broker stored at or after
	// from and before to, each log's in offset order, and returns since:
	// the time from which the broker still holds everything it stored,
	// when its limits (age, count, size) have removed messages stored
	// after from; the zero time when it holds all it stored since from.
	// An error fn returns ends the reading and is returned.
	ReadBack(ctx context.Context, from, to time.Time, fn func(Stored) error) (since time.Time, err error)
}
