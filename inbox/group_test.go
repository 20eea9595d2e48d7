package inbox_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/inbox"
	"github.com/courier-go/courier/internal/testenv"
)

// groupSizes is an Observer that notes the size of each group committed.
type groupSizes struct {
	inbox.NopObserver
	mu    sync.Mutex
	sizes []int
}

func (o *groupSizes) Grouped(_ string, n int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.sizes = append(o.sizes, n)
}

// txs counts the transactions a handler ran in and how many messages
// each applied; it keeps every transaction value, so no two are the same.
type txs struct {
	mu   sync.Mutex
	runs map[any]int
}

func (x *txs) ran(tx any) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.runs == nil {
		x.runs = map[any]int{}
	}
	x.runs[tx]++
}

// largest returns the most runs one transaction held, and how many
// transactions there were.
func (x *txs) largest() (most, n int) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, r := range x.runs {
		most = max(most, r)
	}
	return most, len(x.runs)
}

// committedOrder returns the notes of consumer's effects in the order
// they committed (effects.seq).
func (db *database[TTx]) committedOrder(t *testing.T, consumer string) []string {
	t.Helper()
	rows, err := db.sql.QueryContext(context.Background(), db.rebind("SELECT note FROM effects WHERE consumer = ? ORDER BY seq"), consumer)
	testenv.Must(t, err, "read effects")
	defer rows.Close()
	var notes []string
	for rows.Next() {
		var n string
		testenv.Must(t, rows.Scan(&n), "scan effect")
		notes = append(notes, n)
	}
	testenv.Must(t, rows.Err(), "read effects")
	return notes
}

// step is the payload of the messages of the group tests: a key and its
// message's place among the key's.
type step struct {
	Key string `json:"key"`
	N   int    `json:"n"`
}

// steps returns n messages of type typ over keys keys, each key's
// numbered in publishing order.
func steps(typ string, n, keys int) []courier.Message {
	var msgs []courier.Message
	for i := range n {
		k := fmt.Sprintf("k-%d", i%keys)
		payload, _ := json.Marshal(step{Key: k, N: i / keys})
		msgs = append(msgs, courier.NewMessage("orders", k, typ, payload))
	}
	return msgs
}

// checkOrder fails unless notes (JSON steps) hold each of want's messages
// once and each key's in order.
func checkOrder(t *testing.T, notes []string, want int) {
	t.Helper()
	if len(notes) != want {
		t.Fatalf("%d effects, want %d", len(notes), want)
	}
	next := map[string]int{}
	for _, note := range notes {
		var s step
		testenv.Must(t, json.Unmarshal([]byte(note), &s), "effect's note")
		if s.N != next[s.Key] {
			t.Fatalf("key %s: message %d committed when %d was next", s.Key, s.N, next[s.Key])
		}
		next[s.Key]++
	}
}

// A consumer with Group applies a backlog in transactions of up to
// MaxMessages deliveries each: each message once, each key's in order
// (KeepOrder), or in any order; MaxWait fills the groups.
func TestGroupsApplyManyMessagesPerTransaction(t *testing.T) {
	for _, keepOrder := range []bool{true, false} {
		t.Run(fmt.Sprintf("keep_order=%v", keepOrder), func(t *testing.T) {
			onEachDialect(t, groupsApply[pgx.Tx](keepOrder), groupsApply[*sql.Tx](keepOrder))
		})
	}
}

func groupsApply[TTx any](keepOrder bool) func(*testing.T, dialect[TTx]) {
	return func(t *testing.T, d dialect[TTx]) {
		e := newEnv(t, d)
		const n, most = 400, 10
		e.publish(steps("Step", n, 20)...)
		var x txs
		h := func(ctx context.Context, tx TTx, msg courier.Message) error {
			x.ran(tx)
			return e.db.insertEffect(ctx, tx, "grouped", msg)
		}
		var obs groupSizes
		c := e.run("grouped", h, inbox.ConsumerConfig{KeepOrder: keepOrder, Concurrency: 2, Observer: &obs,
			Group: inbox.GroupConfig{MaxMessages: most, MaxWait: time.Second}})
		testenv.WhileProgressing(t, 30*time.Second, func() (bool, any) { m := c.Metrics(); return m.Applied == n, m }, "not all applied")
		largest, count := x.largest()
		if largest != most || count >= n {
			t.Fatalf("the largest transaction applied %d messages (%d transactions for %d messages), want %d", largest, count, n, most)
		}
		obs.mu.Lock()
		if slices.Max(obs.sizes) != most {
			t.Errorf("the observer was told of groups of %v, want some of %d", obs.sizes, most)
		}
		obs.mu.Unlock()
		notes := e.db.committedOrder(t, "grouped")
		if keepOrder {
			checkOrder(t, notes, n)
		} else if slices.Sort(notes); len(slices.Compact(notes)) != n {
			t.Fatalf("%d distinct effects, want %d", len(notes), n)
		}
		if m := c.Metrics(); m.Duplicates != 0 || m.Retried != 0 {
			t.Fatalf("metrics %+v: want every message applied at its first run", m)
		}
	}
}

