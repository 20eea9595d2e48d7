package storetest

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/store"
)

// ops returns the harness's Operations, skipping the test without.
func (db *relayDB[TTx]) ops(t *testing.T) store.Operations {
	t.Helper()
	if db.Operations == nil {
		t.Skip("the harness has no Operations")
	}
	return db.Operations()
}

// opsStatus returns ops' Status and fails the test on an error.
func opsStatus(t *testing.T, ops store.Operations) store.Status {
	t.Helper()
	st, err := ops.Status(context.Background())
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	return st
}

func topicOf(st store.Status, name string) store.TopicStatus {
	for _, ts := range st.Topics {
		if ts.Topic == name {
			return ts
		}
	}
	return store.TopicStatus{Topic: name}
}

func relayOf(st store.Status, owner string) store.RelayStatus {
	for _, r := range st.Relays {
		if r.Owner == owner {
			return r
		}
	}
	return store.RelayStatus{Owner: owner}
}

// The outbox's part of Operations: Status per topic and per relay,
// Reconcile's ended leases and retried rows, ReleaseLease, Trim of the
// published copies and the dead letters, and TryLock.
func testOperationsOutbox[TTx any](t *testing.T, db *relayDB[TTx]) {
	ops := db.ops(t)
	t0 := db.stopClock()
	if st := opsStatus(t, ops); len(st.Topics) != 0 || len(st.Relays) != 0 || st.Outbox.Pending != 0 || !st.Now.Equal(t0) {
		t.Fatalf("status of an empty outbox: %+v; want nothing, at the store's clock %s", st, t0)
	}
	rs := db.newStore(t, true)
	a, b := leaseForOperations(t, db, rs)
	checkOutboxStatus(t, ops, t0)
	reconcileOutbox(t, db, ops, rs, t0, a, b)
	trimOutbox(t, ops, t0)
	checkTryLock(t, ops, db.SerialWrites)
	checkBeat(t, db, ops)
}

// checkBeat checks the heartbeats of relay processes: each Beat lists the
// owners alive by the store's clock, one expires ttl after its last beat,
// not a microsecond before, and Leave removes one at once.
func checkBeat[TTx any](t *testing.T, db *relayDB[TTx], ops store.Operations) {
	ctx := context.Background()
	beat := func(owner string, ttl time.Duration, want ...string) {
		t.Helper()
		got, err := ops.Beat(ctx, owner, ttl)
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("Beat(%s): %v, %v; want %v", owner, got, err, want)
		}
	}
	beat("relay-b", 10*time.Second, "relay-b")
	beat("relay-a", 20*time.Second, "relay-a", "relay-b")
	db.clock.Advance(10*time.Second - time.Microsecond)
	beat("relay-c", time.Minute, "relay-a", "relay-b", "relay-c")
	db.clock.Advance(time.Microsecond) // relay-b's beat has expired
	beat("relay-a", 20*time.Second, "relay-a", "relay-c")
	beat("relay-b", 10*time.Second, "relay-a", "relay-b", "relay-c") // it comes back
	if err := ops.Leave(ctx, "relay-c"); err != nil {
		t.Fatalf("Leave: %v", err)
	}
	beat("relay-a", 20*time.Second, "relay-a", "relay-b")
	for _, o := range []string{"relay-a", "relay-b"} {
		if err := ops.Leave(ctx, o); err != nil {
			t.Fatalf("Leave(%s): %v", o, err)
		}
	}
}

// leaseForOperations writes five rows of three topics and leaves them
// leased by three relays: relay-a holds k1 for 30 s, relay-b completed k2
// (retry in a minute), k3 (dead letter) and k4 (published), relay-c holds
// k5 for an hour. It returns relay-a's and relay-b's batches.
func leaseForOperations[TTx any](t *testing.T, db *relayDB[TTx], rs store.RelayStore) (a, b store.Batch) {
	db.write(t, courier.NewMessage("orders", "k1", "T", []byte("1")), courier.NewMessage("orders", "k2", "T", []byte("2")),
		courier.NewMessage("payments", "k3", "T", []byte("3")), courier.NewMessage("orders", "k4", "T", []byte("4")),
		courier.NewMessage("audit", "k5", "T", []byte("5")))
	a = claim(t, rs, "relay-a", 1, 30*time.Second) // k1
	b = claim(t, rs, "relay-b", 3, time.Minute)    // k2, k3, k4
	if len(a.Records) != 1 || len(b.Records) != 3 {
		t.Fatalf("claimed %d and %d rows, want 1 and 3", len(a.Records), len(b.Records))
	}
	complete(t, rs, "relay-b", b, store.Outcome{
		Retry:     []store.Failure{{Seq: b.Records[0].Seq, Error: "nack", Delay: time.Minute, Counted: true}},
		Dead:      []store.Failure{{Seq: b.Records[1].Seq, Error: "too big", Counted: true}},
		Published: []int64{b.Records[2].Seq},
	})
	c := claim(t, rs, "relay-c", 1, time.Hour) // k5
	if len(c.Records) != 1 {
		t.Fatalf("relay-c claimed %d rows, want 1", len(c.Records))
	}
	return a, b
}

