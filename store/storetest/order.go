package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/store"
)

// The per-key order contract is stated in package relay (section Ordering).
// These tests check both of its halves: writers serialised per key are
// published in write order; unserialised concurrent writers of one key are
// published in the order their rows become visible, which can differ from
// their outbox ids.

// txWriters returns the writers that can run transactions of the test's
// own (Writer.InTx), failing the test when there is none.
func txWriters(t *testing.T, db *DB) []Writer {
	t.Helper()
	var ws []Writer
	for _, w := range db.Writers {
		if w.InTx != nil {
			ws = append(ws, w)
		}
	}
	if len(ws) == 0 {
		t.Fatal("storetest: no DB.Writers entry has InTx: storetest.SQLWriter sets it")
	}
	return ws
}

// openTx is a transaction running in a goroutine of its own: it writes its
// messages, reports that, and then waits to be told whether to commit.
type openTx struct {
	wrote  chan struct{}
	finish chan bool
	done   chan error
}

var errRolledBack = errors.New("rolled back on purpose")

// begin starts a transaction with w that writes msgs and stays open until
// end is called. wrote is closed once msgs are inserted; a database that
// runs one writer at a time may not get that far while another is open.
func begin(ctx context.Context, w Writer, msgs ...courier.Message) *openTx {
	o := &openTx{wrote: make(chan struct{}), finish: make(chan bool, 1), done: make(chan error, 1)}
	go func() {
		o.done <- w.InTx(ctx, outbox.Config{}, func(tx Tx) error {
			if err := tx.Write(ctx, msgs...); err != nil {
				return err
			}
			close(o.wrote)
			if !<-o.finish {
				return errRolledBack
			}
			return nil
		})
	}()
	return o
}

// end lets the transaction commit and returns the outcome.
func (o *openTx) end(t *testing.T, what string) {
	t.Helper()
	o.finish <- true
	o.wait(t, what)
}

// wait waits for the transaction to end on its own.
func (o *openTx) wait(t *testing.T, what string) {
	t.Helper()
	select {
	case err := <-o.done:
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("%s: did not commit within 20s", what)
	}
}

// Two transactions write the same key without serialising: T1 inserts its
// message first, so its row has the smaller id, and commits after T2. A
// claim made in between sees only T2's row and takes it; T1's row, once
// committed, waits for T2's lease and is published after it. That is the
// contract for unserialised writers: publication follows the order in which
// rows become visible, not their ids. On a database that runs one writer at
// a time (DB.SerialWrites) T2 cannot write while T1 is open, so the two are
// serialised by the database itself and published in write order.
func testOrderUnserialised(t *testing.T, h Harness) {
	db := open(t, h, true)
	st := db.newStore(t, false)
	for _, w := range txWriters(t, db) {
		t.Run(w.Name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			key := "aggregate-" + w.Name
			m1 := courier.NewMessage("events", key, "First", []byte("written first, committed last"))
			m2 := courier.NewMessage("events", key, "Second", []byte("written second, committed first"))
			t1 := begin(ctx, w, m1)
			select {
			case <-t1.wrote:
			case err := <-t1.done:
				t.Fatalf("T1: %v", err)
			case <-time.After(20 * time.Second):
				t.Fatal("T1 did not write within 20s")
			}
			t2 := begin(ctx, w, m2)
			t2.finish <- true
			if db.SerialWrites {
				select {
				case err := <-t2.done:
					t.Fatalf("T2 ended (%v) while T1 was still writing; the harness says the database runs one writer at a time (DB.SerialWrites)", err)
				case <-time.After(300 * time.Millisecond):
				}
				t1.end(t, "T1")
				t2.wait(t, "T2")
				b := claim(t, st, "r1", 10, time.Minute)
				if got := ids(b.Records); !slices.Equal(got, []string{m1.ID.String(), m2.ID.String()}) {
					t.Fatalf("claimed %v; want T1's message, then T2's %v", got, []string{m1.ID.String(), m2.ID.String()})
				}
				complete(t, st, "r1", b, store.Outcome{Published: seqs(b.Records)})
				return
			}
			t2.wait(t, "T2 (T1 still open)")
			b1 := claim(t, st, "r1", 10, time.Minute)
			if got := ids(b1.Records); !slices.Equal(got, []string{m2.ID.String()}) {
				t.Fatalf("with T1 open and T2 committed, claimed %v; want T2's message %s alone", got, m2.ID)
			}
			t1.end(t, "T1")
			if b := claim(t, st, "r2", 10, time.Minute); len(b.Records) != 0 {
				t.Fatalf("claimed %v while T2's message of the same key is leased", ids(b.Records))
			}
			complete(t, st, "r1", b1, store.Outcome{Published: seqs(b1.Records)})
			b2 := claim(t, st, "r2", 10, time.Minute)
			if got := ids(b2.Records); !slices.Equal(got, []string{m1.ID.String()}) {
				t.Fatalf("after T2's message was published, claimed %v; want T1's message %s", got, m1.ID)
			}
			if b2.Records[0].Seq >= b1.Records[0].Seq {
				t.Fatalf("T1's row has id %d, T2's %d: T1 inserted first, so its id should be the smaller one", b2.Records[0].Seq, b1.Records[0].Seq)
			}
			complete(t, st, "r2", b2, store.Outcome{Published: seqs(b2.Records)})
			t.Logf("published id %d before id %d: the order the rows became visible in", b1.Records[0].Seq, b2.Records[0].Seq)
		})
	}
}