// A message whose handler always fails leaves its group: the others are
// applied, each once, and it goes on alone, each run counted, until it is
// parked after MaxDeliveries runs; a panicking run is counted as one.
// With KeepOrder its key's later messages wait behind it, then follow.
func TestGroupPoisonMessageLeavesItsGroup(t *testing.T) {
	for _, keepOrder := range []bool{true, false} {
		t.Run(fmt.Sprintf("keep_order=%v", keepOrder), func(t *testing.T) {
			onEachDialect(t, groupPoison[pgx.Tx](keepOrder), groupPoison[*sql.Tx](keepOrder))
		})
	}
}

func groupPoison[TTx any](keepOrder bool) func(*testing.T, dialect[TTx]) {
	return func(t *testing.T, d dialect[TTx]) {
		e := newEnv(t, d)
		const n = 300
		msgs := steps("Step", n, 10)
		poison, panicky := msgs[42], msgs[77]
		e.publish(msgs...)
		var mu sync.Mutex
		panicked := false
		h := func(ctx context.Context, tx TTx, msg courier.Message) error {
			switch msg.ID {
			case poison.ID:
				return errors.New("card declined")
			case panicky.ID:
				mu.Lock()
				first := !panicked
				panicked = true
				mu.Unlock()
				if first {
					panic("out of stock")
				}
			}
			return e.db.insertEffect(ctx, tx, "poisoned", msg)
		}
		c := e.run("poisoned", h, inbox.ConsumerConfig{KeepOrder: keepOrder, Concurrency: 2, MaxDeliveries: 3,
			Group: inbox.GroupConfig{MaxMessages: 50, MaxWait: 200 * time.Millisecond}})
		testenv.WhileProgressing(t, 30*time.Second, func() (bool, any) {
			m := c.Metrics()
			return m.Applied == n-1 && m.Parked == 1, m
		}, "not all applied and parked")
		// Duplicates are not counted: a delivery that waits for a worker
		// longer than the subscriber's AckWait (2s), as on a busy machine,
		// comes again and is skipped. The effects, below, show that none
		// was applied twice.
		m := c.Metrics()
		if m.Retried != 3 || m.Panicked != 1 {
			t.Fatalf("metrics %+v: want the poison's 2 retries and the panic's 1, a panic", m)
		}
		ps := e.parked("poisoned")
		if len(ps) != 1 || ps[0].MessageID != poison.ID.String() || len(ps[0].History) != 3 {
			t.Fatalf("parked %+v: want the poison, with its 3 runs", ps)
		}
		notes := e.db.committedOrder(t, "poisoned")
		if !keepOrder {
			distinct := slices.Compact(slices.Sorted(slices.Values(notes)))
			if len(notes) != n-1 || len(distinct) != n-1 {
				t.Fatalf("%d effects of %d messages, want %d of as many", len(notes), len(distinct), n-1)
			}
			return
		}
		// Each key in order, the poison's key without it.
		var s step
		testenv.Must(t, json.Unmarshal(poison.Payload, &s), "poison's payload")
		next := map[string]int{}
		for _, note := range notes {
			var got step
			testenv.Must(t, json.Unmarshal([]byte(note), &got), "effect's note")
			if got.Key == s.Key && next[got.Key] == s.N {
				next[got.Key]++ // parked
			}
			if got.N != next[got.Key] {
				t.Fatalf("key %s: message %d committed when %d was next", got.Key, got.N, next[got.Key])
			}
			next[got.Key]++
		}
	}
}

// Batch handlers take a group's messages of their type at once, each key's
// in order, interleaved with another type's messages handled one by one;
// a message whose payload does not decode fails its batch, whose messages
// then run alone: it is parked, the others applied once.
func TestBatchHandlers(t *testing.T) {
	onEachDialect(t, testBatchHandlers, testBatchHandlers)
}

