package tenant

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
	"github.com/courier-go/courier/inbox"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/dburl"
)

// ConsumerConfig configures a Consumer. Zero fields take the defaults
// given.
type ConsumerConfig struct {
	// Source lists the tenants. Required. It is read when a message
	// names a tenant not read yet, and again when the tenants were read
	// longer than Refresh ago.
	Source Source
	// Refused is where the deliveries that belong to no tenant are
	// parked (consume-side dead letters, reason store.ReasonMalformed):
	// a message without Header, or whose Header names a tenant Source
	// does not list even when read again after the message came, and a
	// delivery that does not decode. Required: the consumer store of a
	// database of the consuming service's own, not a tenant's, migrated
	// as the tenants' are. Replay them from there once their tenant is
	// listed: they are applied in its database.
	Refused store.ConsumerStore
	// Inbox configures the consumer as package inbox does. Its
	// MessageContext must be nil: NewConsumer sets it.
	Inbox inbox.ConsumerConfig
	// MaxOpen bounds the tenants' databases open at once. To open
	// another, the one used least recently among those not in use is
	// closed; when every one is in use, the message waits. Default
	// DefaultMaxOpen (100).
	MaxOpen int
	// MaxConns bounds the connections of each tenant's database (not of
	// a SQLite file). Default: Inbox.Concurrency, or its default.
	MaxConns int
	// ConnectTimeout bounds opening a tenant's database. Default
	// DefaultConnectTimeout (5s).
	ConnectTimeout time.Duration
	// Refresh is how old the tenants read may be before they are read
	// again, so that a tenant's new URL is used. Default DefaultRefresh
	// (30s).
	Refresh time.Duration
	// Reread is the least time between two reads of Source: messages of
	// tenants not read yet wait for the next read, at most Reread away.
	// Default DefaultReread (1s).
	Reread time.Duration
	// ReplayScan is how often the parked deliveries an operator asked to
	// replay are looked for in the tenants' databases that are not open,
	// which a pass opens one at a time; those open and Refused are looked
	// in every Inbox.ReplayEvery. Default DefaultReplayScan (1m).
	ReplayScan time.Duration
	// Open opens a tenant's database. Default: dburl.Open with the
	// connection bound and timeout above.
	Open func(ctx context.Context, t Tenant, opts dburl.Options) (*dburl.DB, error)
	// Clock is the time the consumer measures Refresh, Reread and
	// ReplayScan with. Default: the real clock. A test sets a clock it
	// moves (memstore.Clock's Now) to age the tenants read without
	// waiting; the inbox consumer reads Inbox.Clock.
	Clock courier.Clock
}

// The defaults of ConsumerConfig's zero fields, besides Config's.
const (
	DefaultReread     = time.Second
	DefaultReplayScan = time.Minute
)

func (c *ConsumerConfig) setDefaults() {
	if c.MaxOpen == 0 {
		c.MaxOpen = DefaultMaxOpen
	}
	if c.MaxConns == 0 {
		c.MaxConns = c.Inbox.Concurrency
	}
	if c.MaxConns == 0 {
		c.MaxConns = inbox.DefaultConcurrency
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = DefaultConnectTimeout
	}
	if c.Refresh == 0 {
		c.Refresh = DefaultRefresh
	}
	if c.Reread == 0 {
		c.Reread = DefaultReread
	}
	if c.ReplayScan == 0 {
		c.ReplayScan = DefaultReplayScan
	}
	if c.Open == nil {
		c.Open = func(ctx context.Context, t Tenant, opts dburl.Options) (*dburl.DB, error) {
			return dburl.Open(ctx, t.URL, opts)
		}
	}
}

