package chaos

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	natsgo "github.com/nats-io/nats.go"

	"github.com/courier-go/courier"
	couriernats "github.com/courier-go/courier/broker/nats"
	"github.com/courier-go/courier/idempotency"
	"github.com/courier-go/courier/inbox"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/relay"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/postgres"
	"github.com/courier-go/courier/store/sqlite"
)

// sqlish is SQL-looking text, for every field that takes text.
const sqlish = `x'); DROP TABLE courier_outbox; --`

// sqlType is SQL-looking text without white space, which a type name may
// not contain.
const sqlType = `x');DROP/**/TABLE/**/courier_outbox;--`

// Bad input anywhere gets a clear error or a dead letter, never a crash, and
// never takes a well-formed neighbour down with it: on the embedded default
// (SQLite) and on PostgreSQL.
func TestBadInputNeverLosesANeighbour(t *testing.T) {
	t.Parallel()
	t.Run("sqlite", func(t *testing.T) {
		db, err := sqlite.Open(filepath.Join(t.TempDir(), "courier.db"))
		testenv.Must(t, err, "open")
		t.Cleanup(func() { _ = db.Close() })
		d := sqlite.NewDriver(db)
		_, err = d.Migrate(context.Background())
		testenv.Must(t, err, "migrate")
		badInput(t, store.Driver[*sql.Tx](d))
	})
	t.Run("postgres", func(t *testing.T) {
		pg := testenv.Postgres(t, testenv.Migrate(postgres.NewDriver))
		badInput(t, store.Driver[pgx.Tx](postgres.NewDriver(pg.Pool)))
	})
}

