package failgroup_test

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"go.uber.org/goleak"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/failgroup"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/dburl"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(testenv.M(m)) }

// databases are the dialects Collect is tested on: SQLite always,
// PostgreSQL and MySQL/MariaDB when their variables are set.
var databases = map[string]func(t testing.TB) string{
	"sqlite":   func(t testing.TB) string { return "sqlite://" + filepath.Join(t.TempDir(), "courier.db") },
	"postgres": func(t testing.TB) string { return testenv.Postgres(t, nil).URL },
	"mysql":    func(t testing.TB) string { return testenv.MySQL(t, nil).URL },
}

// failures makes relay-side dead letters the way a relay does (written,
// claimed, failed for the last time with errs[i]) and parks a delivery for
// each of parked (consumer and error).
func failures(t *testing.T, db *dburl.DB, topics, errs []string, parked [][2]string) {
	t.Helper()
	deadLetters(t, db, topics, errs)
	for _, p := range parked {
		id, _ := uuid.NewV7()
		err := db.ConsumerStore().Park(context.Background(), store.Parked{Consumer: p[0], MessageID: id.String(), Subject: "courier.payments",
			Headers: map[string][]string{"Courier-Type": {"ChargeRequested"}}, Payload: []byte("x"), Reason: store.ReasonFailed,
			Error: p[1], Attempts: 3, History: []store.Attempt{{At: time.Now(), Error: p[1]}}, ParkedAt: time.Now()})
		testenv.Must(t, err, "park")
	}
}

// deadLetters makes a relay-side dead letter of topics[i] failing with
// errs[i] for each i, the way a relay does.
func deadLetters(t testing.TB, db *dburl.DB, topics, errs []string) {
	t.Helper()
	ctx := context.Background()
	msgs := make([]courier.Message, len(topics))
	for i, topic := range topics {
		msgs[i] = courier.NewMessage(topic, fmt.Sprintf("k%d", i), "OrderPlaced", []byte("{}"))
	}
	testenv.Must(t, db.InTx(ctx, func(tx *sql.Tx) error { return db.Inserter().Insert(ctx, tx, msgs) }), "insert")
	rs, err := db.RelayStore(ctx, store.RelayConfig{})
	testenv.Must(t, err, "relay store")
	b, err := rs.Claim(ctx, "relay-1", len(msgs), time.Minute)
	testenv.Must(t, err, "claim")
	var o store.Outcome
	for i, r := range b.Records {
		o.Dead = append(o.Dead, store.Failure{Seq: r.Seq, Error: errs[i], Counted: true})
	}
	testenv.Must(t, rs.Complete(ctx, "relay-1", b.Lease, o), "complete")
}

func TestCollect(t *testing.T) {
	for name, url := range databases {
		t.Run(name, func(t *testing.T) { testCollect(t, url(t)) })
	}
}

func testCollect(t *testing.T, dbURL string) {
	ctx := context.Background()
	db, err := dburl.Open(ctx, dbURL, dburl.Options{Create: true})
	testenv.Must(t, err, "open")
	t.Cleanup(db.Close)
	_, err = db.Migrate(ctx)
	testenv.Must(t, err, "migrate")
	failures(t, db,
		[]string{"orders", "refunds", "orders", "orders"},
		[]string{
			`subject "courier.orders": nats: maximum payload exceeded: the message's payload is 2000000 bytes`,
			`subject "courier.refunds": nats: maximum payload exceeded: the message's payload is 3000000 bytes`,
			`subject "courier.orders": nats: maximum payload exceeded: the message's payload is 1500000 bytes`,
			"schema rejected: field amount",
		},
		[][2]string{
			{"billing", "handler panicked at payment.(*Service).charge (charge.go:42): card 4242 declined"},
			{"billing", "handler panicked at payment.(*Service).charge (charge.go:42): card 5555 declined"},
			{"billing", "ledger unavailable"},
			{"refunds", "ledger unavailable"},
		})

	rep, err := failgroup.Collect(ctx, db.Admin(), failgroup.Options{})
	testenv.Must(t, err, "collect")
	if rep.Read != 8 || rep.Truncated || len(rep.Groups) != 5 {
		t.Fatalf("read %d failures in %d groups (truncated %v), want 8 in 5: %+v", rep.Read, len(rep.Groups), rep.Truncated, rep.Groups)
	}
	big := rep.Groups[0]
	if big.Side != failgroup.Relay || big.Count != 3 || big.Class != "nats" || !slices.Equal(big.Topics, []string{"orders", "refunds"}) ||
		!slices.Equal(big.Types, []string{"OrderPlaced"}) || len(big.IDs) != 3 || big.First.After(big.Last) || big.First.IsZero() {
		t.Fatalf("largest group %+v: want the 3 payloads too large, of orders and refunds", big)
	}
	panics := rep.Groups[1]
	if panics.Side != failgroup.Consumer || panics.Count != 2 || panics.Site != "payment.(*Service).charge (charge.go:42)" ||
		!slices.Equal(panics.Consumers, []string{"billing"}) || !slices.Equal(panics.Topics, []string{"courier.payments"}) ||
		!slices.Equal(panics.Types, []string{"ChargeRequested"}) {
		t.Fatalf("second group %+v: want billing's 2 panics at one site", panics)
	}
	for _, g := range rep.Groups {
		if found, ok := rep.Find(g.ID); !ok || found.Count != g.Count {
			t.Fatalf("Find(%s) = %+v, %v", g.ID, found, ok)
		}
	}
	if _, ok := rep.Find("000000000000"); ok {
		t.Fatal("Find found a group that is not there")
	}

	// A side, a filter, a bound.
	rep, err = failgroup.Collect(ctx, db.Admin(), failgroup.Options{Side: failgroup.Consumer, Filter: store.ListQuery{Consumer: "refunds"}})
	testenv.Must(t, err, "collect refunds")
	if rep.Read != 1 || len(rep.Groups) != 1 || rep.Groups[0].Consumers[0] != "refunds" {
		t.Fatalf("refunds' groups: %+v", rep)
	}
	rep, err = failgroup.Collect(ctx, db.Admin(), failgroup.Options{Side: failgroup.Relay, Max: 2})
	testenv.Must(t, err, "collect 2")
	if rep.Read != 2 || !rep.Truncated {
		t.Fatalf("collect at most 2: read %d, truncated %v", rep.Read, rep.Truncated)
	}
	// A bound as large as an int can be reads every failure: reading one
	// more than Max to tell whether there are more does not overflow.
	rep, err = failgroup.Collect(ctx, db.Admin(), failgroup.Options{Max: math.MaxInt})
	testenv.Must(t, err, "collect at most MaxInt")
	if rep.Read != 8 || rep.Truncated {
		t.Fatalf("collect at most MaxInt: read %d, truncated %v; want 8, false", rep.Read, rep.Truncated)
	}
	for _, o := range []failgroup.Options{{Max: -1}, {Side: "both"}} {
		if _, err := failgroup.Collect(ctx, db.Admin(), o); err == nil {
			t.Fatalf("Collect(%+v) did not fail", o)
		}
	}
}