func (c *ConsumerConfig) validate() error {
	switch {
	case c.Source == nil:
		return errors.New("tenant: ConsumerConfig.Source is nil: give the tenants (List, File or Query)")
	case c.Refused == nil:
		return errors.New("tenant: ConsumerConfig.Refused is nil: give the consumer store that keeps the messages of no tenant, such as the consuming service's own database's")
	case c.Inbox.MessageContext != nil:
		return errors.New("tenant: ConsumerConfig.Inbox.MessageContext is set: NewConsumer sets it to find each message's tenant; leave it nil")
	case c.MaxOpen < 1:
		return fmt.Errorf("tenant: ConsumerConfig.MaxOpen is %d: use 1 or more", c.MaxOpen)
	case c.MaxConns < 1:
		return fmt.Errorf("tenant: ConsumerConfig.MaxConns is %d: use 1 or more", c.MaxConns)
	case c.ConnectTimeout <= 0:
		return fmt.Errorf("tenant: ConsumerConfig.ConnectTimeout is %s: use more than 0", c.ConnectTimeout)
	case c.Refresh < time.Second:
		return fmt.Errorf("tenant: ConsumerConfig.Refresh is %s: use 1s or more", c.Refresh)
	case c.Reread <= 0:
		return fmt.Errorf("tenant: ConsumerConfig.Reread is %s: use more than 0", c.Reread)
	case c.ReplayScan <= 0:
		return fmt.Errorf("tenant: ConsumerConfig.ReplayScan is %s: use more than 0", c.ReplayScan)
	}
	return c.Inbox.Validate()
}

// Validate reports whether NewConsumer would accept c: nil, or an error
// naming the field and the fix (Inbox's as inbox.ConsumerConfig.Validate
// names them). Zero fields take their defaults first, as in NewConsumer.
func (c ConsumerConfig) Validate() error {
	c.setDefaults()
	return c.validate()
}

// Consumer is an inbox consumer of a subscription that carries many
// tenants' messages. Each message is applied in the database of the
// tenant its Header names, with the same guarantee as inbox.Consumer's:
// its inbox marker and the handler's effects commit in one transaction
// there, so a message delivered again is a duplicate there. Its recorded
// failures and, once it is parked, the parked delivery are kept there
// too, where an operator replays it (courier dlq replay --tenant). A
// message of no tenant is parked in ConsumerConfig.Refused and touches no
// tenant's database. Each replay pass and each cleanup of old markers
// and failures goes over every tenant's database and Refused.
//
// The handler finds its message's tenant with From, and the tenant's
// database, in which its transaction runs, with DB. Create a Consumer
// with NewConsumer and start it with Run.
type Consumer struct {
	*inbox.Consumer[*sql.Tx]
	dbs *databases
}

