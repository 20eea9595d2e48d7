package nats_test

import (
	"context"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/courier-go/courier"
	couriernats "github.com/courier-go/courier/broker/nats"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/relay"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/sqlite"
)

// A relay drains a burst of 3,000 messages on one key, with a message in
// the middle too large for the stream, through a publisher that sends
// atomic batches: the key's messages are stored in commit order, in a
// handful of batches (a claim's run, split around the rejected message)
// rather than one publish per message, and the oversize message is a dead
// letter at once while the rest of its key flows.
func TestRelayDrainsAHotKeyInAtomicBatches(t *testing.T) {
	const n, poison = 3000, 1700
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	nc := testenv.Connect(t, currentServer(t))
	stream, mapping := atomicStream(t, nc, jetstream.StreamConfig{AllowAtomicPublish: true, MaxMsgSize: 64 << 10})

	db, err := sqlite.Open(filepath.Join(t.TempDir(), "outbox.db"))
	testenv.Must(t, err, "open sqlite")
	t.Cleanup(func() { _ = db.Close() })
	_, err = sqlite.Migrate(ctx, db)
	testenv.Must(t, err, "migrate")
	w := outbox.New(sqlite.DatabaseSQL(), outbox.Config{})
	var want []string
	for done := 0; done < n; done += 500 {
		tx, err := db.BeginTx(ctx, nil)
		testenv.Must(t, err, "begin")
		for i := done; i < done+500; i++ {
			payload := []byte(strconv.Itoa(i))
			if i == poison {
				payload = make([]byte, 128<<10)
			} else {
				want = append(want, string(payload))
			}
			testenv.Must(t, w.Write(ctx, tx, courier.NewMessage("orders", "hot", "Numbered", payload)), "write")
		}
		testenv.Must(t, tx.Commit(), "commit")
	}

	st, err := sqlite.NewDriver(db).RelayStore(ctx, store.RelayConfig{})
	testenv.Must(t, err, "relay store")
	pub, err := couriernats.NewPublisher(nc, couriernats.PublisherConfig{Config: mapping})
	testenv.Must(t, err, "publisher")
	if !pub.KeepsKeyOrder() {
		t.Fatal("KeepsKeyOrder: false, want true")
	}
	r, err := relay.New(st, pub, relay.Config{PollInterval: 20 * time.Millisecond})
	testenv.Must(t, err, "relay")
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	testenv.WhileProgressing(t, 30*time.Second, func() (bool, any) {
		m := r.Metrics()
		return m.Published+m.DeadLettered >= n, m.Published + m.DeadLettered
	}, "relay did not drain: %v", testenv.Lazy(func() any { return r.Metrics() }))
	stop()
	testenv.Must(t, <-done, "relay")

	if m := r.Metrics(); m.Published != n-1 || m.DeadLettered != 1 {
		t.Fatalf("relay metrics %+v: want %d published, 1 dead letter", m, n-1)
	}
	got := rawStream(t, nc, stream)
	inOrder(t, got, "hot", want)
	batches, alone := batchesOf(got, "hot")
	t.Logf("%d messages in %d atomic batches, %d alone, over %d claims", len(got), batches, alone, r.Metrics().Batches)
	if batches > 8 || alone > 4 {
		t.Fatalf("%d batches and %d messages alone for %d messages: the key's runs did not go as atomic batches", batches, alone, n-1)
	}
}
