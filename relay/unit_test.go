package relay_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
	"github.com/courier-go/courier/broker/memory"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/relay"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/memstore"
)

// The tests named TestUnit run the relay on the outbox and the broker in
// memory (store/memstore, broker/memory): the ordering rules, outages,
// poison messages and shutdown, in milliseconds, with the store's clock
// moved forward instead of sleeping for leases and retries. The tests on
// the real database and broker (the rest of this package) stay the proof;
// these ones pin the relay's own logic down and run first.

// unit is one test's outbox, broker and clock in memory.
type unit struct {
	t     *testing.T
	clock *memstore.Clock
	st    *memstore.Store
	pub   *memory.Publisher
	via   broker.Publisher // when set, the relay publishes through it instead of pub
	w     *outbox.Writer[*memstore.Tx]
	gates []*jumpGate // one per relay started
}

func newUnit(t *testing.T) *unit {
	clock := memstore.NewClock()
	st := memstore.New(memstore.Config{Clock: clock.Now})
	return &unit{t: t, clock: clock, st: st, pub: memory.NewPublisher(), w: outbox.New(st, outbox.Config{})}
}

// config polls every few milliseconds and retries failed messages after an
// hour, which only the test's clock (the store's and the relay's) makes
// pass.
func (u *unit) config() relay.Config {
	return relay.Config{
		Clock:         u.clock.Now,
		BatchSize:     100,
		LeaseDuration: time.Minute,
		PollInterval:  5 * time.Millisecond,
		Backoff:       relay.Backoff{Initial: time.Hour, Max: time.Hour},
		Notifier:      u.st.NewNotifier(),
		Logger:        testLogger(u.t),
	}
}

// start runs a relay until the test ends; stop cancels its context and
// waits for Run to return.
func (u *unit) start(cfg relay.Config) (r *relay.Relay, stop func()) {
	u.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r, done := u.run(ctx, cfg)
	stop = func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			u.t.Fatal("relay did not stop within 10s")
		}
	}
	u.t.Cleanup(stop)
	return r, stop
}

// run runs a relay until ctx ends; done is closed when Run has returned.
func (u *unit) run(ctx context.Context, cfg relay.Config) (r *relay.Relay, done <-chan struct{}) {
	u.t.Helper()
	var pub broker.Publisher = u.pub
	if u.via != nil {
		pub = u.via
	}
	gate := &jumpGate{Store: u.st}
	u.gates = append(u.gates, gate)
	r, err := relay.New(gate, pub, cfg)
	if err != nil {
		u.t.Fatalf("new relay: %v", err)
	}
	ch := make(chan struct{})
	go func() {
		defer close(ch)
		if err := r.Run(ctx); err != nil {
			u.t.Errorf("relay.Run: %v", err)
		}
	}()
	return r, ch
}

// jumpGate is a relay's view of the unit's store, through which the test's
// clock can jump while the relay runs. The relay reads its clock as a claim
// starts (the lease's start, by its reckoning), and the store reads it
// during the claim. A jump between the two would lease rows that the relay
// counts as expired at once: it would give the batch up, and the rows
// would wait out the lease. So the clock jumps between claims (advance),
// and the first claim after a jump, which may have read the clock before
// it, finds nothing: the relay claims again on its next poll, with a fresh
// reading.
type jumpGate struct {
	*memstore.Store
	mu     sync.RWMutex // written while the clock jumps, read by claims
	jumped atomic.Bool  // the clock jumped since the last claim
}

func (g *jumpGate) Claim(ctx context.Context, owner string, limit int, lease time.Duration) (store.Batch, error) {
	g.mu.RLock()
	defer g.mu.RUnlock()
	if g.jumped.Swap(false) {
		return store.Batch{}, nil
	}
	return g.Store.Claim(ctx, owner, limit, lease)
}

// advance moves the test's clock forward by d, between the claims of every
// relay the test started (see jumpGate).
func (u *unit) advance(d time.Duration) {
	for _, g := range u.gates {
		g.mu.Lock()
		defer g.mu.Unlock()
	}
	u.clock.Advance(d)
	for _, g := range u.gates {
		g.jumped.Store(true)
	}
}