// NewConsumer returns a consumer named name (the name every instance of
// the consuming service shares, as inbox.New's) that receives from sub
// and applies messages with h. It fails when the configuration is
// invalid, naming the field.
func NewConsumer(sub broker.Subscriber, name string, h inbox.Handler[*sql.Tx], cfg ConsumerConfig) (*Consumer, error) {
	if sub == nil || h == nil {
		return nil, errors.New("tenant: NewConsumer needs a subscriber and a handler")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	log := cfg.Inbox.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("consumer", name)
	r := &router{dbs: newDatabases(cfg, log), refused: cfg.Refused, replayScan: cfg.ReplayScan, clock: cfg.Clock, log: log}
	ib, err := inbox.New[*sql.Tx](r, name)
	if err != nil {
		return nil, err
	}
	ic := cfg.Inbox
	ic.MessageContext = withMessage
	c, err := inbox.NewConsumer(ib, sub, r, h, ic)
	if err != nil {
		return nil, err
	}
	return &Consumer{Consumer: c, dbs: r.dbs}, nil
}

// Run consumes as inbox.Consumer.Run does until ctx ends, then closes the
// tenants' databases.
func (c *Consumer) Run(ctx context.Context) error {
	defer c.dbs.close()
	return c.Consumer.Run(ctx)
}

// OpenDatabases returns how many tenants' databases are open now (at
// most ConsumerConfig.MaxOpen).
func (c *Consumer) OpenDatabases() int { return c.dbs.openCount() }

// From returns the tenant whose message a Consumer's handler applies,
// given the handler's context; false outside a handler's run.
func From(ctx context.Context) (Tenant, bool) {
	m := messageOf(ctx)
	if m == nil {
		return Tenant{}, false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.t, m.t.Name != ""
}

// DB returns the database of the tenant whose message a Consumer's
// handler applies, in which the handler's transaction runs, given the
// handler's context; nil outside a handler's run. Its Exec writes with ?
// placeholders whatever the tenant's dialect, and its Inserter writes to
// the tenant's outbox in the handler's transaction.
func DB(ctx context.Context) *dburl.DB {
	m := messageOf(ctx)
	if m == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.db
}

// message is the message a Consumer works on, as its context carries it
// (inbox.ConsumerConfig.MessageContext) to the router and the handler.
type message struct {
	name     string // its Header; "" when it has none
	conflict bool   // it has several Header, in different cases, that differ

	mu      sync.Mutex
	placed  bool      // t or refused is set
	t       Tenant    // its tenant
	refused error     // why it belongs to no tenant; wraps courier.ErrMalformed
	db      *dburl.DB // its tenant's database, while its transaction runs
}

type messageKey struct{}

// withMessage is the Consumer's inbox.ConsumerConfig.MessageContext.
func withMessage(ctx context.Context, msg courier.Message) context.Context {
	name, conflict := stampOf(msg.Headers)
	return context.WithValue(ctx, messageKey{}, &message{name: name, conflict: conflict})
}

// messageOf returns the message ctx carries, nil when none.
func messageOf(ctx context.Context) *message {
	m, _ := ctx.Value(messageKey{}).(*message)
	return m
}

// router is the inbox (store.Inbox) and the consumer store
// (store.ConsumerStore) of a Consumer: it does what each call asks in the
// database of the tenant of the message the call's context carries, or,
// for the parked deliveries and the cleanup, in every tenant's database
// and Refused.
type router struct {
	dbs        *databases
	refused    store.ConsumerStore
	replayScan time.Duration
	clock      courier.Clock
	log        *slog.Logger

	mu sync.Mutex
	// The tenant whose database keeps each parked delivery the last
	// ReplayRequested returned, by id; the zero Tenant for Refused. The
	// consumer unparks each one, or records its failed replay, before it
	// asks again.
	replaying map[int64]Tenant
	// Where the next pass of ReplayRequested, DeleteMarkers and
	// DeleteFailures starts: the tenant a pass stopped at, with more to
	// do; "" is Refused, then the tenants in name order.
	replayFrom, markersFrom, failuresFrom string
	// When the last pass of ReplayRequested over every tenant's database
	// that ended began.
	scanned time.Time
}

var (
	_ store.Inbox[*sql.Tx] = (*router)(nil)
	_ store.ConsumerStore  = (*router)(nil)
)

// place returns m's tenant, or refused (wrapping courier.ErrMalformed)
// when m belongs to no tenant. err says the tenants could not be read:
// m is placed by a later call.
func (r *router) place(ctx context.Context, m *message) (t Tenant, refused, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.placed {
		return m.t, m.refused, nil
	}
	if m.conflict {
		m.placed = true
		m.refused = fmt.Errorf("%w: it carries several %s headers, in different cases, naming different tenants, so it is applied in no tenant's database", courier.ErrMalformed, Header)
		return Tenant{}, m.refused, nil
	}
	if m.name == "" {
		m.placed = true
		m.refused = fmt.Errorf("%w: no %s header names its tenant, so it is applied in no tenant's database", courier.ErrMalformed, Header)
		return Tenant{}, m.refused, nil
	}
	t, err = r.dbs.lookup(ctx, m.name)
	switch {
	case errors.Is(err, errUnknown):
		m.placed = true
		m.refused = fmt.Errorf("%w: its %s header names tenant %q, which Source does not list (read again after the message came): add the tenant, then replay the message",
			courier.ErrMalformed, Header, m.name)
	case err != nil:
		return Tenant{}, nil, err
	default:
		m.placed, m.t = true, t
	}
	return m.t, m.refused, nil
}

// InTx runs fn in a transaction of the database of the tenant of ctx's
// message. It fails with the reason, wrapping courier.ErrMalformed, when
// the message belongs to no tenant.
func (r *router) InTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	m := messageOf(ctx)
	if m == nil {
		return errors.New("tenant: the context carries no message: run the consumer that NewConsumer returns")
	}
	t, refused, err := r.place(ctx, m)
	if err != nil {
		return err
	}
	if refused != nil {
		return refused
	}
	return r.dbs.use(ctx, t, false, func(db *dburl.DB) error {
		return db.InTx(ctx, func(tx *sql.Tx) error {
			m.hold(db)
			defer m.hold(nil)
			return fn(tx)
		})
	})
}

// hold records db as the database of m's transaction (nil: none).
func (m *message) hold(db *dburl.DB) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.db = db
}

