package saga_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/saga"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/mysql"
	"github.com/courier-go/courier/store/postgres"
	"github.com/courier-go/courier/store/sqlite"
)

// Order is the data of the test saga, the shop's order in small.
type Order struct {
	Amount   int    `json:"amount"`
	ChargeID string `json:"charge_id,omitempty"`
}

func cmd(topic, typ string) func(string, *Order) (courier.Message, error) {
	return func(id string, o *Order) (courier.Message, error) {
		return courier.NewJSON(topic, id, o, courier.WithType(typ))
	}
}

func orderSaga() saga.Definition[Order] {
	return saga.Definition[Order]{
		Type:    "order",
		Initial: "Placed",
		Steps: []saga.Step[Order]{
			{Name: "payment", Pending: "PaymentPending", Done: "Paid", Command: cmd("payment", "ChargeRequested"),
				Succeeded: "PaymentSucceeded", Failed: "PaymentDeclined", Timeout: 10 * time.Second,
				OnReply: func(o *Order, r courier.Message) error {
					if r.Type == "PaymentSucceeded" {
						o.ChargeID = string(r.Payload)
					}
					return nil
				},
				Compensate: cmd("payment", "RefundRequested"), Compensated: "PaymentRefunded"},
			{Name: "inventory", Done: "InventoryReserved", Command: cmd("inventory", "ReserveStock"),
				Succeeded: "StockReserved", Failed: "StockUnavailable", Timeout: 10 * time.Second,
				Compensate: cmd("inventory", "ReleaseStock"), Compensated: "StockReleased"},
			{Name: "shipping", Done: "ShippingReady", Command: cmd("shipping", "PrepareShipment"),
				Succeeded: "ShipmentPrepared", Failed: "ShipmentFailed", Timeout: 10 * time.Second,
				Compensate: cmd("shipping", "CancelShipment"), Compensated: "ShipmentCancelled"},
		},
	}
}

// fixture is an orchestrator on a fresh database of one dialect, with a
// clock the test moves.
type fixture struct {
	t      testing.TB
	db     *sql.DB
	driver store.Driver[*sql.Tx]
	sagas  store.Sagas[*sql.Tx]
	orch   *saga.Orchestrator[Order, *sql.Tx]
	mu     sync.Mutex
	now    time.Time
}

// dialects opens a fresh, migrated database of each dialect whose service
// is available (SQLite always): its Driver, and the pool the Driver's
// transactions run on.
var dialects = []struct {
	name string
	open func(t testing.TB) (*sql.DB, store.Driver[*sql.Tx])
}{
	{"postgres", func(t testing.TB) (*sql.DB, store.Driver[*sql.Tx]) {
		pg := testenv.Postgres(t, testenv.Migrate(postgres.NewDriver))
		d := postgres.NewSQLDriver(pg.Pool)
		return d.DB(), d
	}},
	{"sqlite", func(t testing.TB) (*sql.DB, store.Driver[*sql.Tx]) {
		db, err := sqlite.Open(filepath.Join(t.TempDir(), "saga.db"))
		testenv.Must(t, err, "open")
		t.Cleanup(func() { db.Close() })
		d := sqlite.NewDriver(db)
		_, err = d.Migrate(context.Background())
		testenv.Must(t, err, "migrate")
		return db, d
	}},
	{"mysql", func(t testing.TB) (*sql.DB, store.Driver[*sql.Tx]) {
		my := testenv.MySQL(t, testenv.Migrate(mysql.NewDriver))
		return my.DB, mysql.NewDriver(my.DB)
	}},
}

// each runs fn against every dialect.
func each(t *testing.T, fn func(t *testing.T, f *fixture)) {
	for _, d := range dialects {
		t.Run(d.name, func(t *testing.T) { fn(t, newFixture(t, d.name)) })
	}
}

func newFixture(t testing.TB, dialect string) *fixture {
	f := &fixture{t: t, now: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)}
	for _, d := range dialects {
		if d.name == dialect {
			f.db, f.driver = d.open(t)
			f.sagas = f.driver.Sagas()
			var err error
			f.orch, err = saga.New(orderSaga(), f.sagas, outbox.New(f.driver.Inserter(), outbox.Config{}),
				saga.Config{Clock: func() time.Time { f.mu.Lock(); defer f.mu.Unlock(); return f.now }})
			testenv.Must(t, err, "orchestrator")
		}
	}
	return f
}

// q rewrites a query written with ? placeholders for the dialect.
func (f *fixture) q(query string) string { return f.driver.Rebind(query) }