// write commits msgs in one transaction.
func (u *unit) write(msgs ...courier.Message) {
	u.t.Helper()
	ctx := context.Background()
	if err := u.st.InTx(ctx, func(tx *memstore.Tx) error { return u.w.Write(ctx, tx, msgs...) }); err != nil {
		u.t.Fatalf("write: %v", err)
	}
}

// eventually polls cond every millisecond for up to 10 seconds.
func (u *unit) eventually(cond func() bool, format string, args ...any) {
	u.t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			u.t.Fatalf("after 10s: "+format, args...)
		}
	}
}

func (u *unit) stats() store.Stats {
	u.t.Helper()
	s, err := u.st.Stats(context.Background())
	if err != nil {
		u.t.Fatalf("stats: %v", err)
	}
	return s
}

// published reports whether the broker acknowledged every message of msgs.
func (u *unit) published(msgs ...courier.Message) bool {
	got := map[uuid.UUID]bool{}
	for _, m := range u.pub.Messages() {
		got[m.ID] = true
	}
	for _, m := range msgs {
		if !got[m.ID] {
			return false
		}
	}
	return true
}

// msg is a message of key whose payload names it.
func msg(key, name string) courier.Message {
	return courier.NewMessage("events", key, "T", []byte(name))
}

// names lists the payloads of msgs.
func names(msgs []courier.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = string(m.Payload)
	}
	return out
}

// ofKey returns the payloads of the acknowledged messages of key, in order.
func (u *unit) ofKey(key string) []string {
	var out []string
	for _, m := range u.pub.Messages() {
		if m.Key == key {
			out = append(out, string(m.Payload))
		}
	}
	return out
}

// Rule 1, through the relay: three relays with small batches publish every
// message of many keys once, each key in write order, whether the broker
// takes one message per key per round or a key's run at once.
func TestUnitRelaysKeepPerKeyOrder(t *testing.T) {
	for _, pipelined := range []bool{false, true} {
		t.Run(fmt.Sprintf("pipelined=%v", pipelined), func(t *testing.T) {
			u := newUnit(t)
			u.pub.KeepOrder(pipelined)
			var written []courier.Message
			for i := range 1500 {
				written = append(written, msg(fmt.Sprintf("k%d", i%37), fmt.Sprint(i)))
			}
			for _, cfg := range []int{7, 25, 60} {
				c := u.config()
				c.BatchSize, c.Concurrency = cfg, 2
				u.start(c)
			}
			for i := 0; i < len(written); i += 5 {
				u.write(written[i:min(i+5, len(written))]...)
			}
			u.eventually(func() bool { return u.stats().Pending == 0 }, "outbox not drained: %+v", u.stats())
			if dups := checkDelivery(t, written, u.pub.Messages()); dups != 0 {
				t.Fatalf("%d duplicates without any lease expiring", dups)
			}
		})
	}
}

// Rule 2: each round of a batch sends the next message of every key, so a
// key's messages go out one after another and other keys do not wait.
func TestUnitRoundsSendOneMessagePerKey(t *testing.T) {
	u := newUnit(t)
	u.write(msg("a", "a1"), msg("a", "a2"), msg("b", "b1"), msg("a", "a3"), msg("c", "c1"), msg("c", "c2"))
	r, _ := u.start(u.config())
	u.eventually(func() bool { return r.Metrics().Published == 6 }, "published %d of 6", r.Metrics().Published)
	var rounds [][]string
	for _, c := range u.pub.Calls() {
		rounds = append(rounds, names(c))
	}
	want := [][]string{{"a1", "b1", "c1"}, {"a2", "c2"}, {"a3"}}
	if !slices.EqualFunc(rounds, want, slices.Equal) {
		t.Fatalf("rounds %v, want %v", rounds, want)
	}
}

