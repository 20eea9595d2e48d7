package watch

import (
	"context"
	"slices"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/audit"
	"github.com/courier-go/courier/broker"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/store"
)

// sweepCase is one watch of the sweep.
type sweepCase struct {
	slack, interval time.Duration
	// exact: the watch must find every fault within two passes and
	// nothing else. Set where Slack covers the relay's record delay.
	exact bool
}

// Watches with Slack on both sides of the relay's record delay (the time
// from the broker storing a message to the relay recording its copy, a
// few milliseconds here), and passes at several intervals, all at once on
// one relay under load, while the test loses a message, publishes a
// phantom and publishes a message again, twice each.
//
// Seen here (PostgreSQL, under 500 messages a second): the record delay
// is under a millisecond at the median, 3ms at the 99th percentile, 15 to
// 26ms at most on a quiet machine, up to 200ms on a busy one. Every watch
// found every fault within two passes; with a Slack of 1ms, Kafka's passes
// judged some twenty messages before their copies were recorded and
// counted them pending or published elsewhen.
//
// What a Slack shorter than the record delay does: a pass judges broker
// messages whose copies are not recorded yet. It looks them up
// (Locate), finds them pending or published and counts them so (Pass's
// Pending, Elsewhen): no finding, but their keys' order is not checked.
// A copy recorded (or committed) more than Slack after the pass that
// read up to its time is never read: its message, had the broker lost
// it, would not be found lost. And a message the broker stores more than
// Slack after its timestamp (Kafka stamps a record when the producer
// sends it, CreateTime, and a busy machine may append it tens of
// milliseconds later) can be stored after the pass that read up to its
// timestamp, and before its copy is recorded: the next pass reads the
// copy but not the message, and judges it lost. That takes a record delay
// longer than Slack (the copy is recorded after the message is stored,
// after that pass, more than Slack after the timestamp), so the sweep
// accepts a false "lost" only of a message the broker holds and whose
// record delay was longer than the watch's Slack, and no other false
// finding. It requires every fault found only of the watches whose Slack
// covers the delay.
func TestWatchSweep(t *testing.T) {
	if testing.Short() {
		t.Skip("the sweep runs a minute")
	}
	cases := []sweepCase{
		{slack: time.Millisecond, interval: 250 * time.Millisecond},
		{slack: 20 * time.Millisecond, interval: 250 * time.Millisecond},
		{slack: 200 * time.Millisecond, interval: 250 * time.Millisecond, exact: true},
		{slack: 200 * time.Millisecond, interval: time.Second, exact: true},
		{slack: 200 * time.Millisecond, interval: 4 * time.Second, exact: true},
		{slack: time.Second, interval: 2 * time.Second, exact: true},
	}
	for _, bk := range brokers {
		t.Run(bk.name+"/postgres", func(t *testing.T) {
			testSweep(t, bk.open(t), dialects[0].open(t), cases)
		})
	}
}

// injected is a fault and when its injection ended.
type injected struct {
	want
	at time.Time
}

func testSweep(t *testing.T, b *brokerRig, db *database, cases []sweepCase) {
	startRelay(t, db, b)
	began := time.Now()
	l := startLoad(t, db, 500, 10, 20*time.Millisecond)
	ctx := context.Background()
	watches := make([]*watch, len(cases))
	for i, c := range cases {
		watches[i] = newWatch(t, db, b, c.slack, c.interval)
		watches[i].last = time.Now()
	}
	var faults []injected
	kinds := []string{audit.KindLost, audit.KindPhantom, audit.KindDuplicate, audit.KindLost, audit.KindPhantom, audit.KindDuplicate}
	nextFault := time.Now().Add(2 * time.Second)
	var dups []courier.Message // published again already
	inject := func(kind string) want {
		switch kind {
		case audit.KindLost:
			victim := courier.NewMessage(victimTopic, testenv.Name("invoice-"), "InvoiceIssued", []byte(`{}`))
			b.lose(t, db, victim)
			return want{kind, victim}
		case audit.KindPhantom:
			phantom := courier.NewMessage(loadTopic, testenv.Name("phantom-"), "OrderPlaced", []byte(`{}`))
			testenv.Must(t, b.rogue.Publish(ctx, []courier.Message{phantom})[0], "publish the phantom")
			return want{kind, phantom}
		default:
			m := l.first
			if len(dups) > 0 {
				m = recentCopy(t, db, began, dupWindow+time.Second, dups)
			}
			time.Sleep(time.Until(publishedAt(t, db, m, began.Add(-time.Minute)).Add(dupWindow + 100*time.Millisecond)))
			testenv.Must(t, b.rogue.Publish(ctx, []courier.Message{m})[0], "publish a published message again")
			dups = append(dups, m)
			return want{kind, m}
		}
	}
	for {
		// The watch due first passes, unless a fault is due before it.
		w := slices.MinFunc(watches, func(x, y *watch) int { return x.last.Add(x.interval).Compare(y.last.Add(y.interval)) })
		due := w.last.Add(w.interval)
		if len(kinds) > 0 && nextFault.Before(due) {
			time.Sleep(time.Until(nextFault))
			f := inject(kinds[0])
			faults = append(faults, injected{f, time.Now()})
			kinds = kinds[1:]
			nextFault = time.Now().Add(3 * time.Second)
			continue
		}
		if len(kinds) == 0 && !slices.ContainsFunc(watches, func(w *watch) bool { return passesSince(w, faults[len(faults)-1].at) < 3 }) {
			break
		}
		w.pass()
	}

	delays, delayOf := recordDelays(t, db, b.reader, began)
	t.Logf("record delay (copy recorded - broker stored) of %d messages: median %s, 99th %s, max %s", len(delays),
		delays[len(delays)/2], delays[len(delays)*99/100], delays[len(delays)-1])
	for i, c := range cases {
		checkSweep(t, c, watches[i], faults, delayOf)
	}
	t.Logf("%d messages written", l.written.Load())
}