func (f *fixture) advance(d time.Duration) {
	f.mu.Lock()
	f.now = f.now.Add(d)
	f.mu.Unlock()
}

func (f *fixture) start(id string, amount int) {
	f.t.Helper()
	err := f.sagas.InTx(context.Background(), func(tx *sql.Tx) error {
		_, err := f.orch.Start(context.Background(), tx, id, Order{Amount: amount})
		return err
	})
	testenv.Must(f.t, err, "start")
}

func reply(id, typ string, payload string, headers ...string) courier.Message {
	m := courier.NewMessage("orders", id, typ, []byte(payload))
	for i := 0; i+1 < len(headers); i += 2 {
		m.SetHeader(headers[i], headers[i+1])
	}
	return m
}

func (f *fixture) handle(m courier.Message) saga.Outcome {
	f.t.Helper()
	var out saga.Outcome
	err := f.sagas.InTx(context.Background(), func(tx *sql.Tx) error {
		var err error
		out, err = f.orch.Handle(context.Background(), tx, m)
		return err
	})
	testenv.Must(f.t, err, "handle "+m.Type)
	return out
}

// commands takes the saga's commands for id out of the outbox, in order.
func (f *fixture) commands(id string) []string {
	f.t.Helper()
	rows, err := f.db.Query(f.q("SELECT id, type FROM courier_outbox WHERE ordering_key = ? ORDER BY id"), id)
	testenv.Must(f.t, err, "read commands")
	var out []string
	var last int64
	for rows.Next() {
		var typ string
		testenv.Must(f.t, rows.Scan(&last, &typ), "scan")
		out = append(out, typ)
	}
	testenv.Must(f.t, rows.Err(), "rows")
	rows.Close()
	_, err = f.db.Exec(f.q("DELETE FROM courier_outbox WHERE ordering_key = ? AND id <= ?"), id, last)
	testenv.Must(f.t, err, "take commands")
	return out
}

func (f *fixture) get(id string) *saga.Instance[Order] {
	f.t.Helper()
	in, err := f.orch.Get(context.Background(), id)
	testenv.Must(f.t, err, "get")
	return in
}

func expect(t *testing.T, got []string, want ...string) {
	t.Helper()
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("commands %v, want %v", got, want)
	}
}

func TestHappyPath(t *testing.T) {
	each(t, func(t *testing.T, f *fixture) {
		f.start("o1", 1200)
		expect(t, f.commands("o1"), "ChargeRequested")
		if in := f.get("o1"); in.State != "PaymentPending" || in.Phase != saga.Running {
			t.Fatalf("after start: %s %s", in.State, in.Phase)
		}
		f.handle(reply("o1", "PaymentSucceeded", "ch_1"))
		expect(t, f.commands("o1"), "ReserveStock")
		f.handle(reply("o1", "StockReserved", ""))
		expect(t, f.commands("o1"), "PrepareShipment")
		f.handle(reply("o1", "ShipmentPrepared", ""))
		in := f.get("o1")
		if in.State != "ShippingReady" || in.Phase != saga.Completed || in.Data.ChargeID != "ch_1" || in.Deadline != nil {
			t.Fatalf("end: %+v", in)
		}
		var states []string
		for _, h := range in.History {
			states = append(states, h.To)
		}
		if strings.Join(states, ">") != "Placed>PaymentPending>Paid>InventoryReserved>ShippingReady" {
			t.Fatalf("history %v", states)
		}
	})
}

// Seed exercise C: the same PaymentSucceeded twice, and StockReserved before
// payment: both ignored, with reasons, and nothing sent twice.
func TestDuplicateAndOutOfOrderEventsAreIgnored(t *testing.T) {
	each(t, func(t *testing.T, f *fixture) {
		f.start("o2", 100)
		f.commands("o2")
		if out := f.handle(reply("o2", "StockReserved", "")); out.Applied || !strings.Contains(out.Reason, "out of order") {
			t.Fatalf("early StockReserved: %+v", out)
		}
		f.handle(reply("o2", "PaymentSucceeded", "ch"))
		if out := f.handle(reply("o2", "PaymentSucceeded", "ch")); out.Applied || !strings.Contains(out.Reason, "duplicate") {
			t.Fatalf("second PaymentSucceeded: %+v", out)
		}
		expect(t, f.commands("o2"), "ReserveStock")
		in := f.get("o2")
		ignored := 0
		for _, h := range in.History {
			if h.Outcome == "ignored" {
				ignored++
				if h.Reason == "" || h.EventID == "" {
					t.Fatalf("ignored event recorded without reason or id: %+v", h)
				}
			}
		}
		if in.State != "Paid" || ignored != 2 {
			t.Fatalf("state %s, %d ignored events recorded", in.State, ignored)
		}
	})
}