// Mark records the marker in tx, which InTx began in the database of the
// tenant of ctx's message.
func (r *router) Mark(ctx context.Context, tx *sql.Tx, consumer string, id uuid.UUID) (bool, error) {
	db := DB(ctx)
	if db == nil {
		return false, errors.New("tenant: Mark called outside a transaction of InTx: call it in InTx's fn, with InTx's context")
	}
	return db.Inbox().Mark(ctx, tx, consumer, id)
}

// on runs fn with the consumer store of the tenant of ctx's message: that
// of its tenant's database, or Refused when it belongs to no tenant or ctx
// carries none (a delivery that did not decode).
func (r *router) on(ctx context.Context, fn func(cs store.ConsumerStore) error) error {
	m := messageOf(ctx)
	if m == nil {
		return fn(r.refused)
	}
	t, refused, err := r.place(ctx, m)
	switch {
	case err != nil:
		return err
	case refused != nil:
		return fn(r.refused)
	}
	return r.dbs.use(ctx, t, false, func(db *dburl.DB) error { return fn(db.ConsumerStore()) })
}

// Park parks the delivery where its message belongs (see on).
func (r *router) Park(ctx context.Context, p store.Parked) error {
	return r.on(ctx, func(cs store.ConsumerStore) error { return cs.Park(ctx, p) })
}

// RecordFailure records the failure where ctx's message belongs (see on).
func (r *router) RecordFailure(ctx context.Context, consumer string, id uuid.UUID, failure store.Attempt) (hist []store.Attempt, err error) {
	err = r.on(ctx, func(cs store.ConsumerStore) error {
		hist, err = cs.RecordFailure(ctx, consumer, id, failure)
		return err
	})
	return hist, err
}

// ClearFailures clears the failures where ctx's message belongs (see on).
func (r *router) ClearFailures(ctx context.Context, consumer string, id uuid.UUID) error {
	return r.on(ctx, func(cs store.ConsumerStore) error { return cs.ClearFailures(ctx, consumer, id) })
}

// ReplayRequested returns up to limit parked deliveries an operator asked
// to replay, from Refused and the tenants' databases that are open, and
// from every tenant's once ReplayScan has passed since the last such pass,
// starting where the last call stopped. It returns no two deliveries of
// one id (ids are each database's own): the second waits for the next
// call.
func (r *router) ReplayRequested(ctx context.Context, consumer string, limit int) ([]store.Parked, error) {
	r.mu.Lock()
	started := r.clock.Now()
	all := started.Sub(r.scanned) >= r.replayScan
	r.mu.Unlock()
	var out []store.Parked
	from := map[int64]Tenant{}
	done, err := r.each(ctx, &r.replayFrom, all, func(t Tenant, cs store.ConsumerStore) (bool, error) {
		ps, err := cs.ReplayRequested(ctx, consumer, limit-len(out))
		for _, p := range ps {
			if other, ok := from[p.ID]; ok && other != t {
				return true, err
			}
			from[p.ID] = t
			out = append(out, p)
		}
		return len(out) >= limit, err
	})
	r.mu.Lock()
	r.replaying = from
	if all && done {
		r.scanned = started
	}
	r.mu.Unlock()
	if err != nil && len(out) > 0 {
		r.log.Warn("replay requests not read everywhere; replaying those read", "error", err)
		err = nil
	}
	return out, err
}

// Unpark deletes a parked delivery the last ReplayRequested returned, in
// the database that keeps it.
func (r *router) Unpark(ctx context.Context, id int64) error {
	return r.replayed(ctx, id, func(cs store.ConsumerStore) error { return cs.Unpark(ctx, id) })
}

