package inbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/inbox"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/store"
)

// poisoned is a handler that records, per key, the order in which it
// applied messages, and fails, as malformed, on the messages it is told
// to fail on until it is fixed. The order is read from the effects its
// committed runs inserted: a run whose transaction rolled back (its
// group's, when another message of the group failed) applied nothing.
type poisoned[TTx any] struct {
	db *database[TTx]

	mu    sync.Mutex
	fail  map[uuid.UUID]bool
	keyOf map[uuid.UUID]string // the key of each message run
}

func newPoisoned[TTx any](db *database[TTx], fail ...courier.Message) *poisoned[TTx] {
	p := &poisoned[TTx]{db: db, fail: map[uuid.UUID]bool{}, keyOf: map[uuid.UUID]string{}}
	for _, m := range fail {
		p.fail[m.ID] = true
	}
	return p
}

// fix makes the handler apply ms.
func (p *poisoned[TTx]) fix(ms ...courier.Message) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range ms {
		delete(p.fail, m.ID)
	}
}

func (p *poisoned[TTx]) handle(ctx context.Context, tx TTx, msg courier.Message) error {
	p.mu.Lock()
	fail := p.fail[msg.ID]
	p.keyOf[msg.ID] = msg.Key
	p.mu.Unlock()
	if fail {
		return fmt.Errorf("%w: poisoned message %s", courier.ErrMalformed, msg.ID)
	}
	return p.db.insertEffect(ctx, tx, "ledger", msg)
}

// order returns the ids the handler applied of key, in the order their
// effects committed.
func (p *poisoned[TTx]) order(key string) []uuid.UUID {
	rows, err := p.db.sql.QueryContext(context.Background(), "SELECT message_id FROM effects WHERE consumer = 'ledger' ORDER BY seq")
	if err != nil {
		panic(err)
	}
	defer rows.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []uuid.UUID
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			panic(err)
		}
		if id := uuid.MustParse(s); p.keyOf[id] == key {
			out = append(out, id)
		}
	}
	if err := rows.Err(); err != nil {
		panic(err)
	}
	return out
}

// ids returns the ids of ms.
func ids(ms ...courier.Message) []uuid.UUID {
	out := make([]uuid.UUID, len(ms))
	for i, m := range ms {
		out[i] = m.ID
	}
	return out
}

// holdScene is the messages of a test of held keys: keys keys of three
// messages each, on topic "ledger", and the poisoned key's messages: m[0]
// applies, m[1] is parked (the cause), m[2] and m[3] are held behind it.
type holdScene struct {
	others []courier.Message
	m      []courier.Message
}

const poisonKey = "acct-poisoned"

// newHoldScene publishes keys-1 other keys' messages around the poisoned
// key's, which come in the middle.
func newHoldScene(keys int) holdScene {
	var s holdScene
	for i := range 4 {
		s.m = append(s.m, courier.NewMessage("ledger", poisonKey, "Credit", fmt.Appendf(nil, "poisoned %d", i)))
	}
	for k := range keys - 1 {
		for i := range 3 {
			s.others = append(s.others, courier.NewMessage("ledger", fmt.Sprintf("acct-%d", k), "Credit", fmt.Appendf(nil, "%d", i)))
		}
	}
	return s
}

// all returns the scene's messages in publishing order: half the other
// keys', the poisoned key's, the rest.
func (s holdScene) all() []courier.Message {
	half := len(s.others) / 2
	out := slices.Clone(s.others[:half])
	out = append(out, s.m...)
	return append(out, s.others[half:]...)
}

// holdConfig is the config of a consumer that holds the keys of "ledger".
func holdConfig() inbox.ConsumerConfig {
	return inbox.ConsumerConfig{KeepOrder: true, HoldKeys: []string{"ledger"}, Concurrency: 8}
}

// parkScene publishes s and waits until the consumer c applied every
// other message and parked the poisoned key's last three, the first as
// the cause and the others behind it; it returns the cause.
func parkScene[TTx any](t *testing.T, e *env[TTx], c func() inbox.ConsumerMetrics, s holdScene) store.Parked {
	t.Helper()
	testenv.WhileProgressing(t, 30*time.Second, func() (bool, any) {
		m := c()
		// A delivery the broker brings again (its ack came after the ack
		// wait) counts again, but is not parked twice.
		return m.Applied == int64(len(s.others)+1) && m.Parked >= 3 && m.Held >= 2, m
	}, "the scene was not applied and parked")
	return checkHeld(t, e, s.m[1], s.m[2:]...)
}

