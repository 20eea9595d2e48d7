// Package outbox writes messages into the outbox table inside the caller's
// own database transaction, so a business change and the messages announcing
// it commit or roll back together. A relay (package relay) later moves the
// committed messages to the broker.
//
// A Writer is generic over the caller's transaction type; pick the inserter
// of your database and driver:
//
//	w := outbox.New(postgres.Pgx(), outbox.Config{})         // pgx.Tx
//	w := outbox.New(postgres.DatabaseSQL(), outbox.Config{}) // *sql.Tx on PostgreSQL
//	w := outbox.New(sqlite.DatabaseSQL(), outbox.Config{})   // *sql.Tx on SQLite
//	w := outbox.New(mysql.DatabaseSQL(), outbox.Config{})    // *sql.Tx on MySQL, MariaDB
//
//	tx, err := pool.Begin(ctx)
//	if err != nil {
//		return err
//	}
//	defer tx.Rollback(ctx) // undoes the order unless Commit ran first
//	if _, err := tx.Exec(ctx, "INSERT INTO orders …"); err != nil {
//		return err
//	}
//	msg, err := courier.NewJSON("orders", orderID, OrderPlaced{…})
//	if err != nil {
//		return err
//	}
//	if err := w.Write(ctx, tx, msg); err != nil {
//		return err // the order goes with it: never one without the other
//	}
//	return tx.Commit(ctx) // the order and its message, or neither
//
// Write fails, naming the fix, when Courier's tables do not exist yet: run
// `courier migrate` (or the Driver's Migrate) before the first write.
//
// Messages of one key are published in the order they were written when the
// transactions that write the key are serialised: lock the aggregate's row
// (SELECT … FOR UPDATE) or save it with a version check in the same
// transaction, as consistent aggregates do anyway. Package relay's
// documentation (Ordering) states the contract, including what happens to
// concurrent, unserialised writers of one key.
//
// Aggregates can record domain events while a use case runs (embed
// [Events]) and have them written, then cleared, with one call to
// [Writer.WriteEvents].
//
// When the relay runs in the same process, Config.Notify wakes it right
// after a write (see store.LocalNotifier): the way to low latency on
// databases without notifications of their own, such as SQLite and MySQL.
//
// # Scheduled messages
//
// [Writer.Schedule] writes messages to be published later, at a time or
// after a delay, in the same transaction as the change that calls for
// them; [Writer.Cancel] cancels one in another transaction, atomically
// with the change that makes it moot (a saga cancelling its own timeout):
//
//	reminder, err := courier.NewJSON("payments", orderID, PaymentReminder{…})
//	if err != nil {
//		return err
//	}
//	if err := w.Schedule(ctx, tx, outbox.After(30*time.Minute), reminder); err != nil {
//		return err
//	}
//	…
//	err := w.Cancel(ctx, tx2, reminder.ID) // in the transaction that records the payment
//	// nil: never published; store.ErrAlreadyDue: it was (or is being)
//	if err != nil && !errors.Is(err, store.ErrAlreadyDue) {
//		return err
//	}
//
// A scheduled message waits outside the outbox until it falls due, so it
// holds nothing back meanwhile: not its key's other messages, not the
// relay. A relay publishes it at or after its due time by the database's
// clock, never before; package relay's documentation (Ordering) says where
// it takes its place among its key's messages.
package outbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/internal/msgtrace"
	"github.com/courier-go/courier/store"
)

// Config tunes a Writer. The zero value is ready to use.
type Config struct {
	// Limits caps payload and header sizes; zero fields take Courier's
	// defaults (1 MiB payload, 64 KiB headers). Keep them under the broker's
	// own limit, or oversized messages end as dead letters.
	Limits courier.Limits
	// Notify, if set, is called after every Write (and WriteEvents) that
	// inserted messages: after the insert, before the caller commits. Set it
	// to the Signal method of the store.LocalNotifier that a relay in this
	// process uses, so the relay wakes within milliseconds of the commit
	// instead of at its next poll (the notifier wakes it again shortly after
	// each signal, since the first claim may come before the commit). A
	// rolled-back transaction costs the relay an empty claim. It must return
	// quickly; Signal never blocks. Nil: no wake-ups from writers.
	Notify func()
}

// Writer adds messages to the outbox in a caller's transaction of type TTx.
// It is safe for concurrent use and holds no state between calls.
type Writer[TTx any] struct {
	ins    store.Inserter[TTx]
	limits courier.Limits
	notify func()
}

// New returns a Writer that inserts with ins.
func New[TTx any](ins store.Inserter[TTx], cfg Config) *Writer[TTx] {
	return &Writer[TTx]{ins: ins, limits: cfg.Limits, notify: cfg.Notify}
}

// Write validates msgs and inserts them into the outbox in tx, in the order
// given. Nothing is written when any message is invalid: the error wraps
// courier.ErrInvalidMessage and names the message's index and field. Writing
// no messages is a no-op. After a successful insert it calls Config.Notify.
//
// When ctx carries an OpenTelemetry span (the request being served, or the
// process span of the inbox consumer running the handler), Write records
// its trace context in each message's traceparent and tracestate headers
// (W3C Trace Context), replacing any the message had: the relay's send span
// and the consumers' process spans link to it. The caller's messages are
// not changed; the stored copies carry the headers.
func (w *Writer[TTx]) Write(ctx context.Context, tx TTx, msgs ...courier.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	msgs, err := w.prepare(ctx, msgs)
	if err != nil {
		return err
	}
	if err := w.ins.Insert(ctx, tx, msgs); err != nil {
		return err
	}
	w.notified()
	return nil
}

