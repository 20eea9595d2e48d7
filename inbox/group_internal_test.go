package inbox

import (
	"context"
	"database/sql"
	"errors"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
	"github.com/courier-go/courier/store/sqlite"
)

// delivery is a broker.Delivery of a test, with the attempt it is.
type delivery struct {
	attempt int
	acked   *[]int // the attempts acknowledged
	mu      *sync.Mutex
}

func (d delivery) Raw() broker.Raw { return broker.Raw{Subject: "orders"} }
func (d delivery) Attempt() int    { return d.attempt }
func (d delivery) Ack(context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	*d.acked = append(*d.acked, d.attempt)
	return nil
}
func (delivery) Retry(context.Context, time.Duration) error { return nil }
func (delivery) Extend(context.Context) error               { return nil }
func (delivery) Drop(context.Context) error                 { return nil }

// noDeliveries is a subscriber processGroup never asks for deliveries.
type noDeliveries struct{ broker.Subscriber }

// groupFixture is a consumer that keeps order, applying groups of up to
// 10 deliveries of one key through h into an SQLite table of steps.
type groupFixture struct {
	c     *Consumer[*sql.Tx]
	db    *sql.DB
	mu    sync.Mutex
	acked []int // the attempts acknowledged
}

func newGroupFixture(t *testing.T, h Handler[*sql.Tx]) *groupFixture {
	t.Helper()
	ctx := context.Background()
	db, err := sqlite.Open(filepath.Join(t.TempDir(), "group.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	d := sqlite.NewDriver(db)
	if _, err := d.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("CREATE TABLE effects (seq INTEGER PRIMARY KEY, step TEXT)"); err != nil {
		t.Fatal(err)
	}
	ib, err := New(d.Inbox(), "ordered")
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewConsumer(ib, noDeliveries{}, d.ConsumerStore(), h, ConsumerConfig{KeepOrder: true,
		Backoff: courier.Backoff{Initial: time.Millisecond, Max: time.Millisecond}, Group: GroupConfig{MaxMessages: 10}})
	if err != nil {
		t.Fatal(err)
	}
	return &groupFixture{c: c, db: db}
}

// insertStep is a handler's effect: msg's payload, the step, in a row.
func insertStep(ctx context.Context, tx *sql.Tx, msg courier.Message) error {
	_, err := tx.ExecContext(ctx, "INSERT INTO effects (step) VALUES (?)", string(msg.Payload))
	return err
}

// step is a delivery, the attempt-th, of message m, or of a new message of
// key k and step n when m is zero.
func (f *groupFixture) step(n string, attempt int, m courier.Message) job {
	if m.ID == (courier.Message{}).ID {
		m = courier.NewMessage("orders", "k", "Step", []byte(n))
	}
	return job{d: delivery{attempt: attempt, acked: &f.acked, mu: &f.mu}, msg: m}
}

// process handles g as one group and returns how many deliveries it
// released.
func (f *groupFixture) process(g []job) (released int) {
	ctx := context.Background()
	f.c.processGroup(ctx, ctx, g, func(key string, n int) { released += n })
	return released
}

// steps returns the steps applied, in order.
func (f *groupFixture) steps(t *testing.T) []string {
	t.Helper()
	rows, err := f.db.Query("SELECT step FROM effects ORDER BY seq")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var steps []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		steps = append(steps, s)
	}
	return steps
}

// A group holding a key's first deliveries and, after them, a redelivery
// of one (a partition taken back hands a key's messages out again) keeps
// the key's order when a first delivery fails in the group: what left the
// group runs before what was set apart behind the redelivery.
func TestGroupKeepsOrderAroundARedelivery(t *testing.T) {
	failed := false
	f := newGroupFixture(t, func(ctx context.Context, tx *sql.Tx, msg courier.Message) error {
		if string(msg.Payload) == "20" && !failed {
			failed = true
			return errors.New("transient")
		}
		return insertStep(ctx, tx, msg)
	})
	s20, s21 := f.step("20", 1, courier.Message{}), f.step("21", 1, courier.Message{})
	released := f.process([]job{s20, s21, f.step("20", 2, s20.msg), f.step("22", 2, courier.Message{})})
	if steps := f.steps(t); !slices.Equal(steps, []string{"20", "21", "22"}) || released != 4 || len(f.acked) != 4 {
		t.Fatalf("applied %v, released %d, acknowledged %d: want 20, 21, 22 in order, all 4 released and acknowledged", steps, released, len(f.acked))
	}
	if m := f.c.Metrics(); m.Applied != 3 || m.Duplicates != 1 || m.Retried != 1 {
		t.Fatalf("metrics %+v: want 3 applied, the redelivery a duplicate, 1 retry", m)
	}
}

// A key's later delivery that leaves its group first, and earlier ones that
// leave it in a later round (here a handler that fails on its second run;
// in a cluster, a marker another instance still holds), are applied alone
// in the key's order, not in the order they left.
func TestGroupKeepsOrderWhenEarlierDeliveriesLeaveLater(t *testing.T) {
	runs := map[string]int{}
	f := newGroupFixture(t, func(ctx context.Context, tx *sql.Tx, msg courier.Message) error {
		step := string(msg.Payload)
		runs[step]++
		if step == "3" && runs[step] == 1 || step == "1" && runs[step] == 2 {
			return errors.New("transient")
		}
		return insertStep(ctx, tx, msg)
	})
	released := f.process([]job{f.step("1", 1, courier.Message{}), f.step("2", 1, courier.Message{}), f.step("3", 1, courier.Message{})})
	if steps := f.steps(t); !slices.Equal(steps, []string{"1", "2", "3"}) || released != 3 || len(f.acked) != 3 {
		t.Fatalf("applied %v, released %d, acknowledged %d: want 1, 2, 3 in order, all 3 released and acknowledged", steps, released, len(f.acked))
	}
	if m := f.c.Metrics(); m.Applied != 3 || m.Retried != 2 {
		t.Fatalf("metrics %+v: want 3 applied, 2 retries", m)
	}
}

// Whatever runs fail, in whatever rounds of a group, each key's messages
// are applied once each and in order: a sweep over groups of three keys'
// deliveries (some of them redeliveries) whose handlers fail on random
// runs.
func TestGroupKeepsOrderUnderAnyFailures(t *testing.T) {
	var fails map[string]map[int]bool // per step, the runs that fail
	var runs map[string]int
	f := newGroupFixture(t, func(ctx context.Context, tx *sql.Tx, msg courier.Message) error {
		step := msg.Key + string(msg.Payload)
		runs[step]++
		if fails[step][runs[step]] {
			return errors.New("transient")
		}
		_, err := tx.ExecContext(ctx, "INSERT INTO effects (step) VALUES (?)", step)
		return err
	})
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 1))
		fails, runs, f.acked = map[string]map[int]bool{}, map[string]int{}, nil
		if _, err := f.db.Exec("DELETE FROM effects"); err != nil {
			t.Fatal(err)
		}
		var g []job
		next := map[string]int{}
		for range 9 {
			k := string(rune('a' + rng.IntN(3)))
			next[k]++
			n := strconv.Itoa(next[k])
			fails[k+n] = map[int]bool{1: rng.IntN(3) == 0, 2: rng.IntN(3) == 0, 3: rng.IntN(4) == 0}
			j := f.step(n, 1+rng.IntN(4)/3, courier.NewMessage("orders", k, "Step", []byte(n)))
			g = append(g, j)
		}
		if released := f.process(g); released != len(g) || len(f.acked) != len(g) {
			t.Fatalf("seed %d: released %d, acknowledged %d of %d", seed, released, len(f.acked), len(g))
		}
		got := map[string][]string{}
		for _, s := range f.steps(t) {
			got[s[:1]] = append(got[s[:1]], s[1:])
		}
		for k, n := range next {
			want := make([]string, n)
			for i := range want {
				want[i] = strconv.Itoa(i + 1)
			}
			if !slices.Equal(got[k], want) {
				t.Fatalf("seed %d: key %s applied %v, want %v (failing runs %v)", seed, k, got[k], want, fails)
			}
		}
	}
}