// checkHeld checks that cause is parked and holds its key, and that held
// are parked behind it, in order, and returns the cause.
func checkHeld[TTx any](t *testing.T, e *env[TTx], cause courier.Message, held ...courier.Message) store.Parked {
	t.Helper()
	ps := e.parked("ledger")
	if len(ps) != 1+len(held) {
		t.Fatalf("%d parked, want %d: %+v", len(ps), 1+len(held), ps)
	}
	c := ps[0]
	if c.MessageID != cause.ID.String() || c.Key != poisonKey || c.Behind != 0 {
		t.Fatalf("cause parked as %+v, want message %s of key %s behind nothing", c, cause.ID, poisonKey)
	}
	for i, h := range held {
		p := ps[1+i]
		if p.MessageID != h.ID.String() || p.Reason != store.ReasonHeld || p.Behind != c.ID || p.Key != poisonKey {
			t.Fatalf("held message %d parked as %+v, want %s, reason %s behind %d", i, p, h.ID, store.ReasonHeld, c.ID)
		}
	}
	if n := e.db.count(t, "SELECT count(*) FROM courier_inbox_holds WHERE consumer = ? AND cause = ?", "ledger", c.ID); n != 1 {
		t.Fatalf("%d holds by the cause %d, want 1", n, c.ID)
	}
	return c
}

// checkReleased waits until the poisoned key's messages want were applied
// and nothing is parked nor held, then checks that each message of the
// scene was applied once, and the poisoned key's in the order of want.
func checkReleased[TTx any](t *testing.T, e *env[TTx], h *poisoned[TTx], s holdScene, want []courier.Message, gone ...courier.Message) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, func() bool {
		return len(h.order(poisonKey)) >= len(want) && len(e.parked("ledger")) == 0
	}, "the held key was not released: applied %d of %d, parked %v", testenv.Lazy(func() any { return len(h.order(poisonKey)) }), len(want),
		testenv.Lazy(func() any { return e.parked("ledger") }))
	if got := h.order(poisonKey); !slices.Equal(got, ids(want...)) {
		t.Fatalf("the held key's messages applied in the order %v, want %v", got, ids(want...))
	}
	if n := e.db.count(t, "SELECT count(*) FROM courier_inbox_holds"); n != 0 {
		t.Fatalf("%d holds left after the release", n)
	}
	for _, m := range append(slices.Clone(s.others), want...) {
		if n := e.effects(m); n != 1 {
			t.Fatalf("message %s of key %s applied %d times, want once", m.ID, m.Key, n)
		}
	}
	for _, m := range gone {
		if n := e.effects(m); n != 0 {
			t.Fatalf("discarded message %s applied %d times", m.ID, n)
		}
	}
}

func TestHeldKeyReplayedInOrder(t *testing.T) {
	for _, keys := range []int{1, 10, 1000} {
		t.Run(fmt.Sprint(keys, "keys"), func(t *testing.T) {
			if keys == 1000 && testing.Short() {
				t.Skip("short")
			}
			onEachDialect(t, func(t *testing.T, d dialect[pgx.Tx]) { testHeldKeyReplayedInOrder(t, d, keys) },
				func(t *testing.T, d dialect[*sql.Tx]) { testHeldKeyReplayedInOrder(t, d, keys) })
		})
	}
}