// Rule 2, pipelined: a broker that keeps a key's order (broker.OrderKeeper)
// gets each key's run of messages to one topic in one round; a message to
// another topic starts the key's next round.
func TestUnitPipelinedRoundsSendAKeysRun(t *testing.T) {
	u := newUnit(t)
	u.pub.KeepOrder(true)
	a4 := msg("a", "a4")
	a4.Topic = "elsewhere"
	u.write(msg("a", "a1"), msg("a", "a2"), msg("b", "b1"), msg("a", "a3"), a4, msg("a", "a5"), msg("c", "c1"))
	r, _ := u.start(u.config())
	u.eventually(func() bool { return r.Metrics().Published == 7 }, "published %d of 7", r.Metrics().Published)
	var rounds [][]string
	for _, c := range u.pub.Calls() {
		rounds = append(rounds, names(c))
	}
	want := [][]string{{"a1", "a2", "a3", "b1", "c1"}, {"a4"}, {"a5"}}
	if !slices.EqualFunc(rounds, want, slices.Equal) {
		t.Fatalf("rounds %v, want %v", rounds, want)
	}
}

// Rule 3, pipelined: the broker stores none of a key's messages after one
// that failed; the relay releases them without counting an attempt, and
// publishes them in order after the failed one. A message rejected for good
// is a dead letter at once and does not hold its key: the rest of its run is
// published in the same round.
func TestUnitPipelinedFailureHoldsTheRestOfItsKey(t *testing.T) {
	u := newUnit(t)
	u.pub.KeepOrder(true)
	a2, p2 := msg("a", "a2"), msg("p", "p2")
	u.pub.Fail(a2.ID, 1)
	u.pub.Reject(p2.ID, "too large")
	u.write(msg("a", "a1"), a2, msg("a", "a3"), msg("a", "a4"), msg("p", "p1"), p2, msg("p", "p3"), msg("b", "b1"))
	r, _ := u.start(u.config())
	u.eventually(func() bool { return r.Metrics().Published == 4 && r.Metrics().Retried == 1 }, "metrics %+v", r.Metrics())
	if m := r.Metrics(); m.Released != 2 || m.DeadLettered != 1 {
		t.Fatalf("metrics %+v: want a3 and a4 released, p2 a dead letter", m)
	}
	if got := u.ofKey("a"); !slices.Equal(got, []string{"a1"}) {
		t.Fatalf("key a published %v while a2 failed, want a1 alone", got)
	}
	if got := u.ofKey("p"); !slices.Equal(got, []string{"p1", "p3"}) {
		t.Fatalf("key p published %v around its rejected p2, want p1 p3", got)
	}
	if calls := u.pub.Calls(); len(calls) != 1 {
		t.Fatalf("%d publish calls, want the whole batch in one", len(calls))
	}
	for _, row := range u.st.Pending() {
		if want := 0; string(row.Record.Message.Payload) != "a2" && row.Record.Attempts != want {
			t.Fatalf("%s has %d attempts: a message held back by its key's failure counted one", row.Record.Message.Payload, row.Record.Attempts)
		}
	}

	u.advance(time.Hour)
	u.eventually(func() bool { return u.stats().Pending == 0 }, "key a not drained after a2's retry came due: %+v", u.stats())
	if got := u.ofKey("a"); !slices.Equal(got, []string{"a1", "a2", "a3", "a4"}) {
		t.Fatalf("key a published %v, want a1 a2 a3 a4", got)
	}
}

