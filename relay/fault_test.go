package relay_test

import (
	"context"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/store/postgres"
)

// produceSlowly writes n messages over keys at about rate per second in the
// background; the returned function waits for the end and returns them.
func (h *harness) produceSlowly(n, keys, rate int) func() []courier.Message {
	var written []courier.Message
	done := make(chan struct{})
	go func() {
		defer close(done)
		for len(written) < n {
			k := min(10, n-len(written))
			written = append(written, h.produce(k, keys, k)...)
			time.Sleep(time.Duration(k) * time.Second / time.Duration(rate))
		}
	}()
	return func() []courier.Message { <-done; return written }
}

func TestBrokerOutageBacklogDrainsAfterward(t *testing.T) {
	onEachDatabase(t, testBrokerOutageBacklogDrainsAfterward)
}

func testBrokerOutageBacklogDrainsAfterward(t *testing.T, db database) {
	dir := t.TempDir()
	srv := testenv.EmbeddedNATSAt(t, dir, 0)
	u, err := url.Parse(srv.ClientURL())
	testenv.Must(t, err, "parse url")
	port, _ := strconv.Atoi(u.Port())
	h := newHarness(t, db, srv.ClientURL())
	cfg := h.relayConfig()
	cfg.Backoff.Initial, cfg.Backoff.Max = 100*time.Millisecond, 500*time.Millisecond
	cfg.MaxAttempts = 2 // an outage must not produce dead letters, however long
	r, _ := h.startRelay(h.publisher(), cfg)

	wait := h.produceSlowly(3000, 100, 1000)
	time.Sleep(time.Second)
	srv.Shutdown()
	down := time.Now()
	// The backlog grows and shows as backoff in status.
	testenv.Eventually(t, 10*time.Second, func() bool {
		st := h.stats()
		return st.InBackoff > 0 && st.Pending > 500
	}, "no backlog in backoff while the broker is down: %+v", testenv.Lazy(func() any { return h.stats() }))
	time.Sleep(2 * time.Second)
	st := h.stats()
	t.Logf("after %s without the broker: %d pending, %d in backoff, oldest %s old", time.Since(down).Round(time.Millisecond), st.Pending, st.InBackoff, st.OldestPendingAge().Round(time.Millisecond))

	testenv.EmbeddedNATSAt(t, dir, port) // the broker returns with its store
	written := wait()
	h.waitDrained()
	if st := h.stats(); st.DeadLetters != 0 {
		t.Fatalf("the outage produced %d dead letters", st.DeadLetters)
	}
	dups := checkDelivery(t, written, h.received())
	t.Logf("%d messages, none lost, %d duplicates in the stream; relay metrics %+v", len(written), dups, r.Metrics())
}

// PostgreSQL only: its backends can be terminated under the relay.
func TestRelayRecoversFromKilledDatabaseConnections(t *testing.T) {
	h := newHarness(t, onPostgres, anyNATS)
	app := testenv.Name("relay_")
	relayURL := h.pg.URL + "&application_name=" + app
	pool, err := pgxpool.New(context.Background(), relayURL)
	testenv.Must(t, err, "relay pool")
	t.Cleanup(pool.Close)
	st, err := postgres.NewStore(context.Background(), pool, postgres.StoreConfig{})
	testenv.Must(t, err, "store")
	h.store = st
	cfg := h.relayConfig()
	n, err := postgres.NewNotifier(relayURL, testLogger(t))
	testenv.Must(t, err, "notifier")
	cfg.Notifier = n
	h.startRelay(h.publisher(), cfg)

	wait := h.produceSlowly(5000, 100, 1500)
	killed := 0
	for range 15 {
		time.Sleep(200 * time.Millisecond)
		var k int
		testenv.Must(t, h.pg.Admin.QueryRow(context.Background(),
			`SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&k), "terminate")
		killed += k
	}
	if killed == 0 {
		t.Fatal("found no relay connection to terminate")
	}
	written := wait()
	h.waitDrained()
	dups := checkDelivery(t, written, h.received())
	t.Logf("terminated %d relay connections; %d messages delivered, %d duplicates in the stream", killed, len(written), dups)
}
