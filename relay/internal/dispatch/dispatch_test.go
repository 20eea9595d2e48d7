package dispatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
	"github.com/courier-go/courier/broker/memory"
)

type wish struct {
	error
	d time.Duration
}

func (w wish) RetryAfter() time.Duration { return w.d }
func (w wish) Unwrap() error             { return w.error }

// One policy: what each kind of failure means.
func TestJudge(t *testing.T) {
	p := Policy{MaxAttempts: 3, Backoff: courier.Backoff{Initial: time.Second, Max: 8 * time.Second}}
	at := time.Unix(1000, 0)
	counted := errors.New("refused")
	outage := broker.Unavailable(errors.New("down"))
	for _, c := range []struct {
		name     string
		err      error
		attempts int
		outages  int
		want     Failure
	}{
		{"counted", counted, 0, 0, Failure{Counted: true, Attempts: 1, Delay: time.Second}},
		{"counted again", counted, 1, 0, Failure{Counted: true, Attempts: 2, Delay: 2 * time.Second}},
		{"counted for the last time", counted, 2, 0, Failure{Counted: true, Attempts: 3, Dead: true}},
		{"permanent", broker.Rejected(counted), 0, 0, Failure{Counted: true, Permanent: true, Attempts: 1, Dead: true}},
		{"counted, the broker asks for longer", wish{counted, 5 * time.Second}, 0, 0, Failure{Counted: true, Attempts: 1, Delay: 5 * time.Second}},
		{"counted, the broker asks for less", wish{counted, time.Millisecond}, 1, 0, Failure{Counted: true, Attempts: 2, Delay: 2 * time.Second}},
		{"counted, the broker asks for too long", wish{counted, time.Hour}, 0, 0, Failure{Counted: true, Attempts: 1, Delay: 8 * time.Second}},
		{"outage", outage, 2, 1, Failure{Attempts: 2, Delay: time.Second}},
		{"third outage", outage, 0, 3, Failure{Delay: 4 * time.Second}},
		{"outage, the broker says when", wish{outage, 1500 * time.Millisecond}, 0, 3, Failure{Delay: 1500 * time.Millisecond}},
		{"outage, the broker says now", wish{outage, 0}, 0, 3, Failure{Delay: time.Second}},
		{"unavailable and rejected", broker.Unavailable(broker.Rejected(counted)), 0, 1, Failure{Delay: time.Second}},
	} {
		got := p.Judge(c.err, c.attempts, c.outages, at)
		c.want.Err, c.want.At = c.err, at
		if got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}

func items(key string, n int) []Item {
	var its []Item
	for i := range n {
		its = append(its, Item{Message: courier.NewMessage("t", key, "T", []byte(fmt.Sprint(key, i)))})
	}
	return its
}

func newDispatcher(pub broker.Publisher, maxAttempts int) *Dispatcher {
	return New(pub, Config{Policy: Policy{MaxAttempts: maxAttempts, Backoff: courier.Backoff{Initial: time.Second, Max: time.Second}},
		Logger: slog.New(slog.DiscardHandler), Observer: nopObserver{}})
}

// A round sends each key's head, or its run to one topic when pipelined; a
// failure holds the rest of its key; a dead letter that was not a refusal
// for good leaves the rest of its run unsent, and the key goes on.
func TestRound(t *testing.T) {
	for _, pipelined := range []bool{false, true} {
		t.Run(fmt.Sprintf("pipelined=%v", pipelined), func(t *testing.T) {
			pub := memory.NewPublisher()
			pub.KeepOrder(pipelined)
			d := newDispatcher(pub, 2)
			ok, retry, dead, rejected := items("ok", 3), items("retry", 3), items("dead", 3), items("rejected", 3)
			pub.Fail(retry[0].Message.ID, -1)
			pub.Fail(dead[0].Message.ID, -1)
			dead[0].Attempts = 1 // its second failure of MaxAttempts 2
			pub.Reject(rejected[0].Message.ID, "too large")
			out := d.Round(context.Background(), [][]Item{ok, retry, dead, rejected}, 100)
			sent := 1
			if pipelined {
				sent = 3
			}
			if o := out[0]; o.Sent != sent || o.Done != sent || len(o.Published) != sent || o.Failed != nil {
				t.Errorf("ok: %+v", o)
			}
			if o := out[1]; o.Sent != sent || o.Done != 0 || o.Failed == nil || o.Failed.Index != 0 || o.Failed.Dead {
				t.Errorf("retry: %+v", o)
			}
			if o := out[2]; o.Done != 1 || len(o.Dead) != 1 || o.Dead[0].Permanent || o.Failed != nil || len(o.Published) != 0 {
				t.Errorf("dead: %+v", o)
			}
			wantDone := 1
			if pipelined {
				wantDone = 3 // a refusal for good holds nothing back
			}
			if o := out[3]; o.Done != wantDone || len(o.Dead) != 1 || !o.Dead[0].Permanent || len(o.Published) != wantDone-1 {
				t.Errorf("rejected: %+v", o)
			}
		})
	}
}

// A round cut at limit messages sends no key beyond it; whole rounds that
// fail as an outage pause the dispatcher, one success ends the outage.
func TestRoundLimitAndOutage(t *testing.T) {
	pub := memory.NewPublisher()
	d := newDispatcher(pub, 3)
	out := d.Round(context.Background(), [][]Item{items("a", 1), items("b", 1), items("c", 1)}, 2)
	if out[0].Sent != 1 || out[1].Sent != 1 || out[2].Sent != 0 {
		t.Fatalf("limit 2: %+v", out)
	}
	pub.Down(true)
	d.Round(context.Background(), [][]Item{items("a", 1)}, 10)
	d.Round(context.Background(), [][]Item{items("a", 1)}, 10)
	if o := d.Outage(); !o.Down || o.Rounds != 2 || o.PausedUntil.IsZero() || o.Err == "" {
		t.Fatalf("after two rounds down: %+v", o)
	}
	pub.Down(false)
	d.Round(context.Background(), [][]Item{items("a", 1)}, 10)
	if o := d.Outage(); o.Down || o.Rounds != 0 {
		t.Fatalf("after a success: %+v", o)
	}
}

// A dead letter holds its key when its topic is one of Holds, and only
// then; a retry never does, even on such a topic.
func TestJudgeHolds(t *testing.T) {
	at := time.Unix(1000, 0)
	refused := errors.New("refused")
	for _, c := range []struct {
		name     string
		holds    []string
		topic    string
		err      error
		attempts int
		hold     bool
	}{
		{"dead, topic held", []string{"orders"}, "orders", refused, 1, true},
		{"dead, other topic", []string{"orders"}, "payments", refused, 1, false},
		{"dead, every topic", []string{"*"}, "payments", refused, 1, true},
		{"dead, none held", nil, "orders", refused, 1, false},
		{"rejected, topic held", []string{"orders", "payments"}, "payments", broker.Rejected(refused), 0, true},
		{"retry, topic held", []string{"orders"}, "orders", refused, 0, false},
		{"outage, topic held", []string{"*"}, "orders", broker.Unavailable(refused), 1, false},
	} {
		d := New(memory.NewPublisher(), Config{Policy: Policy{MaxAttempts: 2, Backoff: courier.Backoff{Initial: time.Second, Max: time.Second}},
			Logger: slog.New(slog.DiscardHandler), Observer: nopObserver{}, Holds: NewHolds(c.holds)})
		m := courier.NewMessage(c.topic, "k", "T", nil)
		if f := d.Judge(c.err, m, c.attempts, at); f.Hold != c.hold || (f.Hold && !f.Dead) {
			t.Errorf("%s: %+v, want Hold %v", c.name, f, c.hold)
		}
	}
	if (Holds{}).Any() || NewHolds(nil).Any() || !NewHolds([]string{"*"}).Any() || !NewHolds([]string{"a"}).Any() {
		t.Error("Any is wrong")
	}
}

// A round's dead letters of a held topic carry Hold; those of other topics
// do not.
func TestRoundHolds(t *testing.T) {
	pub := memory.NewPublisher()
	d := New(pub, Config{Policy: Policy{MaxAttempts: 1, Backoff: courier.Backoff{Initial: time.Second, Max: time.Second}},
		Logger: slog.New(slog.DiscardHandler), Observer: nopObserver{}, Holds: NewHolds([]string{"orders"})})
	held := Item{Message: courier.NewMessage("orders", "a", "T", nil)}
	free := Item{Message: courier.NewMessage("payments", "b", "T", nil)}
	pub.Fail(held.Message.ID, -1)
	pub.Fail(free.Message.ID, -1)
	out := d.Round(context.Background(), [][]Item{{held}, {free}}, 10)
	if len(out[0].Dead) != 1 || !out[0].Dead[0].Hold || !out[0].Held {
		t.Errorf("orders: %+v, want a dead letter that holds", out[0])
	}
	if len(out[1].Dead) != 1 || out[1].Dead[0].Hold || out[1].Held {
		t.Errorf("payments: %+v, want a dead letter that does not hold", out[1])
	}
}

// To a publisher that keeps a key's order, a topic that holds keys is sent
// one message of a key per round, so that a refusal for good stops the
// key before the broker stores the next; other topics go in runs.
func TestRoundHoldsNoRuns(t *testing.T) {
	pub := memory.NewPublisher()
	pub.KeepOrder(true)
	d := New(pub, Config{Policy: Policy{MaxAttempts: 3, Backoff: courier.Backoff{Initial: time.Second, Max: time.Second}},
		Logger: slog.New(slog.DiscardHandler), Observer: nopObserver{}, Holds: NewHolds([]string{"orders"})})
	held := []Item{{Message: courier.NewMessage("orders", "a", "T", nil)}, {Message: courier.NewMessage("orders", "a", "T", nil)}}
	free := items("b", 3) // topic t
	pub.Reject(held[0].Message.ID, "too large")
	out := d.Round(context.Background(), [][]Item{held, free}, 10)
	if o := out[0]; o.Sent != 1 || o.Done != 1 || !o.Held || len(o.Published) != 0 {
		t.Errorf("orders: %+v, want its head alone sent, a dead letter that holds", o)
	}
	if o := out[1]; o.Sent != 3 || o.Done != 3 {
		t.Errorf("t: %+v, want its run of 3", o)
	}
	if pub.Attempts(held[1].Message.ID) != 0 {
		t.Error("the message after the refused one was sent")
	}
}
