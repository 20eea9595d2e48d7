package postgres

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/courier-go/courier/store"
)

// Notifier wakes relays with LISTEN/NOTIFY, without making writers pay for it
// while the relays are busy (see the trigger in the first migration):
//
//   - a relay that runs out of work calls Arm, which takes the outbox's wake
//     lock exclusively on a session connection;
//   - a writer's insert tries that lock shared for the rest of its
//     transaction; it only NOTIFYs when the try fails, that is when a relay
//     is waiting;
//   - Arm fails while a writer's transaction holds the lock shared: its rows
//     are about to commit, and the relay polls again shortly instead;
//   - once Arm succeeds, every writer that got the lock before has committed
//     (locks are released after commit), so one more claim sees their rows,
//     and every later writer notifies.
//
// LISTEN needs a session: behind PgBouncer in transaction mode it never
// fires. Give the Notifier a direct connection string (it may differ from the
// pool's); it uses two connections, one listening and one holding the lock.
// When they are down, Arm reports false and relays fall back to polling.
type Notifier struct {
	connString string
	log        *slog.Logger

	wake      chan struct{}
	listening atomic.Bool

	mu       sync.Mutex // guards lockConn and armed
	lockConn *pgx.Conn
	armed    bool
	lockKey  int64
}

var _ store.Notifier = (*Notifier)(nil)

// NewNotifier returns a Notifier that connects with connString (a URL or
// key=value string on the outbox's database and schema). A nil logger
// discards logs.
func NewNotifier(connString string, log *slog.Logger) (*Notifier, error) {
	if _, err := pgx.ParseConfig(connString); err != nil {
		return nil, fmt.Errorf("postgres: listener connection string: %w", err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Notifier{connString: connString, log: log, wake: make(chan struct{}, 1)}, nil
}

// Wake implements store.Notifier.
func (n *Notifier) Wake() <-chan struct{} { return n.wake }

func (n *Notifier) signal() {
	select {
	case n.wake <- struct{}{}:
	default:
	}
}

// Run implements store.Notifier: it listens until ctx is done, reconnecting
// with backoff when the connection drops.
func (n *Notifier) Run(ctx context.Context) error {
	defer n.closeLockConn()
	delay := 100 * time.Millisecond
	for {
		err := n.listen(ctx)
		n.listening.Store(false)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		n.log.Warn("outbox listener disconnected; polling until it is back", "error", err, "retry_in", delay)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(delay):
		}
		delay = min(delay*2, 5*time.Second)
	}
}

func (n *Notifier) listen(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, n.connString)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	oid, err := outboxOID(ctx, conn)
	if err != nil {
		return err
	}
	channel := "courier_outbox_" + strconv.FormatInt(oid, 10)
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		return err
	}
	n.listening.Store(true)
	n.signal() // rows may have committed while we were not listening
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return err
		}
		n.signal()
	}
}

// Arm implements store.Notifier.
func (n *Notifier) Arm(ctx context.Context) (bool, error) {
	if !n.listening.Load() {
		return false, nil
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.armed {
		return true, nil
	}
	if n.lockConn == nil {
		conn, err := pgx.Connect(ctx, n.connString)
		if err != nil {
			return false, fmt.Errorf("postgres: wake lock connection: %w", err)
		}
		oid, err := outboxOID(ctx, conn)
		if err != nil {
			conn.Close(context.WithoutCancel(ctx))
			return false, err
		}
		n.lockConn, n.lockKey = conn, wakeLockClass<<32|oid
	}
	var ok bool
	if err := n.lockConn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", n.lockKey).Scan(&ok); err != nil {
		n.closeLockConnLocked()
		return false, fmt.Errorf("postgres: arm wake-ups: %w", err)
	}
	n.armed = ok
	return ok, nil
}

// Disarm implements store.Notifier.
func (n *Notifier) Disarm(ctx context.Context) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.armed {
		return nil
	}
	n.armed = false
	if _, err := n.lockConn.Exec(ctx, "SELECT pg_advisory_unlock($1)", n.lockKey); err != nil {
		n.closeLockConnLocked() // closing the session releases the lock too
		return fmt.Errorf("postgres: disarm wake-ups: %w", err)
	}
	return nil
}

func (n *Notifier) closeLockConn() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.closeLockConnLocked()
}

func (n *Notifier) closeLockConnLocked() {
	if n.lockConn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		n.lockConn.Close(ctx)
		n.lockConn = nil
	}
	n.armed = false
}

// wakeLockClass is the high half of the wake-up advisory lock ("cour", as in
// the trigger function); the low half is the outbox table's oid, so schemas in
// one database do not share locks. Claims lock "clai" the same way (see
// courier_claim).
const wakeLockClass = int64(0x636f7572)

// outboxOID returns the OID of the courier_outbox table the search_path
// finds.
func outboxOID(ctx context.Context, q querier) (int64, error) {
	var oid int64
	if err := q.QueryRow(ctx, "SELECT 'courier_outbox'::regclass::oid::bigint").Scan(&oid); err != nil {
		return 0, fmt.Errorf("postgres: find courier_outbox: %w", err)
	}
	return oid, nil
}
