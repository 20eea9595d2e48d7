package inbox_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/inbox"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/memstore"
)

// durations is an Observer that keeps how long each run took.
type durations struct {
	inbox.NopObserver
	mu   sync.Mutex
	runs []time.Duration
}

func (o *durations) Handled(_ string, _ courier.Message, _ inbox.Result, _ error, d time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.runs = append(o.runs, d)
}

func (o *durations) took() []time.Duration {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]time.Duration(nil), o.runs...)
}

func TestFailuresAreDatedByTheConsumersClock(t *testing.T) {
	onEachDialect(t, testFailuresAreDatedByTheConsumersClock, testFailuresAreDatedByTheConsumersClock)
}

// A parked message's history and the runs' durations are the consumer's
// clock's: a message that cannot be decoded fails at the clock's time, and
// a handler during whose runs the clock moves 3 seconds fails 3 seconds
// later each time and is reported as taking 3 seconds.
func testFailuresAreDatedByTheConsumersClock[TTx any](t *testing.T, d dialect[TTx]) {
	e := newEnv(t, d)
	clock := memstore.NewClock()
	at := time.Date(2031, 5, 6, 7, 8, 9, 123456000, time.UTC)
	clock.Set(at)
	js, err := jetstream.New(testenv.Connect(t, e.natsURL))
	testenv.Must(t, err, "jetstream")
	_, err = js.Publish(context.Background(), e.mapping.Subject("orders"), []byte("raw bytes")) // stored first
	testenv.Must(t, err, "raw publish")
	m := courier.NewMessage("orders", "order-1", "OrderPlaced", nil)
	e.publish(m)
	h := func(ctx context.Context, tx TTx, msg courier.Message) error {
		clock.Advance(3 * time.Second)
		return errors.New("warehouse unreachable")
	}
	obs := &durations{}
	c := e.run("dated", h, inbox.ConsumerConfig{Concurrency: 1, MaxDeliveries: 2, Clock: clock.Now, Observer: obs})
	testenv.Eventually(t, 10*time.Second, func() bool { return c.Metrics().Parked == 2 }, "not parked: %v", testenv.Lazy(func() any { return c.Metrics() }))
	for _, p := range e.parked("dated") {
		var want []time.Time
		switch p.Reason {
		case store.ReasonMalformed:
			want = []time.Time{at} // received first, before any run
		case store.ReasonFailed:
			want = []time.Time{at.Add(3 * time.Second), at.Add(6 * time.Second)}
		}
		var got []time.Time
		for _, a := range p.History {
			got = append(got, a.At)
		}
		if len(got) != len(want) {
			t.Fatalf("%s message parked with history at %v; want %v", p.Reason, got, want)
		}
		for i := range got {
			if !got[i].Equal(want[i]) {
				t.Fatalf("%s message parked with history at %v; want %v", p.Reason, got, want)
			}
		}
	}
	if took := obs.took(); len(took) != 2 || took[0] != 3*time.Second || took[1] != 3*time.Second {
		t.Fatalf("runs took %v by the observer; want 3s twice", took)
	}
}

func TestRetentionCountsOnTheConsumersClock(t *testing.T) {
	onEachDialect(t, testRetentionCountsOnTheConsumersClock, testRetentionCountsOnTheConsumersClock)
}

// Markers and recorded failures older than Retention by the consumer's
// clock are deleted: moving the clock past it ages them without waiting.
func testRetentionCountsOnTheConsumersClock[TTx any](t *testing.T, d dialect[TTx]) {
	e := newEnv(t, d)
	clock := memstore.NewClock()
	applied := courier.NewMessage("orders", "order-3", "OrderPlaced", nil)
	failing := courier.NewMessage("orders", "order-4", "OrderPlaced", []byte("fail"))
	h := func(ctx context.Context, tx TTx, msg courier.Message) error {
		if string(msg.Payload) == "fail" {
			return errors.New("not yet")
		}
		return nil
	}
	e.publish(applied, failing)
	c := e.run("aging", h, inbox.ConsumerConfig{
		Clock: clock.Now, Retention: time.Hour, CleanupEvery: 10 * time.Millisecond,
		// The broker brings the failing message back in an hour of real
		// time: its recorded failure stays meanwhile.
		Backoff: courier.Backoff{Initial: time.Hour, Max: time.Hour},
	})
	testenv.Eventually(t, 10*time.Second, func() bool { m := c.Metrics(); return m.Applied == 1 && m.Retried == 1 },
		"not applied and failed: %v", testenv.Lazy(func() any { return c.Metrics() }))
	markers := func() int { return e.db.count(t, "SELECT count(*) FROM courier_inbox WHERE consumer = 'aging'") }
	failures := func() int {
		return e.db.count(t, "SELECT count(*) FROM courier_inbox_failures WHERE consumer = 'aging'")
	}
	if m, f := markers(), failures(); m != 1 || f != 1 {
		t.Fatalf("%d markers and %d recorded failures within the retention; want one of each", m, f)
	}
	clock.Advance(time.Hour + time.Minute)
	testenv.Eventually(t, 10*time.Second, func() bool { return markers() == 0 && failures() == 0 },
		"an hour later by the consumer's clock: %v markers and %v recorded failures left; want none",
		testenv.Lazy(func() any { return markers() }), testenv.Lazy(func() any { return failures() }))
}