// checkOutboxStatus checks Status per topic and per relay after
// leaseForOperations, at t0.
func checkOutboxStatus(t *testing.T, ops store.Operations, t0 time.Time) {
	st := opsStatus(t, ops)
	if o := topicOf(st, "orders"); o.Pending != 2 || o.Leased != 1 || o.InBackoff != 1 || o.DeadLetters != 0 || o.OldestPending.IsZero() {
		t.Fatalf("orders: %+v; want 2 pending, 1 leased, 1 in backoff, an oldest row", o)
	}
	if p := topicOf(st, "payments"); p.Pending != 0 || p.DeadLetters != 1 || !p.OldestPending.IsZero() {
		t.Fatalf("payments: %+v; want 1 dead letter and nothing pending", p)
	}
	if st.Outbox.Pending != 3 || st.Outbox.Leased != 2 || st.Outbox.InBackoff != 1 || st.Outbox.DeadLetters != 1 {
		t.Fatalf("outbox totals: %+v; want 3 pending, 2 leased, 1 in backoff, 1 dead letter", st.Outbox)
	}
	if r := relayOf(st, "relay-a"); r.Leases != 1 || r.Rows != 1 || r.Expired != 0 || !r.Until.Equal(t0.Add(30*time.Second)) {
		t.Fatalf("relay-a: %+v; want one live lease of one row until %s", r, t0.Add(30*time.Second))
	}
	if r := relayOf(st, "relay-b"); r.Leases != 0 {
		t.Fatalf("relay-b completed its lease, yet status shows %+v", r)
	}
	if st.Published.N != 1 {
		t.Fatalf("published copies: %+v, want 1", st.Published)
	}
}

// reconcileOutbox checks that Reconcile finds relay-a's lease (a) once it
// has ended and relay-b's retried row (b's first), with their thresholds,
// and that releasing the ended lease hands its row to the next claim.
func reconcileOutbox[TTx any](t *testing.T, db *relayDB[TTx], ops store.Operations, rs store.RelayStore, t0 time.Time, a, b store.Batch) {
	ctx := context.Background()
	r, err := ops.Reconcile(ctx, store.ReconcileOptions{})
	if err != nil || len(r.ExpiredLeases) != 0 || len(r.RetriedRows) != 0 {
		t.Fatalf("reconcile while leases are live: %+v, %v; want nothing", r, err)
	}
	if ok, err := ops.ReleaseLease(ctx, a.Lease); err != nil || ok {
		t.Fatalf("ReleaseLease of a live lease: %v, %v; want false", ok, err)
	}
	db.clock.Set(t0.Add(30 * time.Second))
	if st := opsStatus(t, ops); relayOf(st, "relay-a").Expired != 1 || topicOf(st, "orders").Leased != 0 {
		t.Fatalf("once relay-a's lease ended: %+v, orders %+v; want it expired, nothing leased", relayOf(st, "relay-a"), topicOf(st, "orders"))
	}
	r, err = ops.Reconcile(ctx, store.ReconcileOptions{RetryAttempts: 1})
	if err != nil || len(r.ExpiredLeases) != 1 || r.ExpiredLeases[0].ID != a.Lease || r.ExpiredLeases[0].Owner != "relay-a" ||
		r.ExpiredLeases[0].Rows != 1 || !r.ExpiredLeases[0].Until.Equal(t0.Add(30*time.Second)) {
		t.Fatalf("reconcile's expired leases: %+v, %v; want relay-a's lease %d", r.ExpiredLeases, err, a.Lease)
	}
	if len(r.RetriedRows) != 1 || r.RetriedRows[0].Seq != b.Records[0].Seq || r.RetriedRows[0].Attempts != 1 ||
		r.RetriedRows[0].LastError != "nack" || r.RetriedRows[0].Topic != "orders" || r.RetriedRows[0].Key != "k2" ||
		r.RetriedRows[0].MessageID != b.Records[0].Message.ID.String() {
		t.Fatalf("retried rows with 1 attempt: %+v; want row %d", r.RetriedRows, b.Records[0].Seq)
	}
	if r, err := ops.Reconcile(ctx, store.ReconcileOptions{RetryAttempts: 2, LeaseGrace: time.Second}); err != nil ||
		len(r.RetriedRows) != 0 || len(r.ExpiredLeases) != 0 {
		t.Fatalf("reconcile with 2 attempts and a second's grace: %+v, %v; want nothing", r, err)
	}
	if r, err := ops.Reconcile(ctx, store.ReconcileOptions{RetryAge: time.Nanosecond}); err != nil || len(r.RetriedRows) != 1 {
		t.Fatalf("retried rows older than 1ns: %+v, %v; want 1", r.RetriedRows, err)
	}
	if ok, err := ops.ReleaseLease(ctx, a.Lease); err != nil || !ok {
		t.Fatalf("ReleaseLease of an ended lease: %v, %v; want true", ok, err)
	}
	if ok, err := ops.ReleaseLease(ctx, a.Lease); err != nil || ok {
		t.Fatalf("ReleaseLease again: %v, %v; want false", ok, err)
	}
	if st := opsStatus(t, ops); relayOf(st, "relay-a").Leases != 0 {
		t.Fatalf("relay-a after its lease was released: %+v", relayOf(st, "relay-a"))
	}
	complete(t, rs, "relay-a", a, store.Outcome{Published: seqs(a.Records)}) // too late: ignored
	if again := claim(t, rs, "relay-d", 10, time.Minute); len(again.Records) != 1 || again.Records[0].Seq != a.Records[0].Seq {
		t.Fatalf("after the release, relay-d claimed %v; want relay-a's row %d", seqs(again.Records), a.Records[0].Seq)
	}
}