// Rule 3: a failed message keeps the rest of its key from being sent, in its
// batch and in later claims, until it is published; the key's rows written
// meanwhile wait too; other keys never wait. The retry is claimed alone.
func TestUnitFailedMessageHoldsItsKey(t *testing.T) {
	u := newUnit(t)
	a1 := msg("a", "a1")
	u.pub.Fail(a1.ID, 1)
	u.write(a1, msg("a", "a2"), msg("b", "b1"), msg("a", "a3"), msg("b", "b2"))
	r, _ := u.start(u.config())
	u.eventually(func() bool { return r.Metrics().Retried == 1 && r.Metrics().Published == 2 }, "metrics %+v", r.Metrics())
	if m := r.Metrics(); m.Released != 2 {
		t.Fatalf("metrics %+v: want a2 and a3 released", m)
	}
	if got := u.ofKey("b"); !slices.Equal(got, []string{"b1", "b2"}) {
		t.Fatalf("key b published %v while a1 failed, want b1 b2", got)
	}

	// a is held by a1's retry: a4, written with c1, is not claimed with it.
	c1 := msg("c", "c1")
	u.write(msg("a", "a4"), c1)
	u.eventually(func() bool { return u.published(c1) }, "c1 not published while a backs off")
	if got := u.ofKey("a"); len(got) != 0 {
		t.Fatalf("key a published %v while a1 waits for its retry", got)
	}
	pending := u.st.Pending()
	if s := u.stats(); s.InBackoff != 1 || s.Pending != 4 || pending[0].Record.Attempts != 1 || pending[0].RetryAt.IsZero() {
		t.Fatalf("stats %+v, first row %+v: want a1 backing off after 1 attempt, and 4 pending", s, pending[0])
	}

	calls := len(u.pub.Calls())
	u.advance(time.Hour)
	u.eventually(func() bool { return u.stats().Pending == 0 }, "key a not drained after a1's retry came due: %+v", u.stats())
	if got := u.ofKey("a"); !slices.Equal(got, []string{"a1", "a2", "a3", "a4"}) {
		t.Fatalf("key a published %v, want a1 a2 a3 a4", got)
	}
	if retry := u.pub.Calls()[calls]; !slices.Equal(names(retry), []string{"a1"}) {
		t.Fatalf("the retry's round sent %v, want a1 alone", names(retry))
	}
}

// An outage pauses the relay without counting attempts: a backlog builds
// up, no message becomes a dead letter (MaxAttempts is 1), and it drains in
// order once the broker is back.
func TestUnitOutagePausesWithoutDeadLetters(t *testing.T) {
	u := newUnit(t)
	cfg := u.config()
	cfg.MaxAttempts = 1
	cfg.Backoff = relay.Backoff{Initial: time.Millisecond, Max: 4 * time.Millisecond}
	u.pub.Down(true)
	r, _ := u.start(cfg)
	var written []courier.Message
	for i := range 300 {
		written = append(written, msg(fmt.Sprintf("k%d", i%10), fmt.Sprint(i)))
	}
	u.write(written...)
	u.eventually(func() bool { return r.State().BrokerOutages >= 5 }, "state %+v", r.State())
	s, st := u.stats(), r.State()
	if !st.BrokerDown || !strings.Contains(st.BrokerError, memory.ErrOutage.Error()) || st.PausedUntil.IsZero() {
		t.Fatalf("state %+v: want the broker down, the outage's error and a pause", st)
	}
	if st.Check(time.Hour) != nil || st.Check(0) == nil {
		t.Fatalf("Check: %v with an hour's grace, %v with none", st.Check(time.Hour), st.Check(0))
	}
	if s.DeadLetters != 0 || s.Pending != 300 || st.Metrics.DeadLettered != 0 || st.Metrics.Published != 0 {
		t.Fatalf("during the outage: stats %+v, metrics %+v; want 300 pending and no dead letter", s, st.Metrics)
	}
	for _, row := range u.st.Pending() {
		if row.Record.Attempts != 0 {
			t.Fatalf("row %d has %d attempts after an outage, want 0", row.Record.Seq, row.Record.Attempts)
		}
	}

	u.pub.Down(false)
	u.eventually(func() bool { return u.stats().Pending == 0 }, "backlog not drained after the outage: %+v", u.stats())
	checkDelivery(t, written, u.pub.Messages())
	u.eventually(func() bool { return !r.State().BrokerDown }, "broker still down in %+v", r.State())
	if m := r.Metrics(); m.DeadLettered != 0 || m.Retried == 0 {
		t.Fatalf("metrics %+v: want retries and no dead letter", m)
	}
}