func ids(recs []store.Record) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = r.Message.ID.String()
	}
	return out
}

// versioned is the payload of the serialised writers' messages.
type versioned struct {
	Key     string `json:"key"`
	Version int    `json:"version"`
}

// errConflict is a version check that found the aggregate changed.
var errConflict = errors.New("aggregate changed since it was read")

// Eight writers append a few thousand messages to fifty aggregates, each
// transaction serialised per aggregate the way applications do it: half of
// them lock the aggregate's row first (an UPDATE), half read its version
// and save it with a version check at the end, retrying on conflict. Each
// message carries its aggregate's version. Three relays publish through an
// embedded NATS server while the writers run, and each key's messages must
// arrive with versions 1, 2, 3, …: write order, with no violation.
func testOrderSerialised(t *testing.T, h Harness) {
	db := open(t, h, true)
	writers := txWriters(t, db)
	const keys, goroutines = 50, 8
	n := 3000
	if testing.Short() {
		n = 1000
	}
	db.exec(t, "CREATE TABLE courier_test_aggregates (id VARCHAR(64) PRIMARY KEY, version INTEGER NOT NULL)")
	for k := range keys {
		db.exec(t, "INSERT INTO courier_test_aggregates (id, version) VALUES (?, 0)", fmt.Sprintf("agg-%d", k))
	}
	lockSQL := db.rebind("UPDATE courier_test_aggregates SET version = version + ? WHERE id = ?")
	readSQL := db.rebind("SELECT version FROM courier_test_aggregates WHERE id = ?")
	saveSQL := db.rebind("UPDATE courier_test_aggregates SET version = ? WHERE id = ? AND version = ?")

	b := newBroker(t)
	st := db.newStore(t, false)
	var notifiers []*store.LocalNotifier
	for range 3 {
		ln := store.NewLocalNotifier()
		notifiers = append(notifiers, ln)
		b.startRelay(st, relayConfig(ln))
	}
	cfg := outbox.Config{Notify: func() {
		for _, ln := range notifiers {
			ln.Signal()
		}
	}}

	// write appends c messages to the aggregate key in one transaction.
	write := func(ctx context.Context, w Writer, rng *rand.Rand, key string, c int, lock bool) ([]courier.Message, error) {
		var msgs []courier.Message
		err := w.InTx(ctx, cfg, func(tx Tx) error {
			msgs = msgs[:0]
			var v int
			if lock {
				if _, err := tx.Exec(ctx, lockSQL, c, key); err != nil {
					return fmt.Errorf("lock aggregate: %w", err)
				}
				if err := tx.QueryRow(ctx, []any{&v}, readSQL, key); err != nil {
					return fmt.Errorf("read version: %w", err)
				}
				v -= c
			} else if err := tx.QueryRow(ctx, []any{&v}, readSQL, key); err != nil {
				return fmt.Errorf("read version: %w", err)
			}
			for i := range c {
				p, _ := json.Marshal(versioned{Key: key, Version: v + 1 + i})
				msgs = append(msgs, courier.NewMessage("events", key, "Versioned", p, courier.WithContentType(courier.ContentTypeJSON)))
			}
			// The first message, then the rest: several Write calls of one
			// transaction keep their order.
			if err := tx.Write(ctx, msgs[0]); err != nil {
				return err
			}
			if !db.SerialWrites && rng.IntN(2) == 0 {
				time.Sleep(time.Duration(rng.IntN(1000)) * time.Microsecond) // let claims run while it is open
			}
			if err := tx.Write(ctx, msgs[1:]...); err != nil {
				return err
			}
			if !lock {
				n, err := tx.Exec(ctx, saveSQL, v+c, key, v)
				if err != nil {
					return fmt.Errorf("save aggregate: %w", err)
				}
				if n == 0 {
					return errConflict
				}
			}
			return nil
		})
		return msgs, err
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var (
		reserved  atomic.Int64
		conflicts atomic.Int64
		retries   atomic.Int64
		mu        sync.Mutex
		committed = map[string][]courier.Message{} // per key, by version
		wg        sync.WaitGroup
		errs      = make(chan error, goroutines)
	)
	start := time.Now()
	for g := range goroutines {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 42))
			w := writers[g%len(writers)]
			for {
				c := 1 + rng.IntN(3)
				if reserved.Add(int64(c)) > int64(n) {
					return
				}
				key := fmt.Sprintf("agg-%d", rng.IntN(keys))
				lock := rng.IntN(2) == 0
				failures := 0
				for {
					msgs, err := write(ctx, w, rng, key, c, lock)
					if err == nil {
						mu.Lock()
						committed[key] = append(committed[key], msgs...)
						mu.Unlock()
						break
					}
					if errors.Is(err, errConflict) {
						conflicts.Add(1)
						continue
					}
					// A deadlock or busy database: the transaction rolled
					// back; try it again, as an application would.
					retries.Add(1)
					if failures++; failures == 5 || ctx.Err() != nil {
						errs <- fmt.Errorf("%s: write %d messages to %s: %w", w.Name, c, key, err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var written []courier.Message
	total := 0
	for key, msgs := range committed {
		slices.SortFunc(msgs, func(a, b courier.Message) int { return version(t, a) - version(t, b) })
		for i, m := range msgs {
			if v := version(t, m); v != i+1 {
				t.Fatalf("key %s: committed versions are not 1..%d (found %d at position %d): the writers were not serialised", key, len(msgs), v, i)
			}
		}
		written = append(written, msgs...)
		total += len(msgs)
	}
	testenv.Eventually(t, 60*time.Second, func() bool { return stats(t, st).Pending == 0 }, "outbox not drained: %+v", stats(t, st))
	elapsed := time.Since(start)
	got := b.received()
	dups := checkDelivery(t, written, got)

	// What a consumer sees: each key's versions, first deliveries only.
	seen := map[[16]byte]bool{}
	last := map[string]int{}
	violations := 0
	for _, m := range got {
		if seen[m.ID] {
			continue
		}
		seen[m.ID] = true
		v := version(t, m)
		if v != last[m.Key]+1 {
			violations++
			if violations <= 5 {
				t.Errorf("key %s: version %d arrived after version %d", m.Key, v, last[m.Key])
			}
		}
		last[m.Key] = max(last[m.Key], v)
	}
	if violations > 0 {
		t.Fatalf("%d per-key order violations among %d messages", violations, total)
	}
	t.Logf("%d messages in %d keys by %d serialised writers (%d version conflicts retried, %d failed transactions retried) through 3 relays in %s; %d duplicates, 0 order violations",
		total, len(committed), goroutines, conflicts.Load(), retries.Load(), elapsed.Round(time.Millisecond), dups)
}

func version(t *testing.T, m courier.Message) int {
	t.Helper()
	var p versioned
	if err := json.Unmarshal(m.Payload, &p); err != nil {
		t.Fatalf("message %s: payload %q: %v", m.ID, m.Payload, err)
	}
	if p.Key != m.Key {
		t.Fatalf("message %s: payload key %q, message key %q", m.ID, p.Key, m.Key)
	}
	return p.Version
}