// trimOutbox checks Trim of the published copies and the dead letters:
// nothing is older than an hour before t0; everything is older than an
// hour after, deleted a batch at a time.
func trimOutbox(t *testing.T, ops store.Operations, t0 time.Time) {
	ctx := context.Background()
	for _, table := range []store.Table{store.TablePublished, store.TableDeadLetters} {
		if res, err := ops.Trim(ctx, store.Trim{Table: table, Before: t0.Add(-time.Hour)}); err != nil || res.Deleted != 0 {
			t.Fatalf("trim %s before an hour ago: %+v, %v; want nothing deleted", table, res, err)
		}
		if res, err := ops.Trim(ctx, store.Trim{Table: table, Before: t0.Add(time.Hour), Limit: 1}); err != nil || res.Deleted != 1 {
			t.Fatalf("trim %s: %+v, %v; want 1 deleted", table, res, err)
		}
	}
	if st := opsStatus(t, ops); st.Published.N != 0 || st.Outbox.DeadLetters != 0 {
		t.Fatalf("after the trims: %d published, %d dead letters; want none", st.Published.N, st.Outbox.DeadLetters)
	}
	if _, err := ops.Trim(ctx, store.Trim{Table: "nonsense", Before: t0}); !errors.Is(err, store.ErrUnknownTable) {
		t.Fatalf("trim of an unknown table: %v, want ErrUnknownTable", err)
	}
}

// checkTryLock checks that TryLock excludes a second holder (except where
// the database has one writer, serialWrites) until released.
func checkTryLock(t *testing.T, ops store.Operations, serialWrites bool) {
	ctx := context.Background()
	release, ok, err := ops.TryLock(ctx, "courier_test")
	if err != nil || !ok {
		t.Fatalf("TryLock: %v, %v", ok, err)
	}
	if _, ok2, err := ops.TryLock(ctx, "courier_test"); err != nil || (ok2 && !serialWrites) {
		t.Fatalf("TryLock while held: %v, %v; want false (SQLite: true)", ok2, err)
	}
	release()
	release2, ok, err := ops.TryLock(ctx, "courier_test")
	if err != nil || !ok {
		t.Fatalf("TryLock after release: %v, %v", ok, err)
	}
	release2()
}