// testHeldKeyReplayedInOrder: the poisoned key's later messages are parked
// behind its parked one while other keys are applied; replaying the cause
// applies it and them in order, along with those that come meanwhile
// (parked behind it while the hold is passed on), and releases the key.
func testHeldKeyReplayedInOrder[TTx any](t *testing.T, d dialect[TTx], keys int) {
	e := newEnv(t, d)
	s := newHoldScene(keys)
	h := newPoisoned(e.db, s.m[1])
	e.publish(s.all()...)
	c := e.run("ledger", h.handle, holdConfig())
	cause := parkScene(t, e, c.Metrics, s)
	if got := h.order(poisonKey); !slices.Equal(got, ids(s.m[0])) {
		t.Fatalf("the poisoned key applied %v before its replay, want only its first message", got)
	}

	// Replay, while more messages of the key come: they are parked behind
	// the hold as it is passed on, or applied once it is released, in
	// order either way.
	h.fix(s.m[1])
	testenv.Must(t, e.db.admin.RequestReplay(context.Background(), cause.ID), "replay")
	var later []courier.Message
	for i := range 20 {
		m := courier.NewMessage("ledger", poisonKey, "Credit", fmt.Appendf(nil, "later %d", i))
		later = append(later, m)
		e.publish(m)
	}
	checkReleased(t, e, h, s, append(slices.Clone(s.m), later...))
	if m := c.Metrics(); m.Replayed < 3 {
		t.Fatalf("metrics %+v: want at least the cause and its 2 held messages replayed", m)
	}
}

func TestHeldKeyDiscarded(t *testing.T) {
	onEachDialect(t, testHeldKeyDiscarded, testHeldKeyDiscarded)
}

// testHeldKeyDiscarded: discarding the cause applies the messages held
// behind it, in order, and releases the key.
func testHeldKeyDiscarded[TTx any](t *testing.T, d dialect[TTx]) {
	e := newEnv(t, d)
	s := newHoldScene(10)
	h := newPoisoned(e.db, s.m[1])
	e.publish(s.all()...)
	c := e.run("ledger", h.handle, holdConfig())
	cause := parkScene(t, e, c.Metrics, s)
	testenv.Must(t, e.db.admin.DiscardParked(context.Background(), cause.ID), "discard")
	checkReleased(t, e, h, s, []courier.Message{s.m[0], s.m[2], s.m[3]}, s.m[1])
}

func TestHeldMessageFailingOnReplayHoldsTheKey(t *testing.T) {
	onEachDialect(t, testHeldMessageFailingOnReplayHoldsTheKey, testHeldMessageFailingOnReplayHoldsTheKey)
}

// testHeldMessageFailingOnReplayHoldsTheKey: a held message that fails on
// replay holds the key in turn; asking to replay one held behind it
// replays it (the cause) first.
func testHeldMessageFailingOnReplayHoldsTheKey[TTx any](t *testing.T, d dialect[TTx]) {
	e := newEnv(t, d)
	s := newHoldScene(10)
	h := newPoisoned(e.db, s.m[1], s.m[2])
	e.publish(s.all()...)
	c := e.run("ledger", h.handle, holdConfig())
	cause := parkScene(t, e, c.Metrics, s)

	h.fix(s.m[1])
	testenv.Must(t, e.db.admin.RequestReplay(context.Background(), cause.ID), "replay")
	testenv.Eventually(t, 30*time.Second, func() bool {
		ps := e.parked("ledger")
		return len(ps) == 2 && ps[0].ReplayRequested == nil && ps[0].Attempts > 0
	}, "the held message's failed replay did not make it the cause: %v", testenv.Lazy(func() any { return e.parked("ledger") }))
	checkHeld(t, e, s.m[2], s.m[3])
	if got := h.order(poisonKey); !slices.Equal(got, ids(s.m[0], s.m[1])) {
		t.Fatalf("applied %v, want the first two", got)
	}

	// Asking for the replay of the message held behind the new cause
	// replays the cause first.
	h.fix(s.m[2])
	ps := e.parked("ledger")
	testenv.Must(t, e.db.admin.RequestReplay(context.Background(), ps[1].ID), "replay held")
	checkReleased(t, e, h, s, s.m)
}

func TestHoldKeysConfig(t *testing.T) {
	for _, c := range []struct {
		cfg  inbox.ConsumerConfig
		want string
	}{
		{inbox.ConsumerConfig{HoldKeys: []string{"ledger"}}, "inbox: ConsumerConfig.HoldKeys needs KeepOrder"},
		{inbox.ConsumerConfig{KeepOrder: true, HoldKeys: []string{"ledger", ""}}, "inbox: ConsumerConfig.HoldKeys[1] is empty"},
		{inbox.ConsumerConfig{KeepOrder: true, HoldKeys: []string{"*", "ledger"}}, `inbox: ConsumerConfig.HoldKeys holds "*" and other topics`},
		{inbox.ConsumerConfig{KeepOrder: true, HoldKeys: []string{"a", "a"}}, `inbox: ConsumerConfig.HoldKeys names topic "a" twice`},
	} {
		if err := c.cfg.Validate(); err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q…", c.cfg.HoldKeys, err, c.want)
		}
	}
	for _, ok := range [][]string{nil, {"*"}, {"ledger", "payments"}} {
		if err := (inbox.ConsumerConfig{KeepOrder: true, HoldKeys: ok}).Validate(); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
}