// A late failure compensates in reverse order, each compensation once.
func TestCompensationRunsInReverseOnce(t *testing.T) {
	each(t, func(t *testing.T, f *fixture) {
		f.start("o3", 100)
		f.handle(reply("o3", "PaymentSucceeded", "ch"))
		f.handle(reply("o3", "StockReserved", ""))
		f.commands("o3")
		f.handle(reply("o3", "ShipmentFailed", "", saga.HeaderReason, "no courier available"))
		// Shipping failed outright: only inventory and payment took effect.
		expect(t, f.commands("o3"), "ReleaseStock")
		if in := f.get("o3"); in.State != "Compensating" || in.Reason != "shipping: no courier available" {
			t.Fatalf("compensating: %+v", in)
		}
		if out := f.handle(reply("o3", "PaymentRefunded", "")); out.Applied {
			t.Fatal("refund confirmed before the release was: must wait its turn")
		}
		f.handle(reply("o3", "StockReleased", ""))
		if out := f.handle(reply("o3", "StockReleased", "")); out.Applied {
			t.Fatal("duplicate StockReleased applied")
		}
		expect(t, f.commands("o3"), "RefundRequested")
		f.handle(reply("o3", "PaymentRefunded", ""))
		expect(t, f.commands("o3"))
		in := f.get("o3")
		if in.State != "Cancelled" || in.Phase != saga.Cancelled || in.Reason != "shipping: no courier available" {
			t.Fatalf("end: %+v", in)
		}
		if out := f.handle(reply("o3", "PaymentRefunded", "")); out.Applied || !strings.Contains(out.Reason, "after the saga ended") {
			t.Fatalf("refund after the end: %+v", out)
		}
	})
}

func TestDeclinedPaymentCancelsAtOnce(t *testing.T) {
	each(t, func(t *testing.T, f *fixture) {
		f.start("o4", 100)
		f.commands("o4")
		f.handle(reply("o4", "PaymentDeclined", "", saga.HeaderReason, "card declined"))
		expect(t, f.commands("o4"))
		if in := f.get("o4"); in.State != "Cancelled" || in.Reason != "payment: card declined" {
			t.Fatalf("%+v", in)
		}
	})
}

// A step that times out is compensated (it may have happened), its late
// reply is ignored, and an unconfirmed compensation is sent again, each
// copy waiting twice as long, until it is confirmed.
func TestTimeoutCompensatesAndRetries(t *testing.T) {
	each(t, func(t *testing.T, f *fixture) {
		f.start("o5", 100)
		f.commands("o5")
		f.advance(5 * time.Second)
		if n, err := f.orch.Expire(context.Background()); err != nil || n != 0 {
			t.Fatalf("expired %d before the deadline: %v", n, err)
		}
		f.advance(6 * time.Second)
		if n, err := f.orch.Expire(context.Background()); err != nil || n != 1 {
			t.Fatalf("expired %d: %v", n, err)
		}
		expect(t, f.commands("o5"), "RefundRequested")
		if out := f.handle(reply("o5", "PaymentSucceeded", "ch")); out.Applied || !strings.Contains(out.Reason, "late") {
			t.Fatalf("late reply: %+v", out)
		}
		f.advance(11 * time.Second) // the refund is not confirmed in time: send it again
		if n, _ := f.orch.Expire(context.Background()); n != 1 {
			t.Fatal("compensation not retried")
		}
		expect(t, f.commands("o5"), "RefundRequested")
		// Each copy waits twice as long as the one before: 20s now.
		f.advance(11 * time.Second)
		if n, _ := f.orch.Expire(context.Background()); n != 0 {
			t.Fatal("compensation sent again before its doubled wait")
		}
		f.advance(10 * time.Second)
		if n, _ := f.orch.Expire(context.Background()); n != 1 {
			t.Fatal("compensation not retried after its doubled wait")
		}
		expect(t, f.commands("o5"), "RefundRequested")
		f.handle(reply("o5", "PaymentRefunded", ""))
		if in := f.get("o5"); in.State != "Cancelled" || in.Reason != "payment timed out" {
			t.Fatalf("%+v", in)
		}
	})
}

