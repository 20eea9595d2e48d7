package cdc_test

import (
	"context"
	"fmt"
	"hash/crc32"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/relay/cdc"
	"github.com/courier-go/courier/store/postgres"
)

// pause is a pgx tracer that holds a relay at a point of its own: the
// first statement that contains one of match waits there until release
// is closed (reached is closed meanwhile), or, with cancel set, ends the
// relay's context there instead.
type pause struct {
	match   []string
	armed   func() bool // nil: always
	cancel  context.CancelFunc
	reached chan struct{}
	release chan struct{}
	once    sync.Once
}

func newPause(match ...string) *pause {
	return &pause{match: match, reached: make(chan struct{}), release: make(chan struct{})}
}

func (p *pause) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if p.armed != nil && !p.armed() {
		return ctx
	}
	if len(p.match) > 0 && !slices.ContainsFunc(p.match, func(m string) bool { return strings.Contains(d.SQL, m) }) {
		return ctx
	}
	p.once.Do(func() {
		close(p.reached)
		if p.cancel != nil {
			p.cancel()
			return
		}
		<-p.release
	})
	return ctx
}

func (p *pause) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// pool returns a pool on the test's schema whose statements pass by p.
func (e *env) pool(p *pause) *pgxpool.Pool {
	e.t.Helper()
	cfg, err := pgxpool.ParseConfig(e.pg.URL)
	testenv.Must(e.t, err, "parse")
	cfg.ConnConfig.Tracer = p
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	testenv.Must(e.t, err, "pool")
	e.t.Cleanup(pool.Close)
	return pool
}

// signalLog is a slog handler that closes seen at the first record whose
// message contains want.
type signalLog struct {
	slog.Handler
	want string
	seen chan struct{}
	once *sync.Once
}

func (h signalLog) Handle(ctx context.Context, r slog.Record) error {
	if strings.Contains(r.Message, h.want) {
		h.once.Do(func() { close(h.seen) })
	}
	return h.Handler.Handle(ctx, r)
}

// A relay that starts while another one makes the slot, at the moment a
// transaction commits, publishes that transaction, before what its key
// writes next. The commit falls between the slot's start and the first
// relay's death: the first relay makes the slot, waiting for the
// transaction (PostgreSQL starts a slot after the transactions running
// then), and dies as soon as the slot is there; the second started
// meanwhile, and is held (where a relay reads the log's backlog once it has
// read the table) until the first is gone.
func TestStartWhileAnotherMakesTheSlot(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	testenv.Must(t, postgres.NewDriver(e.pg.Pool).CDC().Setup(ctx, e.slot), "publication")
	first, second := msg("k", "first"), msg("k", "second")

	// The transaction the slot waits for.
	open, err := e.pg.Pool.Begin(ctx)
	testenv.Must(t, err, "begin")
	defer open.Rollback(ctx)
	testenv.Must(t, e.w.Write(ctx, open, first), "write")

	// Relay a makes the slot, and dies at its first statement after the
	// transaction commits.
	var committed atomic.Bool
	aCtx, aCancel := context.WithCancel(ctx)
	defer aCancel()
	aPause := newPause()
	aPause.armed, aPause.cancel = committed.Load, aCancel
	a, err := cdc.New(postgres.NewDriver(e.pool(aPause)).CDC(), e.pub, e.config())
	testenv.Must(t, err, "relay a")
	aDone := make(chan error, 1)
	go func() { aDone <- a.Run(aCtx) }()
	// The slot relay a makes (or the temporary one it makes it from) is
	// there, waiting for the transaction.
	temp := fmt.Sprintf("courier_making_%08x", crc32.ChecksumIEEE([]byte(e.slot)))
	e.eventually(func() bool {
		var n int
		_ = e.pg.Admin.QueryRow(ctx, `SELECT count(*) FROM pg_replication_slots WHERE slot_name IN ($1, $2) AND active`, e.slot, temp).Scan(&n)
		return n > 0
	}, "relay a does not make a slot")

	// Relay b starts meanwhile and is held where it would look at the
	// log's backlog.
	bPause := newPause("pg_logical_slot_peek")
	cfg := e.config()
	standby := signalLog{Handler: cfg.Logger.Handler(), want: "standby", seen: make(chan struct{}), once: &sync.Once{}}
	cfg.Logger = slog.New(standby)
	b, stopB := e.startOn(e.pool(bPause), e.pub, cfg)
	select {
	case <-bPause.reached:
	case <-standby.seen:
	case <-time.After(30 * time.Second):
		t.Fatal("relay b neither waits as a standby nor reaches the log")
	}

	testenv.Must(t, open.Commit(ctx), "commit")
	committed.Store(true)
	select {
	case <-aDone:
	case <-time.After(30 * time.Second):
		t.Fatal("relay a did not stop after making the slot")
	}
	close(bPause.release)

	e.eventually(func() bool { return reads(b) }, "relay b does not read the slot: %+v", testenv.Lazy(func() any { return b.Stats() }))
	e.write(second)
	e.eventually(func() bool {
		return slices.ContainsFunc(e.pub.Messages(), func(m courier.Message) bool { return m.ID == second.ID })
	},
		"the second message is not published")
	checkOrder(t, []courier.Message{first, second}, e.pub.Messages())
	stopB()
}
