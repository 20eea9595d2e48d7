package postgres_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/postgres"
)

// heldRows writes n messages of key, with a table-less one after them,
// and returns them as the CDC relay reads them.
func heldRows(t *testing.T, pg *testenv.PG, key string, n int) []*store.LogItem {
	t.Helper()
	ctx := context.Background()
	msgs := make([]courier.Message, n)
	for i := range msgs {
		msgs[i] = courier.NewMessage("orders", key, "T", []byte(fmt.Sprint(i)))
	}
	w := outbox.New(postgres.Pgx(), outbox.Config{})
	testenv.Must(t, pgx.BeginFunc(ctx, pg.Pool, func(tx pgx.Tx) error { return w.Write(ctx, tx, msgs...) }), "write")
	rows, err := pg.Pool.Query(ctx, `SELECT id FROM courier_outbox WHERE ordering_key = $1 ORDER BY id`, key)
	testenv.Must(t, err, "ids")
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	testenv.Must(t, err, "ids")
	items := make([]*store.LogItem, n)
	for i := range items {
		items[i] = &store.LogItem{Seq: ids[i], Message: msgs[i]}
	}
	return append(items, &store.LogItem{Message: courier.NewMessage("orders", key, "T", []byte("table-less"))})
}

// deadItem makes it a dead letter that holds its key, after one refusal.
func deadItem(it *store.LogItem) *store.LogItem {
	it.Hold, it.Attempts = true, 1
	it.History = []store.PublishAttempt{{At: time.Now().UTC(), Error: "refused", Counted: true}}
	return it
}

// Record makes a dead letter that holds its key when its item says so;
// Held lists the key; Hold moves the key's rows, and its table-less
// messages, behind it (once each), and finds other keys free; a row
// already gone is missing, and visible.
func TestCDCHold(t *testing.T) {
	pg := testenv.Postgres(t, testenv.Migrate(postgres.NewDriver))
	ctx := context.Background()
	cdc := postgres.NewDriver(pg.Pool).CDC()
	items := heldRows(t, pg, "k", 4)
	free := heldRows(t, pg, "free", 1)
	cause := deadItem(items[0])
	_, err := cdc.Record(ctx, nil, []*store.LogItem{cause}, false)
	testenv.Must(t, err, "record")
	held, err := cdc.Held(ctx)
	testenv.Must(t, err, "held")
	if len(held) != 1 || held["k"] != cause.Seq {
		t.Fatalf("held keys %v, want k behind %d", held, cause.Seq)
	}
	gone := &store.LogItem{Seq: cause.Seq, Message: cause.Message, Xid: 1}
	missing, behind, notHeld := store.HoldMissing, store.HeldBehind, store.NotHeld
	for i, want := range [][]store.HoldResult{
		{missing, behind, behind, behind, behind, notHeld, notHeld},
		// Again, as a relay does that reads again what it had not
		// confirmed: the rows are gone, the table-less message is held
		// once.
		{missing, missing, missing, missing, behind, notHeld, notHeld},
	} {
		h, err := cdc.Hold(ctx, append(append([]*store.LogItem{gone}, items[1:]...), free...))
		testenv.Must(t, err, "hold")
		if fmt.Sprint(h.Results) != fmt.Sprint(want) {
			t.Fatalf("hold %d: results %v, want %v", i+1, h.Results, want)
		}
		if !h.Visible(1) {
			t.Fatal("the dead letter's row is missing, and its transaction not visible")
		}
	}
	var n, behindCause int
	testenv.Must(t, pg.Pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE behind = $1) FROM courier_outbox_held`, cause.Seq).Scan(&n, &behindCause), "held")
	if n != 4 || behindCause != 4 {
		t.Fatalf("%d held, %d behind the dead letter; want the 3 rows and the table-less message, once each", n, behindCause)
	}
	testenv.Must(t, pg.Pool.QueryRow(ctx, `SELECT count(*) FROM courier_outbox`).Scan(&n), "rows")
	if n != 1 {
		t.Fatalf("%d rows left, want the free key's", n)
	}
}

// Holding races a replay of the dead letter that holds the key: whichever
// goes first, no message is stranded behind a dead letter that is gone,
// and none is lost.
func TestCDCHoldRacesReplay(t *testing.T) {
	pg := testenv.Postgres(t, testenv.Migrate(postgres.NewDriver))
	ctx := context.Background()
	cdc := postgres.NewDriver(pg.Pool).CDC()
	admin := postgres.Admin(pg.Pool)
	for round := range 20 {
		key := fmt.Sprintf("k%d", round)
		items := heldRows(t, pg, key, 6)
		deadItem(items[0])
		_, err := cdc.Record(ctx, nil, items[:1], false)
		testenv.Must(t, err, "record")
		var wg sync.WaitGroup
		wg.Go(func() {
			if _, err := cdc.Hold(ctx, items[1:]); err != nil {
				t.Errorf("hold: %v", err)
			}
		})
		wg.Go(func() {
			if err := admin.ReplayDeadLetter(ctx, items[0].Seq); err != nil {
				t.Errorf("replay: %v", err)
			}
		})
		wg.Wait()
		var stranded, rows, held int
		testenv.Must(t, pg.Pool.QueryRow(ctx, `SELECT count(*) FROM courier_outbox_held h
WHERE NOT EXISTS (SELECT 1 FROM courier_outbox_dead_letters d WHERE d.id = h.behind AND d.holds)`).Scan(&stranded), "stranded")
		if stranded != 0 {
			t.Fatalf("round %d: %d held messages behind no dead letter that holds their key", round, stranded)
		}
		testenv.Must(t, pg.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM courier_outbox WHERE ordering_key = $1),
       (SELECT count(*) FROM courier_outbox_held WHERE ordering_key = $1)`, key).Scan(&rows, &held), "count")
		if rows+held < 6 { // the dead letter and its 5 rows; the table-less message is held, or left to the relay
			t.Fatalf("round %d: %d rows and %d held messages, want the dead letter and its key's 5 rows", round, rows, held)
		}
	}
}