// A message the broker rejects for good is a dead letter at once, and one
// that keeps failing after MaxAttempts; either way its key moves on, and
// other keys flow meanwhile.
func TestUnitPoisonMessagesBecomeDeadLetters(t *testing.T) {
	u := newUnit(t)
	cfg := u.config()
	cfg.MaxAttempts = 3
	rejected, failing := msg("p", "rejected"), msg("q", "failing")
	u.pub.Reject(rejected.ID, "larger than max_payload")
	u.pub.Fail(failing.ID, -1)
	var others []courier.Message
	for i := range 50 {
		others = append(others, msg(fmt.Sprintf("o%d", i%5), fmt.Sprint(i)))
	}
	afterP, afterQ := msg("p", "after"), msg("q", "after")
	u.write(append([]courier.Message{rejected, failing, afterP, afterQ}, others...)...)
	r, _ := u.start(cfg)

	u.eventually(func() bool { return u.published(others...) && u.published(afterP) }, "other keys or p's next message not published")
	dead := u.st.DeadLetters()
	if len(dead) != 1 || dead[0].MessageID != rejected.ID.String() || dead[0].Attempts != 1 ||
		!strings.Contains(dead[0].LastError, "larger than max_payload") || len(dead[0].History) != 1 {
		t.Fatalf("dead letters %+v: want the rejected message, after one attempt, with the broker's reason", dead)
	}
	if u.published(afterQ) {
		t.Fatal("q's next message was published while q's first failed")
	}

	for attempt := 1; attempt < cfg.MaxAttempts; attempt++ {
		u.eventually(func() bool { return u.pub.Attempts(failing.ID) == attempt && u.stats().InBackoff == 1 },
			"attempt %d: %d attempts, stats %+v", attempt, u.pub.Attempts(failing.ID), u.stats())
		u.advance(time.Hour)
	}
	u.eventually(func() bool { return u.published(afterQ) }, "q's next message not published after q's first became a dead letter")
	dead = u.st.DeadLetters()
	if len(dead) != 2 || dead[1].MessageID != failing.ID.String() || dead[1].Attempts != 3 || len(dead[1].History) != 3 {
		t.Fatalf("dead letters %+v: want the failing message after 3 attempts, with its history", dead)
	}
	if m := r.Metrics(); m.DeadLettered != 2 || m.Retried != 2 {
		t.Fatalf("metrics %+v: want 2 dead letters, 2 retries", m)
	}
}

// Shutdown finishes the round in flight, records it and releases the rest
// of the batch at once: nothing is lost and nothing stays leased.
func TestUnitShutdownFinishesRoundAndReleasesRest(t *testing.T) {
	u := newUnit(t)
	u.write(msg("h", "h1"), msg("h", "h2"), msg("h", "h3"), msg("o", "o1"), msg("h", "h4"))
	u.pub.Hold()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r, done := u.run(ctx, u.config())
	<-u.pub.Held()
	cancel()
	u.pub.Release()
	<-done
	if got := names(u.pub.Messages()); !slices.Equal(got, []string{"h1", "o1"}) {
		t.Fatalf("published %v during shutdown, want the round in flight: h1 o1", got)
	}
	if s := u.stats(); s.Pending != 3 || s.Leased != 0 {
		t.Fatalf("after shutdown: %+v, want h2..h4 pending and released", s)
	}
	if m := r.Metrics(); m.Released != 3 || m.Published != 2 {
		t.Fatalf("metrics %+v, want 2 published, 3 released", m)
	}

	next, _ := u.start(u.config())
	u.eventually(func() bool { return next.Metrics().Published == 3 }, "the released rows were not published")
	if got := u.ofKey("h"); !slices.Equal(got, []string{"h1", "h2", "h3", "h4"}) {
		t.Fatalf("key h published %v", got)
	}
}

