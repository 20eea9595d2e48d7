package metrics_test

import (
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/metrics"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/memstore"
	"github.com/courier-go/courier/store/sqlite"
)

// The gauges of the keys consumers hold come from store.Status through
// FromStatus, per consumer, on a real database: ledger holds a key with
// two deliveries parked behind it, for 90 seconds, and audit one key with
// none behind it, for 30; a hold passed on keeps its age, and once ledger's
// key is released its gauges are 0 (it keeps a parked delivery without a
// key, so it stays in the status).
func TestConsumerHeldKeysGauges(t *testing.T) {
	db, err := sqlite.Open(filepath.Join(t.TempDir(), "inbox.db"))
	testenv.Must(t, err, "open")
	t.Cleanup(func() { db.Close() })
	ctx := context.Background()
	_, err = sqlite.Migrate(ctx, db)
	testenv.Must(t, err, "migrate")
	clock := memstore.NewClock()
	clock.Set(time.Unix(1_000_000, 0))
	drv := sqlite.NewDriver(db).WithClock(clock.Now)
	kh, ok := drv.ConsumerStore().(store.KeyHolds)
	if !ok {
		t.Fatalf("the SQLite ConsumerStore (%T) holds no keys", drv.ConsumerStore())
	}
	park := func(consumer, key string) store.Parked {
		t.Helper()
		p, ok, err := kh.ParkHolding(ctx, store.Parked{Consumer: consumer, MessageID: uuid.NewString(), Subject: "accounts",
			Payload: []byte(`{}`), Reason: store.ReasonFailed, Error: "boom", Attempts: 3, Key: key}, false)
		if err != nil || !ok {
			t.Fatalf("park a delivery of %q for %q: %v, %v", key, consumer, ok, err)
		}
		return p
	}
	cause := park("ledger", "acct-1")
	p2, p3 := park("ledger", "acct-1"), park("ledger", "acct-1")
	if p2.Behind != cause.ID || p3.Behind != cause.ID {
		t.Fatalf("deliveries parked behind %d: %+v, %+v", cause.ID, p2, p3)
	}
	testenv.Must(t, drv.ConsumerStore().Park(ctx, store.Parked{Consumer: "ledger", MessageID: uuid.NewString(), Subject: "accounts",
		Payload: []byte(`{}`), Reason: store.ReasonMalformed, Error: "bad JSON", Attempts: 1}), "park a delivery without a key")
	clock.Advance(60 * time.Second)
	park("audit", "acct-1")
	clock.Advance(30 * time.Second)

	src := metrics.FromStatus(drv.Operations())
	col, err := metrics.New(metrics.Config{ConsumerHolds: src, MinInterval: time.Nanosecond})
	testenv.Must(t, err, "new")
	names := []string{"courier_consumer_held_keys", "courier_consumer_held_messages", "courier_consumer_oldest_hold_age_seconds"}
	gauges := func(ledgerKeys, ledgerHeld, ledgerAge int) string {
		return strings.NewReplacer("LK", strconv.Itoa(ledgerKeys), "LH", strconv.Itoa(ledgerHeld), "LA", strconv.Itoa(ledgerAge)).Replace(`
# HELP courier_consumer_held_keys Keys the consumer holds (inbox HoldKeys), each behind a parked delivery: their later deliveries are parked behind it until it is replayed or discarded.
# TYPE courier_consumer_held_keys gauge
courier_consumer_held_keys{consumer="audit"} 1
courier_consumer_held_keys{consumer="ledger"} LK
# HELP courier_consumer_held_messages Deliveries parked behind a parked delivery that holds their key (reason held).
# TYPE courier_consumer_held_messages gauge
courier_consumer_held_messages{consumer="audit"} 0
courier_consumer_held_messages{consumer="ledger"} LH
# HELP courier_consumer_oldest_hold_age_seconds How long the consumer's oldest hold of a key has lasted (a hold passed on keeps its age); 0 when it holds none.
# TYPE courier_consumer_oldest_hold_age_seconds gauge
courier_consumer_oldest_hold_age_seconds{consumer="audit"} 30
courier_consumer_oldest_hold_age_seconds{consumer="ledger"} LA
`)
	}
	compare := func(when, want string) {
		t.Helper()
		testenv.Eventually(t, 5*time.Second, func() bool {
			return testutil.CollectAndCompare(col, strings.NewReader(want), names...) == nil
		}, "%s: %v", when, testenv.Lazy(func() any { return testutil.CollectAndCompare(col, strings.NewReader(want), names...) }))
	}
	compare("with the holds", gauges(1, 2, 90))

	next, err := kh.PassHold(ctx, "ledger", "acct-1", cause.ID)
	testenv.Must(t, err, "pass the hold on")
	if next != p2.ID {
		t.Fatalf("the hold passed on to %d, want %d", next, p2.ID)
	}
	compare("after the hold passed on", gauges(1, 1, 90))
	for _, id := range []int64{p2.ID, p3.ID} {
		_, err := kh.PassHold(ctx, "ledger", "acct-1", id)
		testenv.Must(t, err, "pass the hold on from "+strconv.FormatInt(id, 10))
	}
	compare("after the key was released", gauges(0, 0, 0))
}
