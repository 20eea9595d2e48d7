package replayguard

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// letters returns n relay letters, relay:1 to relay:n.
func letters(n int) []Letter {
	out := make([]Letter, n)
	for i := range out {
		out[i] = Letter{Ref: fmt.Sprintf("relay:%d", i+1), Relay: true, ID: int64(i + 1)}
	}
	return out
}

// world is what the run's callbacks act on: the replays made, and the
// outcome each one gets at once (failing: those that fail again).
type world struct {
	mu       sync.Mutex
	replayed map[int64]bool
	failing  map[int64]bool
}

func newWorld(failing ...int64) *world {
	w := &world{replayed: map[int64]bool{}, failing: map[int64]bool{}}
	for _, id := range failing {
		w.failing[id] = true
	}
	return w
}

func (w *world) run(ls []Letter, o Options) *Run {
	return &Run{Letters: ls, Options: o, Poll: time.Millisecond,
		Replay: func(_ context.Context, l Letter) error {
			w.mu.Lock()
			defer w.mu.Unlock()
			w.replayed[l.ID] = true
			return nil
		},
		Outcome: func(_ context.Context, l Letter) (Outcome, string, error) {
			w.mu.Lock()
			defer w.mu.Unlock()
			if w.failing[l.ID] {
				return FailedAgain, "dead again", nil
			}
			return Succeeded, "published", nil
		}}
}

// A canary that fails again stops the run before the rest; one that
// succeeds lets it go on to the end.
func TestCanary(t *testing.T) {
	w := newWorld(2)
	res, err := w.run(letters(10), Options{Canary: 3, Wait: time.Second}).Do(context.Background())
	if err != nil || res.State != "stopped" || res.Replayed != 3 || res.Failed != 1 || res.Left != 7 || len(w.replayed) != 3 ||
		!strings.Contains(res.Note, "1 of the 3 canary replay(s) failed again; 7 left") {
		t.Fatalf("failing canary: %+v %v (replayed %v)", res, err, w.replayed)
	}
	w = newWorld(5)
	res, err = w.run(letters(10), Options{Canary: 3, Wait: time.Second}).Do(context.Background())
	if err != nil || res.State != "done" || res.Replayed != 10 || res.Failed != 1 || res.Succeeded != 9 || res.Left != 0 {
		t.Fatalf("passing canary: %+v %v", res, err)
	}
	// A canary larger than the selection replays it all, then stops
	// on its failure with none left.
	w = newWorld(1)
	res, err = w.run(letters(2), Options{Canary: 5, Wait: time.Second}).Do(context.Background())
	if err != nil || res.State != "stopped" || res.Replayed != 2 || res.Left != 0 {
		t.Fatalf("canary beyond the selection: %+v %v", res, err)
	}
}

// With StopOnFailure the run stops at the first replay that failed
// again, with the rest left; without it, it replays everything.
func TestStopOnFailure(t *testing.T) {
	w := newWorld(4)
	res, err := w.run(letters(10), Options{StopOnFailure: true, Wait: time.Second, Rate: 1000}).Do(context.Background())
	if err != nil || res.State != "stopped" || res.Failed != 1 || res.Replayed < 4 || res.Left != 10-res.Replayed || len(w.replayed) != res.Replayed {
		t.Fatalf("stop on failure: %+v %v", res, err)
	}
	w = newWorld(4)
	res, err = w.run(letters(10), Options{Wait: time.Second}).Do(context.Background())
	if err != nil || res.State != "done" || res.Replayed != 10 || res.Failed != 1 {
		t.Fatalf("without stop on failure: %+v %v", res, err)
	}
}

// Replays at a rate are at least 1/rate apart, by the run's clock.
func TestRate(t *testing.T) {
	w := newWorld()
	const rate = 50
	res, err := w.run(letters(6), Options{Rate: rate}).Do(context.Background())
	if err != nil || len(res.ReplayedAt) != 6 {
		t.Fatalf("rate: %+v %v", res, err)
	}
	for i := 1; i < len(res.ReplayedAt); i++ {
		if gap := res.ReplayedAt[i].Sub(res.ReplayedAt[i-1]); gap < time.Second/rate {
			t.Fatalf("replays %d and %d %s apart, less than 1/%d s", i, i+1, gap, rate)
		}
	}
}

// Each bad option is refused, naming its flag.
func TestCheck(t *testing.T) {
	for o, want := range map[Options]string{
		{Canary: -1}:                   "--canary is -1",
		{Rate: -2}:                     "--rate is -2",
		{Canary: 2}:                    "--canary needs --wait",
		{StopOnFailure: true}:          "--stop-on-failure needs --wait",
		{Wait: -time.Second}:           "--wait is -1s",
		{Canary: 1, Wait: 1}:           "",
		{Rate: 0.5, Wait: 0}:           "",
		{StopOnFailure: true, Wait: 1}: "",
	} {
		err := o.Check()
		if (want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), want)) {
			t.Errorf("%+v: %v, want %q", o, err, want)
		}
	}
}

// A consumer letter parked longer ago than the retention is stale, one
// parked exactly that long ago is not; relay letters and a retention of
// 0 or less never are.
func TestStale(t *testing.T) {
	now := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
	ret := 7 * 24 * time.Hour
	old := Letter{Ref: "consumer:3", ParkedAt: now.Add(-ret - time.Microsecond)}
	edge := Letter{Ref: "consumer:4", ParkedAt: now.Add(-ret)}
	for _, c := range []struct {
		l    Letter
		ret  time.Duration
		want bool
	}{{old, ret, true}, {edge, ret, false}, {Letter{Relay: true, ParkedAt: old.ParkedAt}, ret, false}, {old, 0, false}, {old, -1, false}} {
		if got := Stale(c.l, now, c.ret); got != c.want {
			t.Errorf("Stale(%+v, %s) = %v", c.l, c.ret, got)
		}
	}
	err := CheckRetention([]Letter{edge, old}, now, ret, false, "--force")
	if err == nil || !strings.Contains(err.Error(), "consumer:3 (parked 7d ago)") || strings.Contains(err.Error(), "consumer:4") ||
		!strings.Contains(err.Error(), "retention (7d)") || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("CheckRetention: %v", err)
	}
	if err := CheckRetention([]Letter{old}, now, ret, true, "--force"); err != nil {
		t.Fatalf("forced: %v", err)
	}
}