func testBatchHandlers[TTx any](t *testing.T, d dialect[TTx]) {
	e := newEnv(t, d)
	const n = 300
	credits, debits := steps("Credit", n, 10), steps("Debit", n, 10)
	var msgs []courier.Message
	for i := range n {
		// Each key's steps alternate between the types: credit 0, debit
		// 0 → its N counts both, in order.
		c, dm := credits[i], debits[i]
		var s step
		testenv.Must(t, json.Unmarshal(c.Payload, &s), "payload")
		c.Payload, _ = json.Marshal(step{Key: s.Key, N: 2 * s.N})
		dm.Payload, _ = json.Marshal(step{Key: s.Key, N: 2*s.N + 1})
		msgs = append(msgs, c, dm)
	}
	bad := msgs[101]
	bad.Type = "Credit"
	bad.Payload = []byte("not json")
	msgs[101] = bad
	e.publish(msgs...)

	var mu sync.Mutex
	var sizes []int
	r := inbox.NewRouter[TTx]()
	inbox.OnBatch(r, func(ctx context.Context, tx TTx, ms []courier.Message, vs []credit) error {
		mu.Lock()
		sizes = append(sizes, len(ms))
		mu.Unlock()
		for i, m := range ms {
			if vs[i].Key != m.Key {
				return fmt.Errorf("message %s decoded as key %q", m.ID, vs[i].Key)
			}
			if err := e.db.insertEffect(ctx, tx, "batched", m); err != nil {
				return err
			}
		}
		return nil
	})
	inbox.OnType(r, "Debit", func(ctx context.Context, tx TTx, m courier.Message, _ step) error {
		return e.db.insertEffect(ctx, tx, "batched", m)
	})
	ib, err := inbox.New(e.db.inbox, "batched")
	testenv.Must(t, err, "inbox")
	c, err := inbox.NewRouterConsumer(ib, e.subscriber("batched"), e.db.cs, r, testConfig(inbox.ConsumerConfig{
		KeepOrder: true, Concurrency: 2, Group: inbox.GroupConfig{MaxMessages: 100, MaxWait: 200 * time.Millisecond}}))
	testenv.Must(t, err, "consumer")
	e.launch(c)
	testenv.WhileProgressing(t, 30*time.Second, func() (bool, any) {
		m := c.Metrics()
		return m.Applied == 2*n-1 && m.Parked == 1, m
	}, "not all applied and parked")
	if ps := e.parked("batched"); len(ps) != 1 || ps[0].MessageID != bad.ID.String() {
		t.Fatalf("parked %+v: want the message that does not decode", ps)
	}
	mu.Lock()
	if slices.Max(sizes) < 2 {
		t.Errorf("batches of %v: want some of more than one message", sizes)
	}
	mu.Unlock()
	// Each key's effects in order, the bad message's missing.
	var s step
	testenv.Must(t, json.Unmarshal(debits[50].Payload, &s), "payload") // msgs[101]'s key
	next := map[string]int{}
	for _, note := range e.db.committedOrder(t, "batched") {
		var got step
		testenv.Must(t, json.Unmarshal([]byte(note), &got), "effect's note")
		if got.Key == s.Key && next[got.Key] == 2*s.N+1 {
			next[got.Key]++ // parked
		}
		if got.N != next[got.Key] {
			t.Fatalf("key %s: step %d committed when %d was next", got.Key, got.N, next[got.Key])
		}
		next[got.Key]++
	}
}

// credit is the batch handler's message type.
type credit step

// MessageType names credit's type.
func (credit) MessageType() string { return "Credit" }

// A message whose marker another transaction holds (an instance still
// applying it, or frozen with its transaction open) holds back only
// itself: marking its group waits Group.SlowRun at most, then each of the
// group's deliveries goes alone, and the others are applied while it
// waits. When that transaction commits, the message is a duplicate. Not
// on SQLite, where the open transaction holds the database's one write
// lock, and so every message; nor on MySQL/MariaDB, whose server goes on
// waiting for the lock after the driver gave the statement up (it closes
// the connection), holding the group's markers, until
// innodb_lock_wait_timeout (docs/operations.md, Grouped commits).
func TestGroupWaitsNotForAMarkerHeldElsewhere(t *testing.T) {
	onEachDialect(t, testGroupMarkerHeldElsewhere, testGroupMarkerHeldElsewhere)
}

func testGroupMarkerHeldElsewhere[TTx any](t *testing.T, d dialect[TTx]) {
	switch d.name {
	case "sqlite":
		t.Skip("SQLite has one writer at a time: a transaction left open holds every message")
	case "mysql":
		t.Skip("a statement MySQL waits in goes on waiting after its connection closed: a group waits up to innodb_lock_wait_timeout")
	}
	e := newEnv(t, d)
	msgs := steps("Step", 60, 60)
	held := msgs[10]
	// The other instance marks held and keeps its transaction open.
	marked, release := make(chan struct{}), make(chan struct{})
	other := make(chan error, 1)
	go func() {
		other <- e.db.inbox.InTx(context.Background(), func(tx TTx) error {
			if _, err := e.db.inbox.Mark(context.Background(), tx, "elsewhere", held.ID); err != nil {
				return err
			}
			close(marked)
			<-release
			return nil // commits
		})
	}()
	<-marked
	e.publish(msgs...)
	c := e.run("elsewhere", recordEffect(e.db, "elsewhere"), inbox.ConsumerConfig{Concurrency: 2,
		Group: inbox.GroupConfig{MaxMessages: 100, MaxWait: 200 * time.Millisecond, SlowRun: 300 * time.Millisecond}})
	testenv.WhileProgressing(t, 30*time.Second, func() (bool, any) { m := c.Metrics(); return m.Applied == 59, m },
		"the other messages were not applied while one's marker was held elsewhere")
	close(release)
	testenv.Must(t, <-other, "the other instance's transaction")
	testenv.WhileProgressing(t, 30*time.Second, func() (bool, any) { m := c.Metrics(); return m.Duplicates == 1, m },
		"the message applied elsewhere was not skipped")
	if n, distinct := e.totalEffects(); n != 59 || distinct != 59 {
		t.Fatalf("%d effects of %d messages, want the 59 not applied elsewhere", n, distinct)
	}
}