func TestHoldKeysNeedAStoreThatHoldsKeys(t *testing.T) {
	db := sqliteDialect().open(t)
	ib, err := inbox.New(db.inbox, "ledger")
	testenv.Must(t, err, "inbox")
	_, err = inbox.NewConsumer(ib, noSubscriber{}, plainStore{db.cs}, func(context.Context, *sql.Tx, courier.Message) error { return nil }, holdConfig())
	if err == nil || !strings.Contains(err.Error(), "ConsumerConfig.HoldKeys needs a consumer store that holds keys") {
		t.Fatalf("a store without holds: %v", err)
	}
	if _, err := inbox.NewConsumer(ib, noSubscriber{}, db.cs, func(context.Context, *sql.Tx, courier.Message) error { return nil }, holdConfig()); err != nil {
		t.Fatalf("the dialect's store: %v", err)
	}
}

// plainStore hides its store's holds.
type plainStore struct{ store.ConsumerStore }

func TestParkingBehindRacesTheRelease(t *testing.T) {
	onEachDialect(t, testParkingBehindRacesTheRelease, testParkingBehindRacesTheRelease)
}

// testParkingBehindRacesTheRelease parks deliveries behind a hold from
// several goroutines while another passes the hold on until it releases
// the key: each delivery is either parked behind the hold and passed on
// in turn, or told that the key is not held (and processed); none is
// left parked behind a hold that was released.
func testParkingBehindRacesTheRelease[TTx any](t *testing.T, d dialect[TTx]) {
	db := d.open(t)
	kh, ok := db.cs.(store.KeyHolds)
	if !ok {
		t.Fatalf("%T does not hold keys", db.cs)
	}
	ctx := context.Background()
	const parkers, each = 4, 25
	for round := range 10 {
		key := fmt.Sprintf("acct-%d", round)
		p := store.Parked{Consumer: "ledger", Subject: "ledger", Payload: []byte("x"), Reason: store.ReasonFailed, Error: "failed", Attempts: 1, Key: key}
		cause, ok, err := kh.ParkHolding(ctx, p, false)
		testenv.Must(t, err, "park the cause")
		if !ok || cause.ID == 0 || cause.Behind != 0 || cause.Reason != store.ReasonFailed {
			t.Fatalf("cause parked as %+v (ok %v)", cause, ok)
		}
		var (
			mu     sync.Mutex
			behind []int64 // parked behind the hold
			wg     sync.WaitGroup
		)
		for range parkers {
			wg.Go(func() {
				for range each {
					held, ok, err := kh.ParkHolding(ctx, store.Parked{Consumer: "ledger", Subject: "ledger", Payload: []byte("x"), Key: key}, true)
					if err != nil {
						t.Error(err)
						return
					}
					if !ok {
						return // released: the delivery is processed
					}
					if held.Reason != store.ReasonHeld || held.Behind == 0 {
						t.Errorf("parked behind the hold as %+v", held)
					}
					mu.Lock()
					behind = append(behind, held.ID)
					mu.Unlock()
				}
			})
		}
		var passed []int64
		for id := cause.ID; id != 0; {
			passed = append(passed, id)
			next, err := kh.PassHold(ctx, "ledger", key, id)
			testenv.Must(t, err, "pass the hold on")
			id = next
		}
		wg.Wait()
		slices.Sort(behind)
		if want := append([]int64{cause.ID}, behind...); !slices.Equal(passed, want) {
			t.Fatalf("round %d: the hold passed through %v, want the cause then every delivery parked behind it in order, %v", round, passed, want)
		}
		if n := db.count(t, "SELECT count(*) FROM courier_inbox_dead_letters"); n != 0 {
			t.Fatalf("round %d: %d deliveries left parked after the release", round, n)
		}
		if n := db.count(t, "SELECT count(*) FROM courier_inbox_holds"); n != 0 {
			t.Fatalf("round %d: %d holds left after the release", round, n)
		}
	}
}