// checkSweep checks and logs what one watch of the sweep found. delayOf
// is each message's record delay.
func checkSweep(t *testing.T, c sweepCase, w *watch, faults []injected, delayOf map[string]time.Duration) {
	t.Helper()
	found, worst := 0, 0
	for _, f := range faults {
		n := 0
		for i, p := range w.passes {
			if w.starts[i].Before(f.at) {
				continue
			}
			n++
			if slices.ContainsFunc(p.Findings, f.matches) {
				found++
				worst = max(worst, n)
				break
			}
		}
		if n > 2 || !slices.ContainsFunc(w.findings(0), f.matches) {
			worst = max(worst, 99)
			if c.exact {
				t.Errorf("slack %s, interval %s: the %s was not found within two passes", c.slack, c.interval, f.want)
			}
		}
	}
	var others []audit.WatchFinding
	late := 0 // lost, though stored: their record delay was longer than Slack
	for _, f := range w.findings(0) {
		if slices.ContainsFunc(faults, func(i injected) bool { return i.matches(f) }) {
			continue
		}
		if d, ok := delayOf[f.MessageID]; ok && f.Kind == audit.KindLost && d > c.slack {
			late++
			continue
		}
		others = append(others, f)
	}
	if len(others) > 0 {
		t.Errorf("slack %s, interval %s: the watch found what the test did not cause: %s", c.slack, c.interval, show(others))
	}
	if late > 0 {
		t.Logf("slack %s, interval %s: %d messages judged lost though the broker holds them, each recorded longer than the slack after the broker's timestamp (the bound above)",
			c.slack, c.interval, late)
	}
	var pending, elsewhen int
	for _, p := range w.passes {
		pending += p.Pending
		elsewhen += p.Elsewhen
	}
	within := "some not within two passes"
	if worst < 99 {
		within = "each within " + strconv.Itoa(worst) + " passes"
	}
	t.Logf("slack %-6s interval %-6s: %2d passes, found %d of %d faults (%s), %d other findings; judged %d broker messages pending, %d published elsewhen",
		c.slack, c.interval, len(w.passes), found, len(faults), within, len(others), pending, elsewhen)
}

// passesSince counts w's passes that began at or after at.
func passesSince(w *watch, at time.Time) int {
	n := 0
	for _, s := range w.starts {
		if !s.Before(at) {
			n++
		}
	}
	return n
}

// recentCopy returns a message of the load published at least age ago,
// other than those of not.
func recentCopy(t *testing.T, db *database, since time.Time, age time.Duration, not []courier.Message) courier.Message {
	t.Helper()
	var pick store.PublishedCopy
	err := db.ops.PublishedBetween(context.Background(), since, time.Now().Add(-age), func(c store.PublishedCopy) error {
		if c.Topic == loadTopic && !slices.ContainsFunc(not, func(m courier.Message) bool { return m.ID.String() == c.MessageID }) {
			pick = c
		}
		return nil
	})
	testenv.Must(t, err, "read the copies")
	if pick.MessageID == "" {
		t.Fatalf("no copy published before %s", age)
	}
	return relayCopy(t, pick)
}

// relayCopy is the message of a published copy, as the relay published
// it: the watch tells messages by id, key and topic.
func relayCopy(t *testing.T, c store.PublishedCopy) courier.Message {
	m := courier.NewMessage(c.Topic, c.Key, c.Type, []byte(`{}`))
	testenv.Must(t, m.ID.UnmarshalText([]byte(c.MessageID)), "message id")
	return m
}

// recordDelays returns, sorted, how long after the broker stored each
// message since began the relay recorded its copy, and the same by
// message id.
func recordDelays(t *testing.T, db *database, r broker.Reader, began time.Time) ([]time.Duration, map[string]time.Duration) {
	t.Helper()
	ctx := context.Background()
	at := map[string]time.Time{}
	_, err := r.ReadBack(ctx, began.Add(-time.Second), time.Now(), func(s broker.Stored) error {
		if _, ok := at[s.Message.ID.String()]; !ok && s.Err == nil {
			at[s.Message.ID.String()] = s.At
		}
		return nil
	})
	testenv.Must(t, err, "read the broker")
	var delays []time.Duration
	delayOf := map[string]time.Duration{}
	err = db.ops.PublishedBetween(ctx, began.Add(-time.Second), time.Now(), func(c store.PublishedCopy) error {
		if s, ok := at[c.MessageID]; ok {
			delays = append(delays, c.PublishedAt.Sub(s))
			delayOf[c.MessageID] = c.PublishedAt.Sub(s)
		}
		return nil
	})
	testenv.Must(t, err, "read the copies")
	sort.Slice(delays, func(i, j int) bool { return delays[i] < delays[j] })
	if len(delays) == 0 {
		t.Fatal("no message both published and stored")
	}
	return delays, delayOf
}
