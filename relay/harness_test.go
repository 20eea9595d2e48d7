package relay_test

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	_ "github.com/jackc/pgx/v5/stdlib"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/courier-go/courier"
	couriernats "github.com/courier-go/courier/broker/nats"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/relay"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/postgres"
	"github.com/courier-go/courier/store/sqlite"
)

// database is a database the relay tests run on.
type database struct {
	name string
	// open gives h its outbox: a fresh, migrated database, a store on it
	// and the way to write messages.
	open func(h *harness)
}

// The databases. SQLite needs nothing installed; PostgreSQL skips when
// COURIER_TEST_POSTGRES_URL is unset.
var (
	onSQLite   = database{name: "sqlite", open: openSQLite}
	onPostgres = database{name: "postgres", open: openPostgres}
)

// onEachDatabase runs test as a subtest on SQLite and on PostgreSQL.
func onEachDatabase(t *testing.T, test func(t *testing.T, db database)) {
	for _, db := range []database{onSQLite, onPostgres} {
		t.Run(db.name, func(t *testing.T) { test(t, db) })
	}
}

// harness is one test's outbox (its own database or schema) and stream (its
// own subjects).
type harness struct {
	t       testing.TB
	natsURL string
	nc      *natsgo.Conn
	mapping couriernats.Config
	stream  string
	// store is the relays' store; tests may replace it.
	store store.RelayStore
	admin store.Admin
	// dsn is how a relay in another process reaches the database: a
	// PostgreSQL URL, or the SQLite file's path.
	dsn string
	// pg is the PostgreSQL schema (nil on SQLite).
	pg *testenv.PG
	// sqlite is the SQLite database (nil on PostgreSQL).
	sqlite *sql.DB
	// writeTx writes msgs with the outbox writer in one transaction, and
	// commits it or rolls it back.
	writeTx func(ctx context.Context, commit bool, msgs ...courier.Message) error
	// newStore returns another store on the database.
	newStore func(keepPublished bool) store.RelayStore
	// newNotifier returns the wake-ups of one relay.
	newNotifier func() store.Notifier

	mu    sync.Mutex
	local []*store.LocalNotifier // SQLite: the relays' notifiers, signalled by every write
}

// anyNATS asks newHarness for the machine's NATS server when
// COURIER_TEST_NATS_URL is set, an embedded one otherwise
// (testenv.NATSOrEmbedded).
const anyNATS = ""

// newHarness opens a fresh outbox on db and a stream of its own on the NATS
// server at natsURL (anyNATS: see there). The database comes first, so a
// test whose database is missing skips before a server is started for it.
func newHarness(t testing.TB, db database, natsURL string) *harness {
	t.Helper()
	h := &harness{t: t}
	db.open(h)
	if natsURL == anyNATS {
		natsURL = testenv.NATSOrEmbedded(t)
	}
	h.natsURL = natsURL
	h.nc = testenv.Connect(t, natsURL)
	h.stream = testenv.Name("T")
	h.mapping = couriernats.Config{SubjectPrefix: h.stream + "."}
	ctx := context.Background()
	testenv.Must(t, couriernats.EnsureStream(ctx, h.nc, h.mapping, couriernats.StreamConfig{Name: h.stream}), "ensure stream")
	t.Cleanup(func() {
		js, err := jetstream.New(h.nc)
		if err == nil {
			_ = js.DeleteStream(context.Background(), h.stream)
		}
	})
	h.store = h.newStore(false)
	return h
}

