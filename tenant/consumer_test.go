package tenant_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/courier-go/courier"
	couriernats "github.com/courier-go/courier/broker/nats"
	"github.com/courier-go/courier/inbox"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/dburl"
	"github.com/courier-go/courier/store/memstore"
	"github.com/courier-go/courier/tenant"
)

// consumerEnv is a consumer test's stream, with the database of the
// consuming service's own that keeps the messages of no tenant.
type consumerEnv struct {
	t       *testing.T
	nc      *natsgo.Conn
	mapping couriernats.Config
	stream  string
	pub     *couriernats.Publisher
	refused *dburl.DB
}

func newConsumerEnv(t *testing.T) *consumerEnv {
	t.Helper()
	ctx := context.Background()
	e := &consumerEnv{t: t, nc: testenv.Connect(t, testenv.NATSOrEmbedded(t)), stream: testenv.Name("TN")}
	e.mapping = couriernats.Config{SubjectPrefix: e.stream + "."}
	// A short duplicate window, so that a test can put a message on the
	// wire twice, as a relay that republishes after a crash does.
	testenv.Must(t, couriernats.EnsureStream(ctx, e.nc, e.mapping, couriernats.StreamConfig{Name: e.stream, Duplicates: 100 * time.Millisecond}), "stream")
	t.Cleanup(func() {
		js, _ := jetstream.New(e.nc)
		_ = js.DeleteStream(context.Background(), e.stream)
	})
	var err error
	e.pub, err = couriernats.NewPublisher(e.nc, couriernats.PublisherConfig{Config: e.mapping})
	testenv.Must(t, err, "publisher")
	e.refused, err = dburl.Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "service.db"), dburl.Options{Create: true})
	testenv.Must(t, err, "open the service's database")
	t.Cleanup(e.refused.Close)
	_, err = e.refused.Migrate(ctx)
	testenv.Must(t, err, "migrate the service's database")
	return e
}

// consumerTenants returns n migrated tenants with an effects table:
// PostgreSQL schemas for the first half when COURIER_TEST_POSTGRES_URL is
// set, SQLite files for the others.
func consumerTenants(t *testing.T, n int) []tenant.Tenant {
	t.Helper()
	var ts []tenant.Tenant
	if os.Getenv(testenv.EnvPostgres) != "" {
		ts = pgTenants(t, "pg", n/2)
	}
	ts = append(ts, sqliteTenants(t, "lite", n-len(ts))...)
	for _, tn := range ts {
		createEffects(t, tn)
	}
	return ts
}

// createEffects creates tn's effects table: a row per message applied.
func createEffects(t *testing.T, tn tenant.Tenant) {
	t.Helper()
	ctx := context.Background()
	d, err := dburl.Open(ctx, tn.URL, dburl.Options{})
	testenv.Must(t, err, "open "+tn.Name)
	defer d.Close()
	_, err = d.SQL().ExecContext(ctx, "CREATE TABLE effects (message_id TEXT NOT NULL, tenant TEXT NOT NULL)")
	testenv.Must(t, err, "effects table of "+tn.Name)
}

// count runs a counting query, written with ? placeholders, in tn's
// database.
func count(t *testing.T, tn tenant.Tenant, query string, args ...any) (n int) {
	t.Helper()
	ctx := context.Background()
	d, err := dburl.Open(ctx, tn.URL, dburl.Options{})
	testenv.Must(t, err, "open "+tn.Name)
	defer d.Close()
	testenv.Must(t, d.SQL().QueryRowContext(ctx, d.Rebind(query), args...).Scan(&n), query+" in "+tn.Name)
	return n
}

// parkedIn lists what consumer parked in d.
func parkedIn(t *testing.T, d store.Database, consumer string) []store.Parked {
	t.Helper()
	ps, err := d.Admin().Parked(context.Background(), consumer, 100)
	testenv.Must(t, err, "list parked")
	return ps
}

// parkedOf lists what consumer parked in tn's database.
func parkedOf(t *testing.T, tn tenant.Tenant, consumer string) []store.Parked {
	t.Helper()
	d, err := dburl.Open(context.Background(), tn.URL, dburl.Options{})
	testenv.Must(t, err, "open "+tn.Name)
	defer d.Close()
	return parkedIn(t, d, consumer)
}

// requestReplay asks for the replay of parked delivery id of d, as
// `courier dlq replay` does.
func requestReplay(t *testing.T, d store.Database, id int64) {
	t.Helper()
	testenv.Must(t, d.Admin().RequestReplay(context.Background(), id), "request replay")
}

