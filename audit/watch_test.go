package audit_test

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/audit"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/store/sqlite"
)

const (
	watchSlack    = time.Second
	watchInterval = 5 * time.Second
)

// watch returns a Watcher of the shop, on its clock, that starts at the
// shop's start.
func (s *shop) watch(cfg audit.WatchConfig) *audit.Watcher {
	s.t.Helper()
	cfg.Clock = s.clock.Now
	if cfg.Slack == 0 {
		cfg.Slack = watchSlack
	}
	if cfg.Interval == 0 {
		cfg.Interval = watchInterval
	}
	if cfg.Since == 0 {
		cfg.Since = time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	w, err := audit.NewWatcher(s.st.Operations(), s.pub, cfg)
	testenv.Must(s.t, err, "new watcher")
	return w
}

// pass advances the clock by an interval and makes a pass.
func (s *shop) pass(w *audit.Watcher) audit.Pass {
	s.t.Helper()
	s.clock.Advance(watchInterval)
	p, err := w.Pass(context.Background())
	testenv.Must(s.t, err, "pass")
	return p
}

// Under a steady load, each message is judged once, by the first pass
// that finds it old enough, and nothing is found.
func TestWatchJudgesEachMessageOnce(t *testing.T) {
	s := newShop(t)
	w := s.watch(audit.WatchConfig{})
	published, judged := 0, 0
	for i := range 12 {
		s.write(messages(20, 3)...)
		s.relay()
		s.clock.Advance(time.Duration(i%3) * time.Second) // passes at uneven times
		p := s.pass(w)
		if len(p.Findings) != 0 || p.Note != "" {
			t.Fatalf("pass %d: %+v; want nothing found", i, p)
		}
		published += p.Published
		judged += p.Judged
	}
	s.pass(w)
	st := w.State()
	if st.Passes != 13 || st.Alarms() || st.Duplicates != 0 {
		t.Fatalf("state %+v", st)
	}
	// The last pass judged what the one before left.
	if published != 240 || judged != 240 {
		t.Fatalf("judged %d copies and %d messages; want each of the 240 once", published, judged)
	}
}

// Each kind of finding is found within two passes of the fault, once, and
// nothing else is.
func TestWatchFindsEachFaultWithinTwoPasses(t *testing.T) {
	s := newShop(t)
	ctx := context.Background()
	w := s.watch(audit.WatchConfig{})
	for range 3 {
		s.write(messages(30, 5)...)
		s.relay()
		s.pass(w)
	}
	// Faults, each among more load.
	msgs := messages(30, 5)
	s.write(msgs...)
	s.relay()
	lost := msgs[4]
	if s.pub.Forget(lost.ID) != 1 {
		t.Fatal("the broker did not hold the message to lose")
	}
	early, late := msgs[10], msgs[25] // both of key k0
	s.pub.Forget(early.ID)
	testenv.Must(t, s.pub.Publish(ctx, []courier.Message{early})[0], "store after a later message")
	phantom := courier.NewMessage("orders", "k1", "OrderPlaced", []byte("never written"))
	dup := msgs[7]
	testenv.Must(t, s.pub.Publish(ctx, []courier.Message{phantom, dup})[0], "store")

	var found []audit.WatchFinding
	for range 2 {
		s.write(messages(30, 5)...)
		s.relay()
		found = append(found, s.pass(w).Findings...)
	}
	want := map[string]courier.Message{audit.KindLost: lost, audit.KindOrderBreak: early, audit.KindPhantom: phantom, audit.KindDuplicate: dup}
	if len(found) != len(want) {
		t.Fatalf("found %+v; want one of each kind", found)
	}
	for _, f := range found {
		m := want[f.Kind]
		if f.MessageID != m.ID.String() || f.Key != m.Key {
			t.Errorf("%s: %+v; want message %s of key %s", f.Kind, f, m.ID, m.Key)
		}
	}
	if f := findingOf(found, audit.KindOrderBreak); !strings.Contains(f.Detail, late.ID.String()) {
		t.Errorf("order break %+v: want it to name the later message %s", f, late.ID)
	}
	st := w.State()
	if st.Lost != 1 || st.Phantoms != 1 || st.Duplicates != 1 || st.OrderBreaks != 1 || !st.Alarms() || len(st.Findings) != 4 {
		t.Fatalf("state %+v; want one of each", st)
	}
	// Found once: later passes find nothing more.
	for range 3 {
		if p := s.pass(w); len(p.Findings) != 0 {
			t.Fatalf("a later pass found %+v again", p.Findings)
		}
	}
}

func findingOf(fs []audit.WatchFinding, kind string) audit.WatchFinding {
	for _, f := range fs {
		if f.Kind == kind {
			return f
		}
	}
	return audit.WatchFinding{}
}

// A copy stored again many passes after the first is a duplicate while
// the watch remembers the first, and a key's earlier message stored after
// a later one long after is an order break; beyond Remember both are
// judged as new.
func TestWatchRemembersAcrossPasses(t *testing.T) {
	s := newShop(t)
	ctx := context.Background()
	w := s.watch(audit.WatchConfig{Remember: time.Minute})
	msgs := messages(4, 1)
	s.write(msgs...)
	s.relay()
	for range 6 { // 30 s
		s.pass(w)
	}
	testenv.Must(t, s.pub.Publish(ctx, msgs[:1])[0], "store again")
	if p := s.pass(w); p.Count(audit.KindDuplicate) != 1 {
		t.Fatalf("pass %+v: want the copy stored 30 s later found a duplicate", p)
	}
	for range 20 { // 100 s: beyond Remember
		s.pass(w)
	}
	testenv.Must(t, s.pub.Publish(ctx, msgs[1:2])[0], "store again")
	p := s.pass(w)
	if len(p.Findings) != 0 || p.Elsewhen != 1 {
		t.Fatalf("pass %+v: want a copy stored again beyond Remember judged as a message published long before", p)
	}
}

// The watch's state answers readiness: a failed pass makes it unready and
// says why; findings do not.
func TestWatchReady(t *testing.T) {
	s := newShop(t)
	w := s.watch(audit.WatchConfig{Name: "nats-courier"})
	ctx := context.Background()
	if st, err := w.Ready(ctx); err != nil || !strings.Contains(st, "first pass") {
		t.Fatalf("before a pass: %q, %v", st, err)
	}
	s.write(messages(5, 1)...)
	s.relay()
	testenv.Must(t, s.pub.Publish(ctx, []courier.Message{courier.NewMessage("orders", "x", "T", nil)})[0], "phantom")
	s.pass(w)
	st, err := w.Ready(ctx)
	if err != nil || !strings.Contains(st, "1 phantoms") || !strings.Contains(st, "nats-courier") {
		t.Fatalf("after a finding: %q, %v; want ready, naming it", st, err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	s.clock.Advance(watchInterval)
	if _, err := w.Pass(cancelled); err == nil {
		t.Fatal("a pass on a cancelled context succeeded")
	}
	if _, err := w.Ready(ctx); err == nil || !strings.Contains(err.Error(), "last pass failed") {
		t.Fatalf("after a failed pass: %v", err)
	}
	// The failed pass's range is judged by the next one.
	if p := s.pass(w); p.From.After(s.clock.Now().Add(-2*watchInterval - watchSlack)) {
		t.Fatalf("pass %v–%v: want it to start where the failed one did", p.From, p.To)
	}
	if _, err := w.Ready(ctx); err != nil {
		t.Fatalf("after a pass that succeeded: %v", err)
	}
	s.clock.Advance(4 * watchInterval)
	if _, err := w.Ready(ctx); err == nil || !strings.Contains(err.Error(), "no pass") {
		t.Fatalf("after three intervals without a pass: %v", err)
	}
}

// A database that keeps no copies places nothing: the watch says so
// instead of calling every message a phantom.
func TestWatchWithoutCopies(t *testing.T) {
	s := newShop(t)
	ctx := context.Background()
	testenv.Must(t, s.pub.Publish(ctx, messages(3, 1))[0], "store")
	w := s.watch(audit.WatchConfig{})
	p := s.pass(w)
	if len(p.Findings) != 0 || !strings.Contains(p.Note, "KeepPublished") {
		t.Fatalf("pass %+v; want a note and no finding", p)
	}
}

func TestWatchConfigErrors(t *testing.T) {
	s := newShop(t)
	for _, c := range []struct {
		cfg  audit.WatchConfig
		want string
	}{
		{audit.WatchConfig{Interval: -time.Second}, "WatchConfig.Interval"},
		{audit.WatchConfig{Slack: -time.Second}, "WatchConfig.Slack"},
		{audit.WatchConfig{Remember: time.Second, Interval: time.Minute}, "WatchConfig.Remember"},
	} {
		if _, err := audit.NewWatcher(s.st.Operations(), s.pub, c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v; want an error naming %q", c.cfg, err, c.want)
		}
	}
}

// What the watch holds is bounded by Remember, not by how long it runs:
// the ids and keys of the last Remember, the copies and offsets of the
// last passes.
func TestWatchMemoryIsBounded(t *testing.T) {
	s := newShop(t)
	w := s.watch(audit.WatchConfig{Remember: 30 * time.Second})
	for i := range 40 { // 200 s, 20 new keys a pass
		msgs := messages(20, 20)
		for j := range msgs {
			msgs[j].Key = msgs[j].Key + "-" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		}
		s.write(msgs...)
		s.relay()
		if p := s.pass(w); len(p.Findings) != 0 {
			t.Fatalf("pass %d found %+v", i, p.Findings)
		}
	}
	ids, keys, copies, offsets, queued := w.Remembering()
	// 30 s of passes every 5 s hold 6–7 passes of 20 messages and keys.
	if ids > 8*20 || keys > 8*20 || copies > 2*20 || offsets > 2*20 || queued > 3*8*20 {
		t.Fatalf("holds %d ids, %d keys, %d copies, %d offsets, %d queued after 800 messages; want the last 30 s only",
			ids, keys, copies, offsets, queued)
	}
	if ids < 5*20 || keys < 5*20 {
		t.Fatalf("holds %d ids and %d keys; want those of the last 30 s", ids, keys)
	}
}

// A watch saves its state after each pass; a watch started again under
// the same name takes it up: its findings stand, and it judges on from
// where the first stopped, so nothing is found, or logged, twice.
func TestWatchResumesWhereItStopped(t *testing.T) {
	s := newShop(t)
	ctx := context.Background()
	db, err := sqlite.Open(filepath.Join(t.TempDir(), "watch.db"))
	testenv.Must(t, err, "open")
	t.Cleanup(func() { db.Close() })
	d := sqlite.NewDriver(db)
	_, err = d.Migrate(ctx)
	testenv.Must(t, err, "migrate")

	first := s.watch(audit.WatchConfig{Name: "orders", Broker: "memory", Save: d.Delivery()})
	s.write(messages(10, 2)...)
	s.relay()
	phantom := courier.NewMessage("orders", "k1", "OrderPlaced", nil)
	testenv.Must(t, s.pub.Publish(ctx, []courier.Message{phantom})[0], "phantom")
	if p := s.pass(first); p.Count(audit.KindPhantom) != 1 {
		t.Fatalf("pass %+v; want the phantom", p)
	}
	saved, err := d.Delivery().Watches(ctx)
	testenv.Must(t, err, "watches")
	if len(saved) != 1 || saved[0].Name != "orders" || saved[0].Phantoms != 1 || saved[0].Passes != 1 || !saved[0].Alarms() ||
		!near(saved[0].To, first.State().To) {
		t.Fatalf("saved %+v; want the first pass's state", saved)
	}
	fs, err := audit.SavedFindings(saved[0])
	if err != nil || len(fs) != 1 || fs[0].MessageID != phantom.ID.String() {
		t.Fatalf("saved findings %+v, %v; want the phantom", fs, err)
	}

	// Started again, with a first pass reaching back further than the
	// first one judged.
	again := s.watch(audit.WatchConfig{Name: "orders", Broker: "memory", Save: d.Delivery(), Since: time.Hour})
	p := s.pass(again)
	if len(p.Findings) != 0 || !near(p.From, first.State().To) || p.Note != "" {
		t.Fatalf("pass %+v; want it to start where the first watch stopped, finding nothing again", p)
	}
	if st := again.State(); st.Phantoms != 1 || st.Passes != 2 || len(st.Findings) != 1 {
		t.Fatalf("state %+v; want the first watch's finding to stand", st)
	}

	// Stopped for longer than Since: the gap is said, not judged.
	s.clock.Advance(time.Hour)
	late := s.watch(audit.WatchConfig{Name: "orders", Save: d.Delivery(), Since: time.Minute})
	if p := s.pass(late); !strings.Contains(p.Note, "was not judged") {
		t.Fatalf("pass %+v; want it to say what it did not judge", p)
	}
}

// near reports whether two times are the same to the microsecond, the
// precision the databases keep.
func near(a, b time.Time) bool { return a.Sub(b).Abs() < time.Microsecond }