// The parts of Operations beyond the outbox: consumers (parked deliveries,
// failed runs, markers), sagas (counts, overdue ones), idempotency keys
// (in flight, completed, stale and released), and Trim of each table.
func testOperations[TTx any](t *testing.T, h opener[TTx]) {
	db := open(t, h, true)
	f := &opsFixture[TTx]{t: t, db: db, ops: db.Operations(), t0: db.stopClock()}
	f.past = f.t0.Add(-time.Minute)
	st := opsStatus(t, f.ops)
	if len(st.Consumers) != 0 || len(st.Sagas) != 0 || len(st.OverdueSagas) != 0 || st.Keys.InFlight != 0 ||
		st.Keys.Completed.N != 0 || st.InboxMarkers.N != 0 || st.Published.N != 0 {
		t.Fatalf("status of an empty database: %+v", st)
	}
	f.seedConsumers()
	f.seedSagas()
	f.seedKeys()
	f.checkStatus()
	f.reconcile()
	f.trim()
}

// opsFixture is testOperations' database, its Operations, the clock's
// time when the test began (t0) and the deadline of the overdue saga
// (past).
type opsFixture[TTx any] struct {
	t        *testing.T
	db       *testDB[TTx]
	ops      store.Operations
	t0, past time.Time
}

// opsLockFor is how long testOperations' keys are locked.
const opsLockFor = 10 * time.Second

// seedConsumers parks two deliveries of billing (one to replay) and one of
// shipping, records two failures of one message of inventory an hour ago,
// and marks a message consumed by billing and one by shipping.
func (f *opsFixture[TTx]) seedConsumers() {
	t, ctx, db := f.t, context.Background(), f.db
	cs := db.ConsumerStore()
	for _, p := range []store.Parked{
		{Consumer: "billing", MessageID: uuid.NewString(), Subject: "s", Payload: []byte("x"), Reason: store.ReasonFailed, Error: "e", Attempts: 3},
		{Consumer: "billing", MessageID: uuid.NewString(), Subject: "s", Payload: []byte("y"), Reason: store.ReasonMalformed, Error: "e", Attempts: 1},
		{Consumer: "shipping", MessageID: uuid.NewString(), Subject: "s", Payload: []byte("z"), Reason: store.ReasonFailed, Error: "e", Attempts: 3},
	} {
		must(t, cs.Park(ctx, p), "park")
	}
	parked, err := db.Admin().Parked(ctx, "billing", 10)
	must(t, err, "list parked")
	must(t, db.Admin().RequestReplay(ctx, parked[0].ID), "request replay")
	failing := uuid.New()
	for _, msg := range []string{"one", "two"} {
		_, err := cs.RecordFailure(ctx, "inventory", failing, store.Attempt{At: f.t0.Add(-time.Hour), Error: msg})
		must(t, err, "record failure")
	}
	mark(t, db.Inbox(), "billing", uuid.New(), true)
	mark(t, db.Inbox(), "shipping", uuid.New(), true)
}

// seedSagas creates two running sagas (o1 overdue since past), one
// compensating, two completed (o4 long ago) and one cancelled (r1, long
// ago), each with one event.
func (f *opsFixture[TTx]) seedSagas() {
	ctx, sagas, t0 := context.Background(), f.db.Sagas(), f.t0
	past, future := f.past, t0.Add(time.Hour)
	old := t0.Add(-48 * time.Hour)
	for _, r := range []store.SagaRecord{
		{Type: "order", ID: "o1", State: "charging", Phase: "running", Deadline: &past, CreatedAt: old, UpdatedAt: old},
		{Type: "order", ID: "o2", State: "charging", Phase: "running", Deadline: &future, CreatedAt: t0, UpdatedAt: t0},
		{Type: "order", ID: "o3", State: "refunding", Phase: "compensating", CreatedAt: t0, UpdatedAt: t0},
		{Type: "order", ID: "o4", State: "done", Phase: "completed", CreatedAt: old, UpdatedAt: old},
		{Type: "order", ID: "o5", State: "done", Phase: "completed", CreatedAt: t0, UpdatedAt: t0},
		{Type: "refund", ID: "r1", State: "failed", Phase: "cancelled", CreatedAt: old, UpdatedAt: old},
	} {
		r.Version, r.Data = 1, []byte(`{}`)
		must(f.t, sagas.InTx(ctx, func(tx TTx) error {
			if err := sagas.Create(ctx, tx, r); err != nil {
				return err
			}
			return sagas.Record(ctx, tx, store.SagaEvent{Type: r.Type, SagaID: r.ID, At: r.UpdatedAt, EventType: "Started",
				From: "", To: r.State, Outcome: "applied"})
		}), "create saga %s", r.ID)
	}
}