const envChildDieAt = "COURIER_TEST_INBOX_DIE_AT" // the parked id whose PassHold kills the child

// TestReplayingChildProcess is not a test: it is the consumer process that
// TestKilledMidReplay starts. It replays the held key and kills itself
// when it passes the hold on from the parked delivery envChildDieAt names:
// after that one's replay committed, before it was unparked.
func TestReplayingChildProcess(t *testing.T) {
	if os.Getenv(envChild) != "1" || os.Getenv(envChildDieAt) == "" {
		return
	}
	pg, std := childDialect(os.Getenv(envChildTx))
	if pg.connect != nil {
		replayAndDie(t, pg)
	} else {
		replayAndDie(t, std)
	}
}

func replayAndDie[TTx any](t *testing.T, d dialect[TTx]) {
	db, sub, ib := childConsumer(t, d)
	dieAt, err := strconv.ParseInt(os.Getenv(envChildDieAt), 10, 64)
	if err != nil {
		panic(err)
	}
	cs := dieAtPass{db.cs, db.cs.(store.KeyHolds), dieAt}
	cfg := holdConfig()
	cfg.ReplayEvery = 20 * time.Millisecond
	c, err := inbox.NewConsumer(ib, sub, cs, recordEffect(db, "ledger"), cfg)
	if err != nil {
		panic(err)
	}
	_ = c.Run(context.Background()) // never returns: passing the hold on from dieAt kills the process
}

// dieAtPass kills the process when the hold is passed on from the parked
// delivery dieAt.
type dieAtPass struct {
	store.ConsumerStore
	store.KeyHolds
	dieAt int64
}

func (s dieAtPass) PassHold(ctx context.Context, consumer, key string, id int64) (int64, error) {
	if id == s.dieAt {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
	return s.KeyHolds.PassHold(ctx, consumer, key, id)
}

func TestKilledMidReplay(t *testing.T) {
	onEachDialect(t, testKilledMidReplay, testKilledMidReplay)
}

// testKilledMidReplay: a consumer killed while it replays a held key, its
// second message applied but not unparked, loses nothing and applies
// nothing twice: the next run finds that message applied (a duplicate),
// passes the hold on and applies the rest.
func testKilledMidReplay[TTx any](t *testing.T, d dialect[TTx]) {
	e := newEnv(t, d)
	s := newHoldScene(3)
	h := newPoisoned(e.db, s.m[1])
	e.publish(s.all()...)
	c, stop := e.start("ledger", h.handle, holdConfig())
	cause := parkScene(t, e, c.Metrics, s)
	stop()
	dieAt := e.parked("ledger")[1].ID // s.m[2]'s
	testenv.Must(t, e.db.admin.RequestReplay(context.Background(), cause.ID), "replay")

	cmd := exec.Command(os.Args[0], "-test.run=^TestReplayingChildProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), envChild+"=1", envChildTx+"="+txType[TTx](), envChildURL+"="+e.db.url, envChildNATS+"="+e.natsURL,
		envChildPrefix+"="+e.mapping.SubjectPrefix, envChildStream+"="+e.stream, envChildDieAt+"="+strconv.FormatInt(dieAt, 10))
	cmd.Stderr = os.Stderr
	testenv.Must(t, cmd.Start(), "start consumer")
	err := cmd.Wait()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("consumer did not die mid-replay: %v", err)
	}
	for i, want := range []int{1, 1, 1, 0} {
		if n := e.effects(s.m[i]); n != want {
			t.Fatalf("message %d applied %d times before the restart, want %d", i, n, want)
		}
	}
	checkHeld(t, e, s.m[2], s.m[3])

	h2 := newPoisoned(e.db)
	c2 := e.run("ledger", h2.handle, holdConfig())
	testenv.Eventually(t, 30*time.Second, func() bool { return len(e.parked("ledger")) == 0 },
		"the replay did not finish after the restart: %v", testenv.Lazy(func() any { return e.parked("ledger") }))
	if got := h2.order(poisonKey); !slices.Equal(got, ids(s.m[3])) {
		t.Fatalf("the restarted consumer applied %v, want only the last held message", got)
	}
	for i := range s.m {
		if n := e.effects(s.m[i]); n != 1 {
			t.Fatalf("message %d applied %d times, want once", i, n)
		}
	}
	if n := e.db.count(t, "SELECT count(*) FROM courier_inbox_holds"); n != 0 {
		t.Fatalf("%d holds left", n)
	}
	if m := c2.Metrics(); m.Replayed != 1 {
		t.Fatalf("restarted consumer's metrics %+v: want 1 replayed (the other a duplicate)", m)
	}
}

