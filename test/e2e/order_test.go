package e2e

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
// This test checks its half about serialised writers end to end; the other
// half, unserialised writers claimed in the order their rows become
// visible, is the store conformance suite's (store/storetest).

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
func testOrderSerialised[TTx any](t *testing.T, d store.Driver[TTx]) {
	const keys, goroutines = 50, 8
	n := 3000
	if testing.Short() {
		n = 1000
	}
	// No deadline for the writing: a busy machine writes slower, and a
	// writer stops after five failures in a row of one transaction.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	testenv.Must(t, d.InTx(ctx, func(tx TTx) error {
		if _, err := d.Exec(ctx, tx, "CREATE TABLE courier_test_aggregates (id VARCHAR(64) PRIMARY KEY, version INTEGER NOT NULL)"); err != nil {
			return err
		}
		for k := range keys {
			if _, err := d.Exec(ctx, tx, "INSERT INTO courier_test_aggregates (id, version) VALUES (?, 0)", fmt.Sprintf("agg-%d", k)); err != nil {
				return err
			}
		}
		return nil
	}), "create the aggregates")
	const (
		lockSQL = "UPDATE courier_test_aggregates SET version = version + ? WHERE id = ?"
		readSQL = "SELECT version FROM courier_test_aggregates WHERE id = ?"
		saveSQL = "UPDATE courier_test_aggregates SET version = ? WHERE id = ? AND version = ?"
	)

	b := newBroker(t)
	st := relayStore(t, d)
	notify, _ := b.startRelays(st, 3)
	w := outbox.New(d.Inserter(), outbox.Config{Notify: notify})

	// write appends c messages to the aggregate key in one transaction.
	write := func(ctx context.Context, rng *rand.Rand, key string, c int, lock bool) ([]courier.Message, error) {
		var msgs []courier.Message
		err := d.InTx(ctx, func(tx TTx) error {
			msgs = msgs[:0]
			var v int
			if lock {
				if _, err := d.Exec(ctx, tx, lockSQL, c, key); err != nil {
					return fmt.Errorf("lock aggregate: %w", err)
				}
				if err := d.QueryRow(ctx, tx, readSQL, []any{&v}, key); err != nil {
					return fmt.Errorf("read version: %w", err)
				}
				v -= c
			} else if err := d.QueryRow(ctx, tx, readSQL, []any{&v}, key); err != nil {
				return fmt.Errorf("read version: %w", err)
			}
			for i := range c {
				p, _ := json.Marshal(versioned{Key: key, Version: v + 1 + i})
				msgs = append(msgs, courier.NewMessage("events", key, "Versioned", p, courier.WithContentType(courier.ContentTypeJSON)))
			}
			// The first message, then the rest: several Write calls of one
			// transaction keep their order.
			if err := w.Write(ctx, tx, msgs[0]); err != nil {
				return err
			}
			if !d.SerialWrites() && rng.IntN(2) == 0 {
				time.Sleep(time.Duration(rng.IntN(1000)) * time.Microsecond) // let claims run while it is open
			}
			if err := w.Write(ctx, tx, msgs[1:]...); err != nil {
				return err
			}
			if !lock {
				n, err := d.Exec(ctx, tx, saveSQL, v+c, key, v)
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
			for {
				c := 1 + rng.IntN(3)
				if reserved.Add(int64(c)) > int64(n) {
					return
				}
				key := fmt.Sprintf("agg-%d", rng.IntN(keys))
				lock := rng.IntN(2) == 0
				failures := 0
				for {
					msgs, err := write(ctx, rng, key, c, lock)
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
						errs <- fmt.Errorf("write %d messages to %s: %w", c, key, err)
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
	testenv.WhileProgressing(t, 30*time.Second, func() (bool, any) { n := pending(t, st); return n == 0, n }, "outbox not drained")
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