// of returns a message of tn, with its Header as tn's relay sets it.
func of(tn tenant.Tenant, key, payload string) courier.Message {
	m := courier.NewMessage("orders", key, "OrderPlaced", []byte(payload))
	m.SetHeader(tenant.Header, tn.Name)
	return m
}

// publish sends msgs to the stream, as a relay does.
func (e *consumerEnv) publish(msgs ...courier.Message) {
	e.t.Helper()
	for i, err := range e.pub.Publish(context.Background(), msgs) {
		testenv.Must(e.t, err, fmt.Sprintf("publish %d", i))
	}
}

// publishAgain sends msgs again, each once JetStream stores it again
// (past the stream's duplicate window), as a relay that republishes after
// a crash does: each is delivered twice.
func (e *consumerEnv) publishAgain(msgs ...courier.Message) {
	e.t.Helper()
	js, err := jetstream.New(e.nc)
	testenv.Must(e.t, err, "jetstream")
	for _, m := range msgs {
		for {
			ack, err := js.PublishMsg(context.Background(), e.mapping.ToNATS(&m))
			testenv.Must(e.t, err, "publish again")
			if !ack.Duplicate {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// run starts a consumer named consumer until the test ends, with the
// tests' short delays and e's Refused.
func (e *consumerEnv) run(consumer string, h inbox.Handler[*sql.Tx], cfg tenant.ConsumerConfig) *tenant.Consumer {
	e.t.Helper()
	cfg.Refused = e.refused.ConsumerStore()
	if cfg.Inbox.Backoff == (courier.Backoff{}) {
		cfg.Inbox.Backoff = courier.Backoff{Initial: 20 * time.Millisecond, Max: 100 * time.Millisecond}
	}
	if cfg.Inbox.ReplayEvery == 0 {
		cfg.Inbox.ReplayEvery = 50 * time.Millisecond
	}
	cfg.Inbox.ExtendEvery = 500 * time.Millisecond // within the subscription's ack wait
	if os.Getenv("COURIER_TEST_LOG") != "" {
		cfg.Inbox.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	sub, err := couriernats.NewSubscriber(context.Background(), e.nc, couriernats.SubscriberConfig{
		Config: e.mapping, Stream: e.stream, Consumer: consumer, AckWait: 2 * time.Second,
	})
	testenv.Must(e.t, err, "subscriber")
	c, err := tenant.NewConsumer(sub, consumer, h, cfg)
	testenv.Must(e.t, err, "consumer")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx) }()
	e.t.Cleanup(func() { cancel(); <-done; _ = sub.Close() })
	return c
}

// applyEffect is the tests' handler: a row in the effects table of the
// message's tenant, which must be the tenant its Header names.
func applyEffect(ctx context.Context, tx *sql.Tx, msg courier.Message) error {
	tn, ok := tenant.From(ctx)
	db := tenant.DB(ctx)
	if !ok || db == nil || tn.Name != msg.Headers[tenant.Header] {
		return fmt.Errorf("handler of a message of %q runs for tenant %q (%v), database %v", msg.Headers[tenant.Header], tn.Name, ok, db)
	}
	_, err := db.Exec(ctx, tx, "INSERT INTO effects (message_id, tenant) VALUES (?, ?)", msg.ID.String(), tn.Name)
	return err
}

// Messages of four tenants, each delivered twice, through one consumer
// that keeps two databases open at most: each message is applied once, in
// its own tenant's database, with its marker; a run that fails is retried,
// its failure recorded and cleared in its tenant's database. It runs over
// each kind of tenant database.
func TestConsumerAppliesEachMessageOnceInItsTenantsDatabase(t *testing.T) {
	forEachKind(t, func(t *testing.T, k tenantKind) {
		ts := k.tenants(t, "t", 4)
		for _, tn := range ts {
			createEffects(t, tn)
		}
		appliesOnceInItsTenantsDatabase(t, ts)
	})
}

func appliesOnceInItsTenantsDatabase(t *testing.T, ts []tenant.Tenant) {
	e := newConsumerEnv(t)
	var msgs []courier.Message
	for i := range 3 {
		for _, tn := range ts { // interleaved, so that databases are closed and opened again
			msgs = append(msgs, of(tn, fmt.Sprintf("k%d", i), tn.Name))
		}
	}
	flaky := msgs[1] // ts[1]'s first: its first run fails
	var failed atomic.Bool
	h := func(ctx context.Context, tx *sql.Tx, msg courier.Message) error {
		if err := applyEffect(ctx, tx, msg); err != nil {
			return err
		}
		if msg.ID == flaky.ID && failed.CompareAndSwap(false, true) {
			return errors.New("warehouse unreachable") // rolls back the effect
		}
		return nil
	}
	const maxOpen = 2
	var running atomic.Pointer[tenant.Consumer]
	var opens, tooMany atomic.Int32
	cfg := tenant.ConsumerConfig{Source: tenant.List(ts...), MaxOpen: maxOpen,
		Open: func(ctx context.Context, tn tenant.Tenant, opts dburl.Options) (*dburl.DB, error) {
			opens.Add(1)
			if c := running.Load(); c != nil && c.OpenDatabases() > maxOpen {
				tooMany.Add(1)
			}
			return dburl.Open(ctx, tn.URL, opts)
		}}
	e.publish(msgs...)
	e.publishAgain(msgs...)
	c := e.run("billing", h, cfg)
	running.Store(c)
	testenv.Eventually(t, 30*time.Second, func() bool { m := c.Metrics(); return m.Applied+m.Duplicates == int64(2*len(msgs)) },
		"not every delivery handled: %v", testenv.Lazy(func() any { return c.Metrics() }))
	if m := c.Metrics(); m.Applied != int64(len(msgs)) || m.Duplicates != int64(len(msgs)) || m.Retried < 1 || m.Parked != 0 {
		t.Fatalf("metrics %+v: want %d applied, %d duplicates, a retry, nothing parked", m, len(msgs), len(msgs))
	}
	for _, tn := range ts {
		for _, m := range msgs {
			want := 0
			if m.Headers[tenant.Header] == tn.Name {
				want = 1
			}
			if n := count(t, tn, "SELECT count(*) FROM effects WHERE message_id = ? AND tenant = ?", m.ID.String(), tn.Name); n != want {
				t.Errorf("%s's database applied %s of %s %d times, want %d", tn.Name, m.ID, m.Headers[tenant.Header], n, want)
			}
		}
		if n := count(t, tn, "SELECT count(*) FROM effects"); n != 3 {
			t.Errorf("%s's database has %d effects, want its 3 messages'", tn.Name, n)
		}
		if n := count(t, tn, "SELECT count(*) FROM courier_inbox WHERE consumer = ?", "billing"); n != 3 {
			t.Errorf("%s's database has %d inbox markers, want 3", tn.Name, n)
		}
		if n := count(t, tn, "SELECT count(*) FROM courier_inbox_failures"); n != 0 {
			t.Errorf("%s's database keeps %d recorded failures, want them cleared", tn.Name, n)
		}
	}
	if n := len(parkedIn(t, e.refused, "billing")); n != 0 {
		t.Errorf("%d deliveries refused, want none", n)
	}
	if tooMany.Load() > 0 || c.OpenDatabases() > maxOpen {
		t.Errorf("more than %d databases open at once", maxOpen)
	}
	t.Logf("tenants' databases opened %d times for %d tenants", opens.Load(), len(ts))
}

// Messages that belong to no tenant — without the header, of a tenant the
// Source does not list, or not decodable though the header names a tenant
// — touch no tenant's database: they are parked in Refused, the unknown
// name after the Source was read again. Once the Source lists that tenant,
// an operator's replay from Refused applies the message in its database.
func TestConsumerRefusesMessagesOfNoTenant(t *testing.T) {
	ts := consumerTenants(t, 2)
	e := newConsumerEnv(t)
	late := sqliteTenants(t, "late", 1)[0]
	createEffects(t, late)
	var mu sync.Mutex
	listed := ts
	var reads atomic.Int32
	src := tenant.SourceFunc(func(ctx context.Context) ([]tenant.Tenant, error) {
		reads.Add(1)
		mu.Lock()
		defer mu.Unlock()
		return tenant.List(listed...).Tenants(ctx)
	})

	anonymous := courier.NewMessage("orders", "k1", "OrderPlaced", []byte("no tenant"))
	stranger := of(late, "k2", "unknown tenant")
	fine := of(ts[0], "k3", "fine")
	c := e.run("billing", applyEffect, tenant.ConsumerConfig{Source: src, Reread: 100 * time.Millisecond})
	e.publish(fine) // the tenants are read for it
	testenv.Eventually(t, 30*time.Second, func() bool { return c.Metrics().Applied == 1 },
		"not applied: %v", testenv.Lazy(func() any { return c.Metrics() }))
	e.publish(anonymous, stranger)
	// A delivery that does not decode (no message id), whose header names
	// a tenant: the header of a message that is not one is not trusted.
	js, err := jetstream.New(e.nc)
	testenv.Must(t, err, "jetstream")
	_, err = js.PublishMsg(context.Background(), &natsgo.Msg{Subject: e.stream + ".orders", Data: []byte("garbage"),
		Header: natsgo.Header{tenant.Header: {ts[1].Name}}})
	testenv.Must(t, err, "publish garbage")
	testenv.Eventually(t, 30*time.Second, func() bool { m := c.Metrics(); return m.Applied == 1 && m.Parked == 3 },
		"want 1 applied, 3 parked: %v", testenv.Lazy(func() any { return c.Metrics() }))
	if n := reads.Load(); n < 2 {
		t.Errorf("Source read %d times: want it read again for the unknown tenant", n)
	}
	refused := map[string]store.Parked{}
	for _, p := range parkedIn(t, e.refused, "billing") {
		refused[p.MessageID] = p
		if p.Reason != store.ReasonMalformed {
			t.Errorf("refused delivery %q parked for %q, want %q", p.MessageID, p.Reason, store.ReasonMalformed)
		}
	}
	for _, want := range []struct {
		id, err string
	}{
		{anonymous.ID.String(), "no " + tenant.Header + " header names its tenant"},
		{stranger.ID.String(), `names tenant "late0", which Source does not list`},
		{"", "is missing"},
	} {
		if p, ok := refused[want.id]; !ok || !strings.Contains(p.Error, want.err) {
			t.Errorf("refused delivery %q: %q, want it parked in Refused with an error saying %q", want.id, p.Error, want.err)
		}
	}
	for _, tn := range ts {
		applied := 0
		if tn == ts[0] {
			applied = 1 // fine
		}
		for query, want := range map[string]int{
			"SELECT count(*) FROM effects":                    applied,
			"SELECT count(*) FROM courier_inbox":              applied,
			"SELECT count(*) FROM courier_inbox_dead_letters": 0,
			"SELECT count(*) FROM courier_inbox_failures":     0,
		} {
			if n := count(t, tn, query); n != want {
				t.Errorf("%s's database: %s is %d, want %d", tn.Name, query, n, want)
			}
		}
	}

	// The tenant is added; the operator replays its message from Refused.
	mu.Lock()
	listed = append(listed, late)
	mu.Unlock()
	requestReplay(t, e.refused, refused[stranger.ID.String()].ID)
	testenv.Eventually(t, 30*time.Second, func() bool { return c.Metrics().Replayed == 1 },
		"not replayed: %v", testenv.Lazy(func() any { return c.Metrics() }))
	if n := count(t, late, "SELECT count(*) FROM effects WHERE message_id = ? AND tenant = ?", stranger.ID.String(), late.Name); n != 1 {
		t.Errorf("the replayed message applied %d times in its tenant's database, want 1", n)
	}
	left := parkedIn(t, e.refused, "billing")
	for _, p := range left {
		if p.MessageID == stranger.ID.String() {
			t.Errorf("the replayed message is still parked in Refused")
		}
	}
	if len(left) != 2 {
		t.Errorf("%d deliveries left in Refused, want the other 2", len(left))
	}
}

// Tenants A and B each park a message, in their databases (both parked
// deliveries likely have id 1, each in its database); an operator replays
// B's: it is applied in B's database and unparked there, A's stays parked
// until replayed in turn. Tenant C, with nothing parked, is untouched.
func TestConsumerReplaysParkedDeliveriesInTheirTenantsDatabase(t *testing.T) {
	ts := consumerTenants(t, 3)
	a, b, cTenant := ts[0], ts[len(ts)-1], ts[1] // with PostgreSQL, A is a schema and B a SQLite file
	e := newConsumerEnv(t)
	var broken atomic.Bool
	broken.Store(true)
	h := func(ctx context.Context, tx *sql.Tx, msg courier.Message) error {
		if string(msg.Payload) == "poison" && broken.Load() {
			return errors.New("payment provider down")
		}
		return applyEffect(ctx, tx, msg)
	}
	poisonA, poisonB, fine := of(a, "k1", "poison"), of(b, "k2", "poison"), of(cTenant, "k3", "fine")
	e.publish(poisonA, poisonB, fine)
	// One database open at a time: a replay request is found in a
	// tenant's database that is closed too, by the pass over every one.
	c := e.run("billing", h, tenant.ConsumerConfig{Source: tenant.List(ts...), MaxOpen: 1, ReplayScan: 200 * time.Millisecond,
		Inbox: inbox.ConsumerConfig{MaxDeliveries: 2}})
	testenv.Eventually(t, 30*time.Second, func() bool { m := c.Metrics(); return m.Parked == 2 && m.Applied == 1 },
		"want 2 parked, 1 applied: %v", testenv.Lazy(func() any { return c.Metrics() }))
	parkedA, parkedB := parkedOf(t, a, "billing"), parkedOf(t, b, "billing")
	if len(parkedA) != 1 || parkedA[0].MessageID != poisonA.ID.String() || len(parkedB) != 1 || parkedB[0].MessageID != poisonB.ID.String() {
		t.Fatalf("parked in A: %+v; in B: %+v; want each tenant's poison in its database", parkedA, parkedB)
	}
	if n := len(parkedOf(t, cTenant, "billing")) + len(parkedIn(t, e.refused, "billing")); n != 0 {
		t.Fatalf("%d deliveries parked in C or Refused, want none", n)
	}
	t.Logf("parked ids: A %d, B %d", parkedA[0].ID, parkedB[0].ID)

	broken.Store(false) // the provider is back
	bDB, err := dburl.Open(context.Background(), b.URL, dburl.Options{})
	testenv.Must(t, err, "open B")
	defer bDB.Close()
	requestReplay(t, bDB, parkedB[0].ID)
	testenv.Eventually(t, 30*time.Second, func() bool { return c.Metrics().Replayed == 1 },
		"B's not replayed: %v", testenv.Lazy(func() any { return c.Metrics() }))
	if n := count(t, b, "SELECT count(*) FROM effects WHERE message_id = ?", poisonB.ID.String()); n != 1 {
		t.Errorf("B's replayed message applied %d times in B's database, want 1", n)
	}
	if n := len(parkedOf(t, b, "billing")); n != 0 {
		t.Errorf("%d deliveries still parked in B after the replay", n)
	}
	if n := count(t, a, "SELECT count(*) FROM effects"); n != 0 || len(parkedOf(t, a, "billing")) != 1 {
		t.Errorf("A: %d effects, %d parked; want A's poison untouched by B's replay", n, len(parkedOf(t, a, "billing")))
	}
	for _, tn := range []tenant.Tenant{a, cTenant} {
		if n := count(t, tn, "SELECT count(*) FROM effects WHERE message_id = ?", poisonB.ID.String()); n != 0 {
			t.Errorf("B's message applied in %s's database", tn.Name)
		}
	}

	aDB, err := dburl.Open(context.Background(), a.URL, dburl.Options{})
	testenv.Must(t, err, "open A")
	defer aDB.Close()
	requestReplay(t, aDB, parkedA[0].ID)
	testenv.Eventually(t, 30*time.Second, func() bool { return c.Metrics().Replayed == 2 },
		"A's not replayed: %v", testenv.Lazy(func() any { return c.Metrics() }))
	if n := count(t, a, "SELECT count(*) FROM effects WHERE message_id = ?", poisonA.ID.String()); n != 1 || len(parkedOf(t, a, "billing")) != 0 {
		t.Errorf("A's replayed message applied %d times in A's database (want 1), or still parked", n)
	}
}

// The retention of markers and recorded failures covers every tenant's
// database, not one: with one database open at a time, old markers are
// deleted in each.
func TestConsumerCleansUpEveryTenantsDatabase(t *testing.T) {
	ts := consumerTenants(t, 3)
	e := newConsumerEnv(t)
	var msgs []courier.Message
	for _, tn := range ts {
		msgs = append(msgs, of(tn, "k", "x"))
	}
	e.publish(msgs...)
	clock := memstore.NewClock()
	c := e.run("billing", applyEffect, tenant.ConsumerConfig{Source: tenant.List(ts...), MaxOpen: 1,
		Inbox: inbox.ConsumerConfig{Clock: clock.Now, Retention: time.Hour, CleanupEvery: 50 * time.Millisecond}})
	testenv.Eventually(t, 30*time.Second, func() bool { return c.Metrics().Applied == int64(len(msgs)) },
		"not applied: %v", testenv.Lazy(func() any { return c.Metrics() }))
	markers := func() (n int) {
		for _, tn := range ts {
			n += count(t, tn, "SELECT count(*) FROM courier_inbox")
		}
		return n
	}
	if n := markers(); n != len(ts) {
		t.Fatalf("%d markers, want one per tenant", n)
	}
	clock.Advance(2 * time.Hour)
	testenv.Eventually(t, 30*time.Second, func() bool { return markers() == 0 }, "markers left: %d", testenv.Lazy(func() any { return markers() }))
}