// Two transitions of one instance at once: one wins, the other gets
// ErrConflict and, retried, sees the new state.
func TestConcurrentTransitionsConflict(t *testing.T) {
	f := newFixture(t, "postgres") // row locks; SQLite serialises whole transactions instead
	f.start("o6", 100)
	ctx := context.Background()
	tx1, err := f.db.BeginTx(ctx, nil)
	testenv.Must(t, err, "begin")
	defer tx1.Rollback()
	_, err = f.orch.Handle(ctx, tx1, reply("o6", "PaymentSucceeded", "a"))
	testenv.Must(t, err, "first")
	var first int
	testenv.Must(t, tx1.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&first), "first's backend")
	done := make(chan error, 1)
	go func() {
		done <- f.sagas.InTx(ctx, func(tx *sql.Tx) error {
			_, err := f.orch.Handle(ctx, tx, reply("o6", "PaymentDeclined", ""))
			return err
		})
	}()
	testenv.Eventually(t, 10*time.Second, func() bool {
		var waiting int
		err := f.db.QueryRowContext(ctx, "SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))", first).Scan(&waiting)
		return err == nil && waiting > 0
	}, "the second transition does not wait on the row the first holds")
	testenv.Must(t, tx1.Commit(), "commit first")
	if err := <-done; !errors.Is(err, saga.ErrConflict) {
		t.Fatalf("second transition: %v, want ErrConflict", err)
	}
	if out := f.handle(reply("o6", "PaymentDeclined", "")); out.Applied {
		t.Fatal("the retried decline applied although payment succeeded")
	}
	if in := f.get("o6"); in.State != "Paid" {
		t.Fatalf("state %s", in.State)
	}
}

func TestDefinitionErrorsNameTheField(t *testing.T) {
	st := sqlite.NewDriver(nil).Sagas() // never reached: the definitions are refused first
	w := outbox.New(postgres.DatabaseSQL(), outbox.Config{})
	bad := orderSaga()
	bad.Steps[2].Compensate = nil
	if _, err := saga.New(bad, st, w, saga.Config{}); err == nil || !strings.Contains(err.Error(), "Steps[2] (shipping)") {
		t.Fatalf("timeout without compensation: %v", err)
	}
	bad = orderSaga()
	bad.Type = ""
	if _, err := saga.New(bad, st, w, saga.Config{}); err == nil || !strings.Contains(err.Error(), "Definition.Type") {
		t.Fatalf("no type: %v", err)
	}
}

// Definition.Validate names each field that is wrong, as New does.
func TestDefinitionValidate(t *testing.T) {
	if err := orderSaga().Validate(); err != nil {
		t.Fatalf("a valid definition: %v", err)
	}
	if err := (saga.Config{}).Validate(); err != nil {
		t.Fatalf("the zero Config: %v", err)
	}
	st := sqlite.NewDriver(nil).Sagas()
	w := outbox.New(postgres.DatabaseSQL(), outbox.Config{})
	for _, c := range []struct {
		change func(d *saga.Definition[Order])
		want   string
	}{
		{func(d *saga.Definition[Order]) { d.Type = "" }, "Definition.Type is empty"},
		{func(d *saga.Definition[Order]) { d.Initial = "" }, "Definition.Initial is empty"},
		{func(d *saga.Definition[Order]) { d.Steps = nil }, "Definition.Steps is empty"},
		{func(d *saga.Definition[Order]) { d.Steps[0].Done = "" }, "Definition.Steps[0] (\"payment\") needs Name, Done, Command and Succeeded"},
		{func(d *saga.Definition[Order]) { d.Steps[1].Timeout = -time.Second }, "Definition.Steps[1] (inventory).Timeout is -1s: use more than 0, or 0"},
		{func(d *saga.Definition[Order]) { d.Steps[1].CompensationTimeout = -time.Second }, "Definition.Steps[1] (inventory).CompensationTimeout is -1s: use more than 0"},
		{func(d *saga.Definition[Order]) { d.Steps[2].Compensated = "" }, "Definition.Steps[2] (shipping) has Compensate but no Compensated"},
		{func(d *saga.Definition[Order]) { d.Steps[2].Retriable = true }, "Definition.Steps[2] (shipping) is Retriable and has Compensate"},
		{func(d *saga.Definition[Order]) { d.Steps[2].Compensate = nil }, "Definition.Steps[2] (shipping) has a Timeout but neither"},
	} {
		d := orderSaga()
		c.change(&d)
		if err := d.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate: %v, want %q", err, c.want)
		}
		if _, err := saga.New(d, st, w, saga.Config{}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New: %v, want %q", err, c.want)
		}
	}
}
