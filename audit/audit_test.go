package audit_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/audit"
	"github.com/courier-go/courier/broker/memory"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/relay"
	"github.com/courier-go/courier/store/memstore"
)

// shop is an outbox in memory whose relay publishes to a broker in
// memory, keeping the published copies, all on one clock.
type shop struct {
	t     *testing.T
	clock *memstore.Clock
	st    *memstore.Store
	pub   *memory.Publisher
	start time.Time
}

func newShop(t *testing.T) *shop {
	clock := memstore.NewClock()
	pub := memory.NewPublisher()
	pub.SetClock(clock.Now)
	return &shop{t: t, clock: clock, st: memstore.New(memstore.Config{KeepPublished: true, Clock: clock.Now}), pub: pub, start: clock.Now()}
}

// write commits msgs to the outbox.
func (s *shop) write(msgs ...courier.Message) {
	s.t.Helper()
	ctx := context.Background()
	testenv.Must(s.t, s.st.InTx(ctx, func(tx *memstore.Tx) error { return s.st.Insert(ctx, tx, msgs) }), "write")
}

// relay publishes the outbox until it is empty.
func (s *shop) relay() {
	s.t.Helper()
	r, err := relay.New(s.st, s.pub, relay.Config{PollInterval: time.Millisecond, MaxAttempts: 1, Clock: s.clock.Now})
	testenv.Must(s.t, err, "relay")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	testenv.Eventually(s.t, 10*time.Second, func() bool { return len(s.st.Pending()) == 0 }, "%d messages not published",
		testenv.Lazy(func() any { return len(s.st.Pending()) }))
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		s.t.Fatalf("relay: %v", err)
	}
}

// audit audits the shop from its start to now.
func (s *shop) audit() *audit.Report {
	s.t.Helper()
	rep, err := audit.Run(context.Background(), s.st.Operations(), s.pub, audit.Config{From: s.start, To: s.clock.Now(), Slack: time.Second})
	testenv.Must(s.t, err, "audit")
	return rep
}

func messages(n int, keys int) []courier.Message {
	msgs := make([]courier.Message, n)
	for i := range msgs {
		msgs[i] = courier.NewMessage("orders", fmt.Sprintf("k%d", i%keys), "OrderPlaced", []byte(fmt.Sprint(i)))
	}
	return msgs
}

// What the relay published and the broker holds matches: every copy is on
// the broker once, in its key's order.
func TestCleanAudit(t *testing.T) {
	s := newShop(t)
	s.write(messages(50, 5)...)
	s.relay()
	rep := s.audit()
	if rep.Published != 50 || rep.Stored != 50 || rep.Alarms() || rep.Duplicates.Count != 0 || rep.Pending != 0 || len(rep.Narrowed) != 0 {
		t.Fatalf("report %+v; want 50 published and stored, nothing else", rep)
	}
}

// Each kind of finding is found, counted once, and listed with what each
// side says of the message.
func TestFindings(t *testing.T) {
	s := newShop(t)
	msgs := messages(40, 4)
	s.write(msgs...)
	poison := courier.NewMessage("orders", "poison", "OrderPlaced", nil)
	s.pub.Fail(poison.ID, -1) // refused: a dead letter at its first attempt
	s.write(poison)
	s.relay()
	ctx := context.Background()

	// Lost: the broker forgets an acknowledged message.
	lost := msgs[3]
	if s.pub.Forget(lost.ID) != 1 {
		t.Fatal("the broker did not hold the message to lose")
	}
	// Order break: the last two messages of key k1 (msgs[33], msgs[37])
	// stored again in reverse, the originals forgotten.
	early, late := msgs[33], msgs[37]
	s.pub.Forget(early.ID)
	s.pub.Forget(late.ID)
	for _, m := range []courier.Message{late, early} {
		testenv.Must(t, s.pub.Publish(ctx, []courier.Message{m})[0], "store again")
	}
	// A duplicate, a phantom, a message still pending and a dead letter
	// on the broker.
	dup := msgs[10]
	phantom := courier.NewMessage("orders", "k0", "OrderPlaced", []byte("never written"))
	pending := courier.NewMessage("orders", "k9", "OrderPlaced", nil)
	s.write(pending)
	s.pub.Fail(poison.ID, 0) // taken now: a dead letter the broker stored after all
	for _, m := range []courier.Message{dup, phantom, pending, poison} {
		testenv.Must(t, s.pub.Publish(ctx, []courier.Message{m})[0], "store")
	}

	rep := s.audit()
	check := func(kind string, fs audit.Findings, want courier.Message) {
		t.Helper()
		if fs.Count != 1 || len(fs.Examples) != 1 || fs.Examples[0].MessageID != want.ID.String() || fs.Examples[0].Key != want.Key {
			t.Errorf("%s: %+v; want message %s of key %s", kind, fs, want.ID, want.Key)
		}
	}
	check("lost", rep.Lost, lost)
	check("phantoms", rep.Phantoms, phantom)
	check("duplicates", rep.Duplicates, dup)
	check("order breaks", rep.OrderBreaks, early)
	if f := rep.Lost.Examples[0]; f.ID == 0 || f.PublishedAt.IsZero() || f.Log != "" {
		t.Errorf("lost %+v: want the database's id and time, nothing of the broker's", f)
	}
	if f := rep.OrderBreaks.Examples[0]; !strings.Contains(f.Detail, late.ID.String()) || f.Log != "memory" {
		t.Errorf("order break %+v: want it to name the later message %s and the log", f, late.ID)
	}
	if rep.Pending != 1 || rep.DeadLetters != 1 || rep.Published != 40 || rep.Stored != 40-1+1+1+1+1 {
		t.Errorf("report %+v; want 1 pending, 1 dead letter, 40 copies and 43 messages stored", rep)
	}
	if !rep.Alarms() {
		t.Error("no alarm")
	}
}

// A window that starts before the first copy the database keeps is
// narrowed to a slack before it, and says so: what the broker stored
// before is not judged.
func TestNarrowedToTheFirstCopy(t *testing.T) {
	s := newShop(t)
	ctx := context.Background()
	testenv.Must(t, s.pub.Publish(ctx, messages(3, 1))[0], "store before Courier")
	s.clock.Advance(10 * time.Minute)
	s.write(messages(10, 2)...)
	s.relay()
	rep, err := audit.Run(ctx, s.st.Operations(), s.pub, audit.Config{From: s.start, To: s.clock.Now(), Slack: time.Minute})
	testenv.Must(t, err, "audit")
	if len(rep.Narrowed) != 1 || rep.From.Before(s.start.Add(8*time.Minute)) || rep.Published != 10 || rep.Stored != 10 || rep.Alarms() {
		t.Fatalf("report %+v; want the window narrowed to a minute before the first copy, 10 messages, no alarm", rep)
	}
}

func TestConfigErrors(t *testing.T) {
	s := newShop(t)
	now := time.Now()
	for _, c := range []struct {
		cfg  audit.Config
		want string
	}{
		{audit.Config{}, "Config.From"},
		{audit.Config{From: now, To: now.Add(-time.Hour)}, "not before Config.To"},
		{audit.Config{From: now.Add(-time.Hour), Slack: -time.Second}, "Config.Slack"},
	} {
		if _, err := audit.Run(context.Background(), s.st.Operations(), s.pub, c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v; want an error naming %q", c.cfg, err, c.want)
		}
	}
}