// A shutdown that cannot finish in time (the broker does not answer) records
// nothing: the rows stay leased until the lease ends, and are published by
// the next relay then, attempts untouched.
func TestUnitShutdownTimeoutLeavesRowsToTheLease(t *testing.T) {
	u := newUnit(t)
	cfg := u.config()
	cfg.ShutdownTimeout = 20 * time.Millisecond
	u.write(msg("k", "1"), msg("k", "2"), msg("l", "3"))
	u.pub.Hold()
	_, stop := u.start(cfg)
	<-u.pub.Held()
	stop()
	if s := u.stats(); s.Pending != 3 || s.Leased != 3 || s.InBackoff != 0 {
		t.Fatalf("after a shutdown that timed out: %+v, want 3 pending, still leased", s)
	}
	u.pub.Release()
	next, _ := u.start(u.config())
	u.advance(cfg.LeaseDuration)
	u.eventually(func() bool { return next.Metrics().Published == 3 }, "rows of the expired lease not published: %+v", u.stats())
	if got := u.ofKey("k"); !slices.Equal(got, []string{"1", "2"}) {
		t.Fatalf("key k published %v", got)
	}
	for _, m := range u.pub.Messages() {
		want := 2 // held in the first round, then published
		if string(m.Payload) == "2" {
			want = 1 // behind 1, never sent in the first batch
		}
		if n := u.pub.Attempts(m.ID); n != want {
			t.Fatalf("message %s handed to the broker %d times, want %d", m.Payload, n, want)
		}
	}
}

// failingStore is the store in memory with a database outage on demand.
type failingStore struct {
	*memstore.Store
	down atomic.Bool
}

var errDatabaseDown = errors.New("database unreachable")

func (s *failingStore) Claim(ctx context.Context, owner string, limit int, lease time.Duration) (store.Batch, error) {
	if s.down.Load() {
		return store.Batch{}, errDatabaseDown
	}
	return s.Store.Claim(ctx, owner, limit, lease)
}

func (s *failingStore) Complete(ctx context.Context, owner string, lease int64, o store.Outcome) error {
	if s.down.Load() {
		return errDatabaseDown
	}
	return s.Store.Complete(ctx, owner, lease, o)
}

// A database outage shows in State as failing claims and is retried until
// the database is back; nothing is lost and nothing counts against the
// messages.
func TestUnitDatabaseOutageIsRetried(t *testing.T) {
	u := newUnit(t)
	fs := &failingStore{Store: u.st}
	fs.down.Store(true)
	r, err := relay.New(fs, u.pub, u.config())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(ctx) }()
	defer func() { cancel(); <-done }()

	written := []courier.Message{msg("k", "1"), msg("k", "2"), msg("l", "3")}
	u.write(written...)
	u.eventually(func() bool { return r.State().ClaimFailures >= 1 }, "state %+v", r.State())
	if st := r.State(); st.ClaimError != errDatabaseDown.Error() || st.ClaimFailingSince.IsZero() || st.Check(0) == nil {
		t.Fatalf("state %+v: want failing claims with the database's error", st)
	}
	fs.down.Store(false)
	u.eventually(func() bool { return u.stats().Pending == 0 }, "outbox not drained after the database came back: %+v", u.stats())
	checkDelivery(t, written, u.pub.Messages())
	if st := r.State(); st.ClaimFailures != 0 || st.ClaimError != "" || st.Metrics.Retried != 0 {
		t.Fatalf("state %+v: want claims healthy again and no retries", st)
	}
}

// retryAfterError is a counted failure that asks for a wait, as an HTTP
// endpoint's Retry-After does.
type retryAfterError struct{ wait time.Duration }

func (e retryAfterError) Error() string             { return "endpoint asked to wait" }
func (e retryAfterError) RetryAfter() time.Duration { return e.wait }

// asksToWait fails the first publish of one message with a Retry-After.
type asksToWait struct {
	*memory.Publisher
	id    uuid.UUID
	wait  time.Duration
	asked atomic.Bool
}

func (p *asksToWait) Publish(ctx context.Context, msgs []courier.Message) []error {
	if len(msgs) == 1 && msgs[0].ID == p.id && p.asked.CompareAndSwap(false, true) {
		return []error{retryAfterError{p.wait}}
	}
	return p.Publisher.Publish(ctx, msgs)
}

