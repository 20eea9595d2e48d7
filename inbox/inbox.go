// Package inbox applies each received message exactly once. A message may
// arrive more than once (brokers deliver at least once, relays republish
// after crashes); the inbox records a marker (consumer name + message id) in
// the same transaction as the handler's effects, including any outbox
// messages the handler writes, so either all of them commit or none do, and a
// message whose marker exists is acknowledged and skipped.
//
//	ib, err := inbox.New(postgres.NewDriver(pool).Inbox(), "billing")
//	if err != nil {
//		return err
//	}
//	res, err := ib.Handle(ctx, msg, func(ctx context.Context, tx pgx.Tx, msg courier.Message) error {
//		_, err := tx.Exec(ctx, "INSERT INTO charges …")
//		return err
//	})
//	if err != nil {
//		return err // nothing was kept: a later delivery tries again
//	}
//	// res == inbox.Duplicate: the charge was made by an earlier delivery.
//
// [Consumer] runs handlers on a broker subscription: bounded concurrency,
// optional per-key order, retries with backoff, recovery of handlers that
// panic, and parking (consume-side dead letters) for messages whose handler
// failed MaxDeliveries times or that can never be processed.
// [Router] dispatches by message type and version to typed handlers;
// upcasters ([Upcast]) turn old versions into the newest shape, and a
// version newer than the consumer knows (courier.ErrNewerVersion) waits,
// uncounted, for the consumer's deploy (ConsumerConfig.NewerVersionWait).
//
// # Ordered consumer groups
//
// With ConsumerConfig.KeepOrder a Consumer applies a key's messages one at
// a time, in the order it receives them, and other keys in parallel (up to
// Concurrency). Run several instances of one consumer and the order holds
// across all of them when the subscriber shares the keys among the
// instances (broker.KeySharer): a Kafka consumer group, and NATS and
// RabbitMQ subscribers with Partitions (broker/nats and broker/amqp,
// "Key partitions"). Each key is then delivered to one instance at a time;
// when instances come and go (a deploy, a crash, a process frozen past its
// heartbeat) the key moves, and its new owner starts at or before its
// oldest message not acknowledged. The inbox makes the handover safe: a
// message that comes again is skipped, and one that the previous owner is
// still applying (an instance that froze with a transaction open) waits
// for that transaction, inserting its marker, and is skipped if it
// committed. So each message is applied once, and only after every
// earlier message of its key, whichever instance applies it.
//
// What a handover costs: a graceful one (an instance added, or stopped
// with its context) waits for the leaving owner's deliveries to be
// settled; a crash or a freeze waits until the others notice (the
// broker's session timeout or the subscriber's MemberTimeout), and a key
// whose message a frozen instance was applying waits until that
// transaction ends. Have the database end a frozen instance's transaction:
// on PostgreSQL set idle_in_transaction_session_timeout for the consumers'
// role (a few seconds, longer than a handler's pauses between statements);
// MariaDB has idle_transaction_timeout; MySQL only innodb_lock_wait_timeout,
// which makes the waiting instance retry instead. docs/operations.md,
// "Consumers that share keys", has the numbers.
//
// # Held keys
//
// With ConsumerConfig.HoldKeys (topics, and KeepOrder), a parked message
// holds its key for its consumer: the key's later deliveries are parked
// behind it, unprocessed (store.ReasonHeld, store.Parked.Behind), while
// other keys go on. Replaying it (courier dlq replay) applies it, then
// the messages held behind it in order, then releases the key; a held
// message that fails on replay holds the key in turn; discarding it
// passes the hold on to them, and they are replayed in order. Asking to
// replay a held message replays its cause. Parking behind a hold and
// passing the hold on take turns on the hold's row in the database
// (store.KeyHolds), so no delivery is left behind a released key, and a
// consumer killed mid-replay resumes where it was: the inbox skips what it
// had applied. docs/operations.md, "Held keys (consumer)", has the rest.
//
// ConsumerConfig.Clock is the time the consumer reads (when a run failed,
// when a retry in place falls due, which markers are past their
// retention): a test gives it a clock it moves instead of waiting.
//
// Each handler run of a Consumer is an OpenTelemetry process span (kind
// consumer) linked to the trace context the message carries, the
// producer's: ConsumerConfig.TracerProvider chooses the provider. The
// handler's context holds the span, so the messages it writes to an outbox
// carry it on. ConsumerConfig.Observer receives every run and parked
// delivery, for metrics (package metrics).
package inbox

import (
	"context"
	"errors"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/store"
)

// Handler applies one message inside tx, the transaction that also records
// the message's inbox marker. Returning an error rolls both back; an error
// wrapping courier.ErrMalformed says the message can never be applied (the
// Consumer parks it at once instead of retrying); one wrapping
// courier.ErrNewerVersion says the consumer does not know the message's
// version yet (retried, uncounted, for ConsumerConfig.NewerVersionWait).
type Handler[TTx any] func(ctx context.Context, tx TTx, msg courier.Message) error

// Result says what Handle did with a message.
type Result int

const (
	// Applied: the handler ran and its effects committed with the marker.
	Applied Result = iota + 1
	// Duplicate: an earlier delivery was applied; the handler did not run.
	Duplicate
)

// String returns "applied" or "duplicate".
func (r Result) String() string {
	switch r {
	case Applied:
		return "applied"
	case Duplicate:
		return "duplicate"
	}
	return "unknown"
}

// Inbox applies messages once for one consumer.
type Inbox[TTx any] struct {
	st       store.Inbox[TTx]
	consumer string
}

// New returns the inbox of consumer (the name every instance of one
// consuming service shares, e.g. "billing") on st.
func New[TTx any](st store.Inbox[TTx], consumer string) (*Inbox[TTx], error) {
	if consumer == "" {
		return nil, errors.New("inbox: consumer name is empty: name the consuming service, e.g. \"billing\"")
	}
	if st == nil {
		return nil, errors.New("inbox: store is nil: pass the dialect's inbox, e.g. postgres.NewDriver(pool).Inbox()")
	}
	return &Inbox[TTx]{st: st, consumer: consumer}, nil
}

// Consumer returns the consumer name.
func (ib *Inbox[TTx]) Consumer() string { return ib.consumer }

// Handle applies msg with h unless this consumer applied it before. It opens
// a transaction, inserts the marker and runs h in it, and commits; if h fails
// nothing is kept and the error is returned, so a later delivery tries again.
// Two concurrent deliveries of one message run h once: the second waits for
// the first's marker and returns Duplicate if it committed.
func (ib *Inbox[TTx]) Handle(ctx context.Context, msg courier.Message, h Handler[TTx]) (Result, error) {
	res := Applied
	err := ib.st.InTx(ctx, func(tx TTx) error {
		fresh, err := ib.st.Mark(ctx, tx, ib.consumer, msg.ID)
		if err != nil {
			return err
		}
		if !fresh {
			res = Duplicate
			return nil
		}
		return h(ctx, tx, msg)
	})
	if err != nil {
		return 0, err
	}
	return res, nil
}