// prepare records ctx's trace context in copies of msgs and validates
// them, naming the first invalid one.
func (w *Writer[TTx]) prepare(ctx context.Context, msgs []courier.Message) ([]courier.Message, error) {
	msgs = msgtrace.Inject(ctx, msgs)
	for i := range msgs {
		if err := msgs[i].Validate(w.limits); err != nil {
			if len(msgs) == 1 {
				return nil, fmt.Errorf("outbox: %w", err)
			}
			return nil, fmt.Errorf("outbox: message %d of %d: %w", i+1, len(msgs), err)
		}
	}
	return msgs, nil
}

// notified calls Config.Notify, when set.
func (w *Writer[TTx]) notified() {
	if w.notify != nil {
		w.notify()
	}
}

// At is a due time for Schedule: the moment t.
func At(t time.Time) store.Due { return store.Due{At: t} }

// After is a due time for Schedule: d after the scheduling statement runs,
// by the database's clock (the Driver's Clock when it has one).
func After(d time.Duration) store.Due { return store.Due{After: d} }

// ErrCannotSchedule is returned by Schedule and Cancel when the Writer's
// inserter is not a store.Scheduler (every dialect's inserter is; an
// inserter of your own may not be).
var ErrCannotSchedule = errors.New("outbox: the Writer's inserter cannot schedule messages (it is not a store.Scheduler): use a dialect's inserter, such as postgres.Pgx() or a Driver's Inserter()")

// Schedule validates msgs and writes them in tx, to be published at or
// after due (At or After), in the order given; nothing is written when a
// message is invalid, as with Write, nor when due is zero (use Write to
// publish at once). A scheduled message occurs at its due time: that is
// its OccurredAt once published. Its id stays its own, so Cancel can name
// it; schedule a message once (a second Schedule of the same id fails).
// Until it falls due it is in no relay's way, and courier status counts it
// as scheduled (see package relay, Ordering, for where it goes when due).
// It records the trace context and calls Config.Notify as Write does.
func (w *Writer[TTx]) Schedule(ctx context.Context, tx TTx, due store.Due, msgs ...courier.Message) error {
	s, ok := w.ins.(store.Scheduler[TTx])
	if !ok {
		return ErrCannotSchedule
	}
	if due.At.IsZero() && due.After <= 0 {
		return fmt.Errorf("outbox: schedule: the due time is zero: give outbox.At(t) or outbox.After(d) with d > 0, or Write the messages to publish them at once: %w", courier.ErrInvalidMessage)
	}
	if len(msgs) == 0 {
		return nil
	}
	msgs, err := w.prepare(ctx, msgs)
	if err != nil {
		return err
	}
	if err := s.Schedule(ctx, tx, due, msgs); err != nil {
		return err
	}
	w.notified()
	return nil
}

// Cancel cancels the scheduled message id in tx: once tx commits, it is
// never published. It returns nil when it cancelled the message, an error
// wrapping store.ErrAlreadyDue when the message fell due already (it is
// published, or being published: a handler of it must expect it), and one
// wrapping store.ErrNotScheduled when no scheduled message has that id
// (never scheduled, cancelled already, or due so long ago that its record
// was trimmed). A release that runs while tx is open passes the message
// over, so the cancel holds if tx commits.
func (w *Writer[TTx]) Cancel(ctx context.Context, tx TTx, id uuid.UUID) error {
	s, ok := w.ins.(store.Scheduler[TTx])
	if !ok {
		return ErrCannotSchedule
	}
	return s.Cancel(ctx, tx, id)
}

// EventSource is anything that records messages while a use case runs,
// typically an aggregate that embeds [Events].
type EventSource interface {
	// PendingEvents returns the messages recorded and not yet written.
	PendingEvents() []courier.Message
	// ClearEvents forgets them.
	ClearEvents()
}

// WriteEvents writes the pending events of every source into the outbox in
// tx, in order, then clears them, so a second call (or a retried save) cannot
// write them twice. If writing fails nothing is cleared and the error is
// returned. Sources are cleared once the insert succeeds, not at commit: if tx
// later rolls back, discard or reload the aggregates, whose state rolled back
// with it.
func (w *Writer[TTx]) WriteEvents(ctx context.Context, tx TTx, sources ...EventSource) error {
	var msgs []courier.Message
	for _, s := range sources {
		msgs = append(msgs, s.PendingEvents()...)
	}
	if err := w.Write(ctx, tx, msgs...); err != nil {
		return err
	}
	for _, s := range sources {
		s.ClearEvents()
	}
	return nil
}

// Events records domain events on an aggregate. Embed it and call Record from
// the aggregate's methods; it implements [EventSource]. The zero value is
// ready to use. It is not safe for concurrent use, like the aggregate itself.
type Events struct {
	pending []courier.Message
}

// Record adds a message to the pending events.
func (e *Events) Record(msg courier.Message) { e.pending = append(e.pending, msg) }

// RecordJSON builds a JSON message with courier.NewJSON and records it.
func (e *Events) RecordJSON(topic, key string, v any, opts ...courier.Option) error {
	msg, err := courier.NewJSON(topic, key, v, opts...)
	if err != nil {
		return err
	}
	e.Record(msg)
	return nil
}

// PendingEvents implements EventSource.
func (e *Events) PendingEvents() []courier.Message { return e.pending }

// ClearEvents implements EventSource.
func (e *Events) ClearEvents() { e.pending = nil }