// A broker's Retry-After longer than the backoff sets the retry time, up to
// the backoff's Max; the message is not tried again before it.
func TestUnitRetryAfterIsHonoured(t *testing.T) {
	u := newUnit(t)
	a1 := msg("a", "a1")
	pub := &asksToWait{Publisher: u.pub, id: a1.ID, wait: 2 * time.Hour}
	cfg := u.config()
	cfg.Backoff = relay.Backoff{Initial: time.Hour, Max: 3 * time.Hour}
	u.write(a1)
	u.via = pub
	r, _ := u.start(cfg)
	u.eventually(func() bool { return r.Metrics().Retried == 1 }, "metrics %+v", r.Metrics())
	pending := u.st.Pending()
	if len(pending) != 1 {
		t.Fatalf("pending %+v, want a1 alone", pending)
	}
	if wait := pending[0].RetryAt.Sub(u.clock.Now()); wait < 2*time.Hour-time.Minute || wait > 2*time.Hour {
		t.Fatalf("a1 retries in %v, want the 2h the broker asked for (the backoff says 1h)", wait)
	}
	u.advance(time.Hour + time.Minute)
	time.Sleep(50 * time.Millisecond) // ten polls: a1 must not go out yet
	if u.published(a1) {
		t.Fatal("a1 published before its Retry-After passed")
	}
	u.advance(time.Hour)
	u.eventually(func() bool { return u.published(a1) }, "a1 not published after its Retry-After")
}

// outageFor is an outage whose broker says when it is back.
type outageFor struct{ wait time.Duration }

func (e outageFor) Error() string             { return "endpoint unavailable; retry later" }
func (e outageFor) RetryAfter() time.Duration { return e.wait }
func (e outageFor) Unwrap() error             { return broker.ErrUnavailable }

// downFor fails every message with outageFor until released.
type downFor struct {
	*memory.Publisher
	wait time.Duration
	down atomic.Bool
}

func (p *downFor) Publish(ctx context.Context, msgs []courier.Message) []error {
	if p.down.Load() {
		errs := make([]error, len(msgs))
		for i := range errs {
			errs[i] = outageFor{p.wait}
		}
		return errs
	}
	return p.Publisher.Publish(ctx, msgs)
}

// An outage whose broker says when it is back (a Retry-After, an open
// circuit breaker's remaining time) is retried then, even when the
// relay's own backoff would wait much longer: the message's retry and the
// relay's pause both follow the broker's word.
func TestUnitOutageRetryAfterShortensTheWait(t *testing.T) {
	u := newUnit(t)
	pub := &downFor{Publisher: u.pub, wait: 10 * time.Minute}
	pub.down.Store(true)
	cfg := u.config()
	cfg.Backoff = relay.Backoff{Initial: time.Hour, Max: 3 * time.Hour}
	a1 := msg("a", "a1")
	u.write(a1)
	u.via = pub
	r, _ := u.start(cfg)
	u.eventually(func() bool { return r.Metrics().Retried == 1 }, "metrics %+v", r.Metrics())
	pending := u.st.Pending()
	if wait := pending[0].RetryAt.Sub(u.clock.Now()); wait < 9*time.Minute || wait > 10*time.Minute {
		t.Fatalf("a1 retries in %v, want the 10m the broker said (the backoff says 1h)", wait)
	}
	if st := r.State(); !st.BrokerDown || st.PausedUntil.Sub(u.clock.Now()) > 11*time.Minute || st.PausedUntil.Sub(u.clock.Now()) < 9*time.Minute {
		t.Fatalf("state %+v: want the relay paused for the broker's 10m", st)
	}
	if pending[0].Record.Attempts != 0 {
		t.Fatalf("an outage counted an attempt: %+v", pending[0])
	}
	// Once the broker's 10 minutes have passed (on the test's clock), the
	// relay claims again and a1 goes out.
	pub.down.Store(false)
	u.advance(10*time.Minute + time.Second)
	u.eventually(func() bool { return u.published(a1) }, "a1 not published after the broker's wait; state %+v", testenv.Lazy(func() any { return r.State() }))
}