func TestRedeliveredHeldMessageIsNotParkedTwice(t *testing.T) {
	onEachDialect(t, testRedeliveredHeldMessageIsNotParkedTwice, testRedeliveredHeldMessageIsNotParkedTwice)
}

// testRedeliveredHeldMessageIsNotParkedTwice: a delivery of a message
// parked already behind the hold, or as its cause, is not parked again.
func testRedeliveredHeldMessageIsNotParkedTwice[TTx any](t *testing.T, d dialect[TTx]) {
	db := d.open(t)
	kh := db.cs.(store.KeyHolds)
	ctx := context.Background()
	parked := func(id string, behindOnly bool) store.Parked {
		t.Helper()
		p, ok, err := kh.ParkHolding(ctx, store.Parked{Consumer: "ledger", MessageID: id, Subject: "ledger", Payload: []byte("x"),
			Reason: store.ReasonFailed, Key: "acct-1"}, behindOnly)
		testenv.Must(t, err, "park "+id)
		if !ok {
			t.Fatalf("%s not parked", id)
		}
		return p
	}
	cause := parked("a", false)
	b := parked("b", true)
	if again := parked("b", true); again.ID != b.ID || again.Behind != cause.ID {
		t.Fatalf("b parked again as %+v, want %d behind %d", again, b.ID, cause.ID)
	}
	if again := parked("a", true); again.ID != cause.ID {
		t.Fatalf("the cause parked again as %+v, want %d", again, cause.ID)
	}
	if c := parked("c", true); c.ID == b.ID || c.Behind != cause.ID {
		t.Fatalf("c parked as %+v", c)
	}
	if n := db.count(t, "SELECT count(*) FROM courier_inbox_dead_letters"); n != 3 {
		t.Fatalf("%d parked, want a, b and c once each", n)
	}
}

// countingHolds counts the reads of the holds of keys.
type countingHolds struct {
	store.ConsumerStore
	store.KeyHolds
	mu    sync.Mutex
	reads map[string]int // by key
}

func (s *countingHolds) HoldOf(ctx context.Context, consumer, key string) (int64, error) {
	s.mu.Lock()
	s.reads[key]++
	s.mu.Unlock()
	return s.KeyHolds.HoldOf(ctx, consumer, key)
}

func (s *countingHolds) readsOf(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reads[key]
}

func TestOnlyTheNamedTopicsHoldKeys(t *testing.T) {
	onEachDialect(t, testOnlyTheNamedTopicsHoldKeys, testOnlyTheNamedTopicsHoldKeys)
}