// ReplayFailed records the failed replay of a parked delivery the last
// ReplayRequested returned, in the database that keeps it.
func (r *router) ReplayFailed(ctx context.Context, id int64, reason string) error {
	return r.replayed(ctx, id, func(cs store.ConsumerStore) error { return cs.ReplayFailed(ctx, id, reason) })
}

// replayed runs fn with the consumer store that keeps parked delivery id.
func (r *router) replayed(ctx context.Context, id int64, fn func(cs store.ConsumerStore) error) error {
	r.mu.Lock()
	t, ok := r.replaying[id]
	delete(r.replaying, id)
	r.mu.Unlock()
	switch {
	case !ok:
		return fmt.Errorf("tenant: parked delivery %d is not one the last ReplayRequested returned", id)
	case t.Name == "":
		return fn(r.refused)
	}
	return r.dbs.use(ctx, t, true, func(db *dburl.DB) error { return fn(db.ConsumerStore()) })
}

// DeleteMarkers deletes up to limit markers older than before, from every
// tenant's database in turn, starting where the last call stopped.
func (r *router) DeleteMarkers(ctx context.Context, before time.Time, limit int) (int64, error) {
	return r.deleteOld(ctx, &r.markersFrom, limit, func(cs store.ConsumerStore, n int) (int64, error) {
		return cs.DeleteMarkers(ctx, before, n)
	})
}

// DeleteFailures deletes up to limit recorded failures older than
// before, from Refused and every tenant's database in turn, starting
// where the last call stopped.
func (r *router) DeleteFailures(ctx context.Context, before time.Time, limit int) (int64, error) {
	return r.deleteOld(ctx, &r.failuresFrom, limit, func(cs store.ConsumerStore, n int) (int64, error) {
		return cs.DeleteFailures(ctx, before, n)
	})
}

// deleteOld deletes up to limit rows with del, database by database: the
// consumer calls again while it returns limit, and the next call goes on
// where this one stopped, so that every database is cleaned.
func (r *router) deleteOld(ctx context.Context, from *string, limit int, del func(cs store.ConsumerStore, n int) (int64, error)) (int64, error) {
	var total int64
	_, err := r.each(ctx, from, true, func(_ Tenant, cs store.ConsumerStore) (bool, error) {
		n, err := del(cs, limit-int(total))
		total += n
		return total >= int64(limit), err
	})
	return total, err
}

// each calls fn with the consumer stores of Refused and of the tenants'
// databases (every tenant's when all is set, else those open), in name
// order from *from round to the one before it, until fn says to stop;
// *from is then where fn stopped, "" when it did not. A store that fails
// does not stop the pass: each goes on with the next, and returns the
// failures, each naming its tenant. done reports that the pass went
// round. Databases are opened as a scan's (see databases.use).
func (r *router) each(ctx context.Context, from *string, all bool, fn func(t Tenant, cs store.ConsumerStore) (stop bool, err error)) (done bool, err error) {
	var errs []error
	ts, err := r.dbs.list(ctx)
	if err != nil {
		errs = append(errs, err) // Refused is visited all the same
	}
	listed := err == nil
	places := append([]Tenant{{}}, ts...) // Refused, named "", comes first
	r.mu.Lock()
	start, _ := slices.BinarySearchFunc(places, *from, func(t Tenant, name string) int { return strings.Compare(t.Name, name) })
	r.mu.Unlock()
	stopAt := ""
	done = true
	for i := range places {
		t := places[(start+i)%len(places)]
		var stop bool
		switch {
		case t.Name == "":
			stop, err = fn(t, r.refused)
		case all || r.dbs.isOpen(t):
			err = r.dbs.use(ctx, t, true, func(db *dburl.DB) (err error) {
				stop, err = fn(t, db.ConsumerStore())
				return err
			})
		default:
			continue
		}
		if err != nil {
			where := "Refused"
			if t.Name != "" {
				where = "tenant " + t.Name
			}
			errs = append(errs, fmt.Errorf("%s: %w", where, err))
		}
		if stop || ctx.Err() != nil {
			stopAt, done = t.Name, false
			break
		}
	}
	r.mu.Lock()
	*from = stopAt
	r.mu.Unlock()
	return done && listed, errors.Join(errs...)
}
