package watch

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/audit"
	"github.com/courier-go/courier/internal/testenv"
)

// watch drives an audit.Watcher pass by pass, as Run would every
// interval, and keeps every pass.
type watch struct {
	t        *testing.T
	w        *audit.Watcher
	interval time.Duration
	last     time.Time
	passes   []audit.Pass
	starts   []time.Time // when each pass began
}

func newWatch(t *testing.T, db *database, b *brokerRig, slack, interval time.Duration) *watch {
	w, err := audit.NewWatcher(db.ops, b.reader, audit.WatchConfig{Name: "faults", Broker: b.name, Interval: interval,
		Slack: slack, Since: time.Minute, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	testenv.Must(t, err, "new watcher")
	return &watch{t: t, w: w, interval: interval}
}

// pass makes the next pass, an interval after the last one began.
func (wt *watch) pass() audit.Pass {
	wt.t.Helper()
	time.Sleep(time.Until(wt.last.Add(wt.interval)))
	wt.last = time.Now()
	wt.starts = append(wt.starts, wt.last)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := wt.w.Pass(ctx)
	testenv.Must(wt.t, err, "pass")
	wt.passes = append(wt.passes, p)
	return p
}

// findings returns the findings of the passes from the i-th on.
func (wt *watch) findings(i int) []audit.WatchFinding {
	var fs []audit.WatchFinding
	for _, p := range wt.passes[i:] {
		fs = append(fs, p.Findings...)
	}
	return fs
}

// want is a finding a fault must cause.
type want struct {
	kind string
	msg  courier.Message
}

func (w want) String() string { return fmt.Sprintf("%s of %s (key %q)", w.kind, w.msg.ID, w.msg.Key) }

func (w want) matches(f audit.WatchFinding) bool {
	return f.Kind == w.kind && f.MessageID == w.msg.ID.String() && f.Key == w.msg.Key && f.Topic == w.msg.Topic
}

// A relay publishes continuous load (a writer commits ten messages over
// 500 keys every 20ms) while the test makes the broker lose a message,
// publishes a message the database never wrote, publishes one the relay
// published again and reorders a key: the watch names each, with its
// kind, message id and key, within two passes of the fault, and finds
// nothing else.
func TestWatchFindsFaults(t *testing.T) {
	for _, bk := range brokers {
		for _, dl := range dialects {
			t.Run(bk.name+"/"+dl.name, func(t *testing.T) {
				testFaults(t, bk.open(t), dl.open(t), 500*time.Millisecond, time.Second)
			})
		}
	}
}

func testFaults(t *testing.T, b *brokerRig, db *database, slack, interval time.Duration) {
	startRelay(t, db, b)
	began := time.Now()
	l := startLoad(t, db, 500, 10, 20*time.Millisecond)
	wt := newWatch(t, db, b, slack, interval)
	ctx := context.Background()

	// Clean passes first: under load, the watch finds nothing.
	for range 3 {
		wt.pass()
	}
	var all []want
	fault := func(name string, inject func() []want) {
		t.Helper()
		wants := inject()
		all = append(all, wants...)
		from := len(wt.passes)
		wt.pass()
		wt.pass()
		got := wt.findings(from)
		for _, w := range wants {
			if !slices.ContainsFunc(got, w.matches) {
				t.Errorf("%s: the watch did not find the %s within two passes; it found %s", name, w, show(got))
			}
		}
	}

	fault("lost", func() []want {
		victim := courier.NewMessage(victimTopic, testenv.Name("invoice-"), "InvoiceIssued", []byte(`{}`))
		b.lose(t, db, victim)
		return []want{{audit.KindLost, victim}}
	})
	fault("reorder", func() []want {
		// A rogue publisher publishes a key's later message before the
		// relay publishes the earlier one: the test publishes m2, then
		// commits m1 and m2, which the relay publishes in order. NATS
		// drops the relay's m2 (its Nats-Msg-Id is in the duplicate
		// window); Kafka keeps it, a duplicate too.
		key := testenv.Name("reorder-")
		m1 := courier.NewMessage(loadTopic, key, "OrderPlaced", []byte(`{"step":1}`))
		m2 := courier.NewMessage(loadTopic, key, "OrderShipped", []byte(`{"step":2}`))
		testenv.Must(t, b.rogue.Publish(ctx, []courier.Message{m2})[0], "publish the later message first")
		testenv.Must(t, db.write(ctx, m1, m2), "write the key's two messages")
		waitPublished(t, db, m1, m2)
		w := []want{{audit.KindOrderBreak, m1}}
		if b.keepsCopies {
			w = append(w, want{audit.KindDuplicate, m2})
		}
		return w
	})
	fault("phantom", func() []want {
		phantom := courier.NewMessage(loadTopic, testenv.Name("phantom-"), "OrderPlaced", []byte(`{}`))
		testenv.Must(t, b.rogue.Publish(ctx, []courier.Message{phantom})[0], "publish the phantom")
		return []want{{audit.KindPhantom, phantom}}
	})
	fault("duplicate", func() []want {
		// The load's first message, published again after the stream's
		// duplicate window: the broker stores it twice.
		first := l.first
		time.Sleep(time.Until(publishedAt(t, db, first, began.Add(-time.Minute)).Add(dupWindow + 100*time.Millisecond)))
		testenv.Must(t, b.rogue.Publish(ctx, []courier.Message{first})[0], "publish a published message again")
		return []want{{audit.KindDuplicate, first}}
	})
	// Clean passes last: the range judged passes every fault.
	for range 3 {
		wt.pass()
	}

	// Nothing else, under load: each fault's findings once, no other.
	got := wt.findings(0)
	for _, f := range got {
		if !slices.ContainsFunc(all, func(w want) bool { return w.matches(f) }) {
			t.Errorf("the watch found %s %s (key %q, %s), which the test did not cause", f.Kind, f.MessageID, f.Key, f.Detail)
		}
	}
	for _, w := range all {
		if n := len(slices.DeleteFunc(slices.Clone(got), func(f audit.WatchFinding) bool { return !w.matches(f) })); n != 1 {
			t.Errorf("the watch found the %s %d times, want once", w, n)
		}
	}
	logPasses(t, wt, l)
}

// show lists findings for a failure message.
func show(fs []audit.WatchFinding) string {
	if len(fs) == 0 {
		return "nothing"
	}
	var b strings.Builder
	for i, f := range fs {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s of %s (key %q)", f.Kind, f.MessageID, f.Key)
	}
	return b.String()
}

// logPasses logs what the passes read and judged.
func logPasses(t *testing.T, wt *watch, l *load) {
	t.Helper()
	var copies, stored, published, judged, pending, elsewhen int
	var took time.Duration
	for _, p := range wt.passes {
		copies += p.Copies
		stored += p.Stored
		published += p.Published
		judged += p.Judged
		pending += p.Pending
		elsewhen += p.Elsewhen
		took = max(took, p.Took)
		if p.Note != "" {
			t.Logf("pass to %s: %s", p.To.Format("15:04:05.000"), p.Note)
		}
	}
	s := wt.w.State()
	t.Logf("%d passes over %s, %d messages written: read %d copies and %d broker messages, judged %d published and %d stored; %d pending, %d elsewhen when judged; slowest pass %s; %d lost, %d phantoms, %d duplicates, %d order breaks",
		len(wt.passes), s.To.Sub(s.From).Round(time.Millisecond), l.written.Load(), copies, stored, published, judged, pending, elsewhen,
		took.Round(time.Millisecond), s.Lost, s.Phantoms, s.Duplicates, s.OrderBreaks)
}