// badInput runs the bad-input tour on d's migrated database.
func badInput[TTx any](t *testing.T, d store.Driver[TTx]) {
	ctx := context.Background()
	srv := testenv.EmbeddedNATS(t)
	nc := testenv.Connect(t, srv.ClientURL())
	mapping := couriernats.Config{SubjectPrefix: "bad."}
	testenv.Must(t, couriernats.EnsureStream(ctx, nc, mapping, couriernats.StreamConfig{Name: "BAD"}), "stream")
	w := outbox.New(d.Inserter(), outbox.Config{Limits: courier.Limits{MaxPayloadBytes: 2 << 20}})
	write := func(msgs ...courier.Message) error {
		return d.InTx(ctx, func(tx TTx) error { return w.Write(ctx, tx, msgs...) })
	}

	// The writer refuses what it can tell is bad, naming the field.
	bad := []struct {
		field string
		msg   courier.Message
	}{
		{"Key", courier.NewMessage("orders", "\xff\xfe", "T", nil)},
		{"Topic", courier.NewMessage("or ders", "k", "T", nil)},
		{"Topic", courier.NewMessage(sqlish, "k", "T", nil)},
		{"Headers", courier.NewMessage("orders", "k", "T", nil, courier.WithHeader("X", strings.Repeat("h", 70<<10)))},
		{"Payload", courier.NewMessage("orders", "k", "T", make([]byte, 3<<20))},
		{"Type", courier.NewMessage("orders", "k", "", nil)},
		{"Type", courier.NewMessage("orders", "k", sqlish, nil)},
		{`Headers["`, courier.NewMessage("orders", "k", "T", nil, courier.WithHeader("Nats-Rollup", "all"))},
	}
	for _, c := range bad {
		err := write(c.msg)
		var ve *courier.ValidationError
		if !errors.As(err, &ve) || !strings.HasPrefix(ve.Field, c.field) || ve.Fix == "" {
			t.Errorf("bad %s: %v", c.field, err)
		}
	}

	// What passes the writer but not the broker (a payload over NATS's
	// 1 MiB max_payload) becomes a dead letter with the broker's reason,
	// and SQL-looking text everywhere travels untouched.
	tooBig := courier.NewMessage("orders", "big", "T", make([]byte, (1<<20)+10))
	neighbours := []courier.Message{
		courier.NewMessage("orders", sqlish, sqlType, []byte(sqlish), courier.WithHeader("X-Sql", sqlish)),
		courier.NewMessage("orders", "注文-1", "OrderPlaced", []byte(`{"note":"ünïcode ✓"}`)),
		courier.NewMessage("orders", "big", "AfterTheBigOne", []byte("small")),
	}
	testenv.Must(t, write(append([]courier.Message{tooBig}, neighbours...)...), "write")
	sub, err := nc.SubscribeSync(mapping.Subjects())
	testenv.Must(t, err, "subscribe")
	st, err := d.RelayStore(ctx, store.RelayConfig{})
	testenv.Must(t, err, "store")
	pnc, err := couriernats.Connect(srv.ClientURL())
	testenv.Must(t, err, "connect")
	defer pnc.Close()
	pub, err := couriernats.NewPublisher(pnc, couriernats.PublisherConfig{Config: mapping})
	testenv.Must(t, err, "publisher")
	r, err := relay.New(st, pub, relay.Config{MaxAttempts: 2, PollInterval: 50 * time.Millisecond,
		Backoff: courier.Backoff{Initial: 10 * time.Millisecond, Max: 10 * time.Millisecond}})
	testenv.Must(t, err, "relay")
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(rctx) }()
	defer func() { stop(); <-done }()

	got := map[string]*natsgo.Msg{}
	for len(got) < len(neighbours) {
		m, err := sub.NextMsg(10 * time.Second)
		testenv.Must(t, err, fmt.Sprintf("neighbours received: %d of %d", len(got), len(neighbours)))
		got[m.Header.Get("Nats-Msg-Id")] = m
	}
	for _, n := range neighbours {
		m := got[n.ID.String()]
		if m == nil || string(m.Data) != string(n.Payload) || m.Header.Get(couriernats.HeaderKey) != n.Key ||
			m.Header.Get(couriernats.HeaderType) != n.Type || m.Header.Get("X-Sql") != n.Headers["X-Sql"] {
			t.Fatalf("neighbour %s arrived altered: %+v", n.ID, m)
		}
	}
	var reason string
	testenv.Eventually(t, 10*time.Second, func() bool {
		letters, err := d.Admin().DeadLetters(ctx, 10)
		for _, l := range letters {
			if l.MessageID == tooBig.ID.String() {
				reason = l.LastError
			}
		}
		return err == nil && reason != ""
	}, "the oversized message did not become a dead letter")
	if !strings.Contains(reason, "maximum payload") {
		t.Fatalf("dead letter reason %q", reason)
	}

	// Consumers park what they cannot read, and apply the rest.
	testenv.Must(t, d.InTx(ctx, func(tx TTx) error {
		_, err := d.Exec(ctx, tx, `CREATE TABLE effects (message_id VARCHAR(36) NOT NULL)`)
		return err
	}), "effects")
	csub, err := couriernats.NewSubscriber(ctx, nc, couriernats.SubscriberConfig{Config: mapping, Stream: "BAD", Consumer: "reader"})
	testenv.Must(t, err, "subscriber")
	defer csub.Close()
	router := inbox.NewRouter[TTx]()
	inbox.OnType(router, "OrderPlaced", func(ctx context.Context, tx TTx, msg courier.Message, v struct{ Note string }) error {
		_, err := d.Exec(ctx, tx, "INSERT INTO effects VALUES (?)", msg.ID.String())
		return err
	})
	for _, raw := range []*natsgo.Msg{
		{Subject: "bad.orders", Data: []byte("no headers at all")},
		{Subject: "bad.orders", Header: natsgo.Header{"Nats-Msg-Id": {"01939f3a-0000-7000-8000-00000000000a"}, couriernats.HeaderKey: {"k"},
			couriernats.HeaderType: {"OrderPlaced"}, couriernats.HeaderVersion: {"1"}, couriernats.HeaderOccurredAt: {time.Now().Format(time.RFC3339Nano)}},
			Data: []byte("{not json")},
		{Subject: "bad.orders", Header: natsgo.Header{"Nats-Msg-Id": {sqlish}}, Data: []byte(sqlish)},
	} {
		testenv.Must(t, nc.PublishMsg(raw), "publish raw")
	}
	ib, err := inbox.New(d.Inbox(), "reader")
	testenv.Must(t, err, "inbox")
	c, err := inbox.NewConsumer(ib, csub, d.ConsumerStore(), router.Handler(), inbox.ConsumerConfig{Group: groupedCommits})
	testenv.Must(t, err, "consumer")
	cctx, cstop := context.WithCancel(ctx)
	cdone := make(chan struct{})
	go func() { defer close(cdone); _ = c.Run(cctx) }()
	defer func() { cstop(); <-cdone }()
	// Three neighbours: two of unknown types (parked), one OrderPlaced
	// (applied); three raw bad ones (parked).
	testenv.Eventually(t, 10*time.Second, func() bool { m := c.Metrics(); return m.Applied+m.Parked == 6 },
		"consumer metrics %v", testenv.Lazy(func() any { return c.Metrics() }))
	if m := c.Metrics(); m.Applied != 1 || m.Parked != 5 || m.Retried != 0 {
		t.Fatalf("consumer metrics %+v: want 1 applied, 5 parked at once", m)
	}

	// An absurd Idempotency-Key is a 400, not a crash or a stored key.
	keys, err := idempotency.New(d.Idempotency(), idempotency.Config{Scope: idempotency.ScopeFromHeader("Authorization")})
	testenv.Must(t, err, "keys")
	h := keys.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(201) }))
	for _, key := range []string{strings.Repeat("k", 10000), "\x00\x01", `"` + sqlish + `"`, sqlish, `"\u00e9"`} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader("{}"))
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("Authorization", "Bearer chaos")
		h.ServeHTTP(rec, req)
		want := 400
		if key == `"`+sqlish+`"` { // odd but valid: quoted printable ASCII
			want = 201
		}
		if rec.Code != want {
			t.Errorf("Idempotency-Key %.30q: %d, want %d", key, rec.Code, want)
		}
	}
}
