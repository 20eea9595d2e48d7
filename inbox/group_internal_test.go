package inbox

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"slices"
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

// A group holding a key's first deliveries and, after them, a redelivery
// of one (a partition taken back hands a key's messages out again) keeps
// the key's order when a first delivery fails in the group: what left the
// group runs before what was set apart behind the redelivery.
func TestGroupKeepsOrderAroundARedelivery(t *testing.T) {
	ctx := context.Background()
	db, err := sqlite.Open(filepath.Join(t.TempDir(), "group.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
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
	failed := false
	h := func(ctx context.Context, tx *sql.Tx, msg courier.Message) error {
		if string(msg.Payload) == "20" && !failed {
			failed = true
			return errors.New("transient")
		}
		_, err := tx.ExecContext(ctx, "INSERT INTO effects (step) VALUES (?)", string(msg.Payload))
		return err
	}
	c, err := NewConsumer(ib, noDeliveries{}, d.ConsumerStore(), h, ConsumerConfig{KeepOrder: true,
		Backoff: courier.Backoff{Initial: time.Millisecond, Max: time.Millisecond}, Group: GroupConfig{MaxMessages: 10}})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var acked []int
	step := func(n string, attempt int, id courier.Message) job {
		m := id
		if m.ID == (courier.Message{}).ID {
			m = courier.NewMessage("orders", "k", "Step", []byte(n))
		}
		return job{d: delivery{attempt: attempt, acked: &acked, mu: &mu}, msg: m}
	}
	s20, s21 := step("20", 1, courier.Message{}), step("21", 1, courier.Message{})
	g := []job{s20, s21, step("20", 2, s20.msg), step("22", 2, courier.Message{})}
	released := 0
	c.processGroup(ctx, ctx, g, func(key string, n int) { released += n })

	rows, err := db.Query("SELECT step FROM effects ORDER BY seq")
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
	if !slices.Equal(steps, []string{"20", "21", "22"}) || released != 4 || len(acked) != 4 {
		t.Fatalf("applied %v, released %d, acknowledged %d: want 20, 21, 22 in order, all 4 released and acknowledged", steps, released, len(acked))
	}
	if m := c.Metrics(); m.Applied != 3 || m.Duplicates != 1 || m.Retried != 1 {
		t.Fatalf("metrics %+v: want 3 applied, the redelivery a duplicate, 1 retry", m)
	}
}