// testOnlyTheNamedTopicsHoldKeys: a parked message of a topic HoldKeys
// does not name holds nothing, and its topic's deliveries read no hold;
// with "*" every topic holds its keys.
func testOnlyTheNamedTopicsHoldKeys[TTx any](t *testing.T, d dialect[TTx]) {
	for _, hold := range [][]string{{"ledger"}, {"*"}} {
		t.Run(hold[0], func(t *testing.T) {
			e := newEnv(t, d)
			var audit []courier.Message
			for i := range 3 {
				audit = append(audit, courier.NewMessage("audit", "acct-audited", "Noted", fmt.Appendf(nil, "%d", i)))
			}
			s := newHoldScene(1)
			h := newPoisoned(e.db, s.m[1], audit[0])
			e.publish(append(audit, s.m...)...)
			counted := &countingHolds{ConsumerStore: e.db.cs, KeyHolds: e.db.cs.(store.KeyHolds), reads: map[string]int{}}
			ib, err := inbox.New(e.db.inbox, "ledger")
			testenv.Must(t, err, "inbox")
			cfg := holdConfig()
			cfg.HoldKeys = hold
			cfg.Backoff = courier.Backoff{Initial: 20 * time.Millisecond, Max: 100 * time.Millisecond}
			c, err := inbox.NewConsumer(ib, e.subscriber("ledger"), counted, h.handle, cfg)
			testenv.Must(t, err, "consumer")
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { defer close(done); _ = c.Run(ctx) }()
			t.Cleanup(func() { cancel(); <-done })

			if hold[0] == "*" {
				testenv.WhileProgressing(t, 30*time.Second, func() (bool, any) { m := c.Metrics(); return m.Parked >= 6 && m.Held >= 4, m }, "not parked")
				if got := h.order("acct-audited"); len(got) != 0 {
					t.Fatalf("audit applied %v behind its parked message", got)
				}
				if n := e.db.count(t, "SELECT count(*) FROM courier_inbox_holds"); n != 2 {
					t.Fatalf("%d holds, want one per poisoned key", n)
				}
				return
			}
			testenv.WhileProgressing(t, 30*time.Second, func() (bool, any) {
				m := c.Metrics()
				return m.Parked >= 4 && m.Held >= 2 && m.Applied == 3, m
			}, "not applied and parked")
			if got := h.order("acct-audited"); !slices.Equal(got, ids(audit[1:]...)) {
				t.Fatalf("audit applied %v, want its messages after the parked one: its topic holds no key", got)
			}
			byID := map[string]store.Parked{}
			for _, p := range e.parked("ledger") {
				byID[p.MessageID] = p
			}
			if p := byID[audit[0].ID.String()]; len(byID) != 4 || p.Key != "" || p.Behind != 0 || p.Reason != store.ReasonMalformed {
				t.Fatalf("audit's message parked as %+v (of %d), want it parked holding nothing", p, len(byID))
			}
			if n := counted.readsOf("acct-audited"); n != 0 {
				t.Fatalf("audit's deliveries read the holds %d times, want none", n)
			}
			if n := counted.readsOf(poisonKey); n < len(s.m) {
				t.Fatalf("ledger's deliveries read the holds %d times, want one per delivery (%d)", n, len(s.m))
			}
			cause := byID[s.m[1].ID.String()]
			for _, m := range s.m[2:] {
				if p := byID[m.ID.String()]; cause.Key != poisonKey || cause.Behind != 0 || p.Behind != cause.ID {
					t.Fatalf("ledger's %s parked as %+v behind %+v: want it held behind ledger's cause", m.ID, p, cause)
				}
			}
		})
	}
}

// A message applied before its key was held that comes again (the broker
// redelivers it: its ack came after the ack wait) is skipped as a
// duplicate, not parked behind the key's cause.
func TestHeldKeyRedeliveryOfAnAppliedMessage(t *testing.T) {
	onEachDialect(t, testHeldKeyRedeliveryOfAnAppliedMessage[pgx.Tx], testHeldKeyRedeliveryOfAnAppliedMessage[*sql.Tx])
}

func testHeldKeyRedeliveryOfAnAppliedMessage[TTx any](t *testing.T, d dialect[TTx]) {
	e := newEnv(t, d)
	s := newHoldScene(1)
	h := newPoisoned(e.db, s.m[1])
	e.publish(s.all()...)
	c := e.run("ledger", h.handle, holdConfig())
	parkScene(t, e, c.Metrics, s)
	before := c.Metrics()
	e.publishAgain(t, 1, s.m[0])
	testenv.Eventually(t, 15*time.Second, func() bool { return c.Metrics().Duplicates > before.Duplicates },
		"the applied message that came again was not skipped: %v", testenv.Lazy(func() any { return c.Metrics() }))
	if m := c.Metrics(); m.Parked != before.Parked || m.Held != before.Held {
		t.Fatalf("metrics %+v after %+v: the applied message was parked", m, before)
	}
	for _, p := range e.parked("ledger") {
		if p.MessageID == s.m[0].ID.String() {
			t.Fatalf("the applied message was parked: %+v", p)
		}
	}
	if n := e.effects(s.m[0]); n != 1 {
		t.Fatalf("the applied message's effect committed %d times, want once", n)
	}
}