// seedKeys claims ("api", "in-flight") and completes ("api", "done").
func (f *opsFixture[TTx]) seedKeys() {
	t, keys := f.t, f.db.Idempotency()
	fp := fingerprint("POST /orders")
	claimKey(t, keys, keyClaim("api", "in-flight", fp, opsLockFor, time.Hour))
	done := keyClaim("api", "done", fp, opsLockFor, time.Hour)
	claimKey(t, keys, done)
	if !completeKey(t, keys, "api", "done", done.Owner, store.StoredResponse{Status: 201}, true) {
		t.Fatal("complete key")
	}
}

// checkStatus checks Status's consumers, markers, sagas and keys after the
// seeds.
func (f *opsFixture[TTx]) checkStatus() {
	t := f.t
	st := opsStatus(t, f.ops)
	want := []store.ConsumerStatus{
		{Consumer: "billing", Parked: 2, ReplayRequested: 1},
		{Consumer: "inventory", FailingMessages: 1, Failures: 2},
		{Consumer: "shipping", Parked: 1},
	}
	if len(st.Consumers) != len(want) {
		t.Fatalf("consumers: %+v; want %+v", st.Consumers, want)
	}
	for i, c := range st.Consumers {
		w := want[i]
		if c.Consumer != w.Consumer || c.Parked != w.Parked || c.ReplayRequested != w.ReplayRequested ||
			c.FailingMessages != w.FailingMessages || c.Failures != w.Failures ||
			(c.Parked > 0) == c.OldestParked.IsZero() || (c.Failures > 0) == c.OldestFailure.IsZero() {
			t.Fatalf("consumer %d: %+v; want %+v, with the oldest times of what it has", i, c, w)
		}
	}
	if st.InboxMarkers.N != 2 || st.InboxMarkers.Estimated {
		t.Fatalf("inbox markers: %+v, want 2", st.InboxMarkers)
	}
	wantSagas := []store.SagaCount{
		{Type: "order", Phase: "compensating", State: "refunding", Count: 1},
		{Type: "order", Phase: "completed", Count: 2},
		{Type: "order", Phase: "running", State: "charging", Count: 2},
		{Type: "refund", Phase: "cancelled", Count: 1},
	}
	if !slices.Equal(st.Sagas, wantSagas) {
		t.Fatalf("sagas: %+v; want %+v", st.Sagas, wantSagas)
	}
	if len(st.OverdueSagas) != 1 || st.OverdueSagas[0].Type != "order" || st.OverdueSagas[0].Count != 1 ||
		!st.OverdueSagas[0].OldestDeadline.Equal(f.past) {
		t.Fatalf("overdue sagas: %+v; want order's o1, due %s", st.OverdueSagas, f.past)
	}
	if st.Keys.InFlight != 1 || st.Keys.LockExpired != 0 || st.Keys.Completed != (store.Count{N: 1}) {
		t.Fatalf("keys: %+v; want 1 in flight, 1 completed", st.Keys)
	}
}

// reconcile checks that o1 is overdue and that the in-flight key goes
// stale when its lock expires, and releases it.
func (f *opsFixture[TTx]) reconcile() {
	t, ctx, ops, t0 := f.t, context.Background(), f.ops, f.t0
	r, err := ops.Reconcile(ctx, store.ReconcileOptions{})
	must(t, err, "reconcile")
	if len(r.OverdueSagas) != 1 || r.OverdueSagas[0].ID != "o1" || r.OverdueSagas[0].State != "charging" ||
		!r.OverdueSagas[0].Deadline.Equal(f.past) || len(r.StaleKeys) != 0 {
		t.Fatalf("reconcile: overdue %+v, stale keys %+v; want o1 and no key", r.OverdueSagas, r.StaleKeys)
	}
	if r, err := ops.Reconcile(ctx, store.ReconcileOptions{SagaGrace: 2 * time.Minute}); err != nil || len(r.OverdueSagas) != 0 {
		t.Fatalf("reconcile with two minutes' grace: %+v, %v; want no saga", r.OverdueSagas, err)
	}
	if ok, err := ops.ReleaseKey(ctx, "api", "in-flight"); err != nil || ok {
		t.Fatalf("ReleaseKey of a key whose lock holds: %v, %v; want false", ok, err)
	}
	f.db.clock.Set(t0.Add(opsLockFor))
	r, err = ops.Reconcile(ctx, store.ReconcileOptions{})
	must(t, err, "reconcile")
	if len(r.StaleKeys) != 1 || r.StaleKeys[0].Scope != "api" || r.StaleKeys[0].Key != "in-flight" ||
		!r.StaleKeys[0].LockedUntil.Equal(t0.Add(opsLockFor)) {
		t.Fatalf("stale keys: %+v; want (api, in-flight) locked until %s", r.StaleKeys, t0.Add(opsLockFor))
	}
	if st := opsStatus(t, ops); st.Keys.LockExpired != 1 {
		t.Fatalf("keys once the lock expired: %+v", st.Keys)
	}
	if ok, err := ops.ReleaseKey(ctx, "api", "done"); err != nil || ok {
		t.Fatalf("ReleaseKey of a completed key: %v, %v; want false", ok, err)
	}
	if ok, err := ops.ReleaseKey(ctx, "api", "in-flight"); err != nil || !ok {
		t.Fatalf("ReleaseKey of a stale key: %v, %v; want true", ok, err)
	}
	if rec, mine := claimKey(t, f.db.Idempotency(), keyClaim("api", "in-flight", fingerprint("POST /other"), opsLockFor, time.Hour)); !mine || rec.Done {
		t.Fatalf("a claim after the release: mine %v, %+v; want a fresh key", mine, rec)
	}
}