func openPostgres(h *harness) {
	t := h.t
	pg := testenv.Postgres(t, testenv.Migrate(postgres.NewDriver))
	h.pg, h.dsn, h.admin = pg, pg.URL, postgres.Admin(pg.Pool)
	w := outbox.New(postgres.Pgx(), outbox.Config{})
	h.writeTx = func(ctx context.Context, commit bool, msgs ...courier.Message) error {
		tx, err := pg.Pool.Begin(ctx)
		if err != nil {
			return err
		}
		if err := w.Write(ctx, tx, msgs...); err != nil || !commit {
			_ = tx.Rollback(ctx)
			return err
		}
		return tx.Commit(ctx)
	}
	h.newStore = func(keepPublished bool) store.RelayStore {
		st, err := postgres.NewStore(context.Background(), pg.Pool, postgres.StoreConfig{KeepPublished: keepPublished})
		testenv.Must(t, err, "new store")
		return st
	}
	h.newNotifier = func() store.Notifier {
		n, err := postgres.NewNotifier(pg.URL, testLogger(t))
		testenv.Must(t, err, "notifier")
		return n
	}
}

func openSQLite(h *harness) {
	t := h.t
	path := filepath.Join(t.TempDir(), "outbox.db")
	db, err := sqlite.Open(path)
	testenv.Must(t, err, "open sqlite")
	t.Cleanup(func() { db.Close() })
	_, err = sqlite.Migrate(context.Background(), db)
	testenv.Must(t, err, "migrate")
	h.sqlite, h.dsn, h.admin = db, path, sqlite.Admin(db)
	w := outbox.New(sqlite.DatabaseSQL(), outbox.Config{Notify: h.signal})
	h.writeTx = func(ctx context.Context, commit bool, msgs ...courier.Message) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if err := w.Write(ctx, tx, msgs...); err != nil || !commit {
			_ = tx.Rollback()
			return err
		}
		return tx.Commit()
	}
	// Relays of one process share one Store, as package sqlite advises.
	var shared, keeping store.RelayStore
	h.newStore = func(keepPublished bool) store.RelayStore {
		st := &shared
		if keepPublished {
			st = &keeping
		}
		if *st == nil {
			s, err := sqlite.NewStore(context.Background(), db, sqlite.StoreConfig{KeepPublished: keepPublished})
			testenv.Must(t, err, "new store")
			*st = s
		}
		return *st
	}
	h.newNotifier = func() store.Notifier {
		n := store.NewLocalNotifier()
		h.mu.Lock()
		h.local = append(h.local, n)
		h.mu.Unlock()
		return n
	}
}

// signal wakes every relay of the test (SQLite).
func (h *harness) signal() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, n := range h.local {
		n.Signal()
	}
}

// write commits msgs in one transaction.
func (h *harness) write(msgs ...courier.Message) {
	h.t.Helper()
	testenv.Must(h.t, h.writeTx(context.Background(), true, msgs...), "write")
}

// deadLetter returns the dead letter of message id.
func (h *harness) deadLetter(id uuid.UUID) store.DeadLetter {
	h.t.Helper()
	dls, err := h.admin.DeadLetters(context.Background(), 1000)
	testenv.Must(h.t, err, "dead letters")
	for _, d := range dls {
		if d.MessageID == id.String() {
			return d
		}
	}
	h.t.Fatalf("message %s is no dead letter; dead letters: %+v", id, dls)
	return store.DeadLetter{}
}

// publishedAt returns when message id was published, from
// courier_outbox_published (a store with KeepPublished).
func (h *harness) publishedAt(id uuid.UUID) time.Time {
	h.t.Helper()
	ctx := context.Background()
	if h.pg != nil {
		var at time.Time
		testenv.Must(h.t, h.pg.Pool.QueryRow(ctx, `SELECT published_at FROM courier_outbox_published WHERE message_id = $1`, id).Scan(&at), "published_at")
		return at
	}
	var us int64
	testenv.Must(h.t, h.sqlite.QueryRowContext(ctx, `SELECT published_at FROM courier_outbox_published WHERE message_id = ?`, id.String()).Scan(&us), "published_at")
	return time.UnixMicro(us)
}

// publisher returns a publisher on its own connection (as a relay has).
func (h *harness) publisher() *couriernats.Publisher {
	h.t.Helper()
	nc, err := couriernats.Connect(h.natsURL)
	testenv.Must(h.t, err, "connect publisher")
	h.t.Cleanup(nc.Close)
	p, err := couriernats.NewPublisher(nc, couriernats.PublisherConfig{Config: h.mapping, AckTimeout: 2 * time.Second})
	testenv.Must(h.t, err, "new publisher")
	return p
}