// trimAll trims table of rows from before before, a row at a time, and
// returns how many it deleted.
func (f *opsFixture[TTx]) trimAll(table store.Table, before time.Time) int64 {
	f.t.Helper()
	var total int64
	after := ""
	for {
		res, err := f.ops.Trim(context.Background(), store.Trim{Table: table, Before: before, After: after, Limit: 1})
		if err != nil {
			f.t.Fatalf("trim %s: %v", table, err)
		}
		total += res.Deleted
		if res.Deleted < 1 {
			return total
		}
		after = res.Next
	}
}

// trim trims each table and checks what is left: finished sagas with
// their history, failures, markers, parked deliveries and expired keys.
func (f *opsFixture[TTx]) trim() {
	t, ctx, t0, sagas := f.t, context.Background(), f.t0, f.db.Sagas()
	if n := f.trimAll(store.TableSagas, t0.Add(-time.Hour)); n != 2 {
		t.Fatalf("trimmed %d sagas finished before an hour ago, want 2 (o4, r1)", n)
	}
	for _, id := range []string{"o4", "o1", "o5"} {
		err := sagas.InTx(ctx, func(tx TTx) error { _, err := sagas.Load(ctx, tx, "order", id); return err })
		if gone := errors.Is(err, store.ErrNotFound); gone != (id == "o4") {
			t.Fatalf("saga %s after the trim: %v", id, err)
		}
	}
	if h, err := sagas.History(ctx, "order", "o4"); err != nil || len(h) != 0 {
		t.Fatalf("history of a trimmed saga: %+v, %v; want none", h, err)
	}
	if h, err := sagas.History(ctx, "order", "o5"); err != nil || len(h) != 1 {
		t.Fatalf("history of a kept saga: %+v, %v; want its one event", h, err)
	}
	if n := f.trimAll(store.TableInboxFailures, t0.Add(-2*time.Hour)); n != 0 {
		t.Fatalf("trimmed %d failures from before two hours ago, want 0", n)
	}
	if n := f.trimAll(store.TableInboxFailures, t0); n != 2 {
		t.Fatalf("trimmed %d failures, want 2", n)
	}
	far := time.Now().Add(24 * time.Hour)
	for table, want := range map[store.Table]int64{store.TableInboxMarkers: 2, store.TableParked: 3} {
		if n := f.trimAll(table, time.Now().Add(-24*time.Hour)); n != 0 {
			t.Fatalf("trimmed %d rows of %s from before yesterday, want 0", n, table)
		}
		if n := f.trimAll(table, far); n != want {
			t.Fatalf("trimmed %d rows of %s, want %d", n, table, want)
		}
	}
	if n := f.trimAll(store.TableKeys, t0.Add(time.Hour+time.Second)); n != 1 {
		t.Fatalf("trimmed %d expired keys, want 1 (the completed one; the other was claimed again later)", n)
	}
	st := opsStatus(t, f.ops)
	if len(st.Consumers) != 0 || st.InboxMarkers.N != 0 || st.Keys.Completed.N != 0 || st.Keys.InFlight != 1 {
		t.Fatalf("status after the trims: consumers %+v, markers %+v, keys %+v", st.Consumers, st.InboxMarkers, st.Keys)
	}
}