// notifier returns the wake-ups of one relay.
func (h *harness) notifier() store.Notifier { return h.newNotifier() }

// relayConfig is a fast-moving configuration for tests.
func (h *harness) relayConfig() relay.Config {
	lease := 5 * time.Second
	if raceEnabled && h.sqlite != nil {
		// Claiming or completing a batch of hundreds can take seconds.
		lease = 30 * time.Second
	}
	return relay.Config{
		Notifier:       h.notifier(),
		LeaseDuration:  lease,
		PublishTimeout: 2 * time.Second,
		PollInterval:   200 * time.Millisecond,
		Backoff:        relay.Backoff{Initial: 20 * time.Millisecond, Max: 200 * time.Millisecond},
		Logger:         testLogger(h.t),
	}
}

// startRelay runs a relay until the test ends (or stop is called).
func (h *harness) startRelay(pub relayPublisher, cfg relay.Config) (r *relay.Relay, stop func()) {
	h.t.Helper()
	r, err := relay.New(h.store, pub, cfg)
	testenv.Must(h.t, err, "new relay")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					h.t.Errorf("relay.Run: %v", err)
				}
			case <-time.After(30 * time.Second):
				h.t.Errorf("relay did not stop within 30s")
			}
		})
	}
	h.t.Cleanup(stop)
	return r, stop
}

type relayPublisher = interface {
	Publish(ctx context.Context, msgs []courier.Message) []error
}

// produce writes n messages spread over keys in transactions of up to per
// messages, returning them in write order.
func (h *harness) produce(n, keys, per int) []courier.Message {
	h.t.Helper()
	ctx := context.Background()
	var all []courier.Message
	for done := 0; done < n; {
		k := min(per, n-done)
		msgs := make([]courier.Message, k)
		for i := range msgs {
			seq := done + i
			msgs[i] = courier.NewMessage("events", fmt.Sprintf("key-%d", seq%keys), "Numbered",
				[]byte(fmt.Sprintf(`{"seq":%d}`, seq)), courier.WithContentType(courier.ContentTypeJSON))
		}
		testenv.Must(h.t, h.writeTx(ctx, true, msgs...), "write")
		all = append(all, msgs...)
		done += k
	}
	return all
}

func (h *harness) stats() store.Stats {
	h.t.Helper()
	st, err := h.store.Stats(context.Background())
	testenv.Must(h.t, err, "stats")
	return st
}

// drainStall is how long a drain may stand still before a test calls it
// stuck: longer than any backoff, lease or outage the tests hold it with,
// however slow the machine.
const drainStall = 30 * time.Second

// waitDrained waits until no message is pending, for as long as the
// pending count keeps moving: it fails once it has stood still for
// drainStall.
func (h *harness) waitDrained() {
	h.t.Helper()
	testenv.WhileProgressing(h.t, drainStall, func() (bool, any) { s := h.stats(); return s.Pending == 0, s.Pending },
		"outbox not drained: %v", testenv.Lazy(func() any { return h.stats() }))
}

// received reads the whole stream in order.
func (h *harness) received() []courier.Message {
	h.t.Helper()
	return testenv.StreamMessages(h.t, h.nc, h.stream, h.mapping)
}

// checkDelivery verifies that every written message is in the stream, and
// that each key's messages first appear in write order (see
// testenv.CheckDelivery).
var checkDelivery = testenv.CheckDelivery

func testLogger(t testing.TB) *slog.Logger {
	if os.Getenv("COURIER_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// openSQL opens a database/sql handle (pgx's stdlib driver) on the schema.
func openSQL(t *testing.T, url string) *sql.DB {
	db, err := sql.Open("pgx", url)
	testenv.Must(t, err, "sql open")
	t.Cleanup(func() { db.Close() })
	return db
}
