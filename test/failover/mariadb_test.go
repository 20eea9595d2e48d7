package failover

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker/memory"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/relay"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/mysql"
)

// A mariaMode is how the MariaDB primary replicates to its replica.
type mariaMode struct {
	name string
	// semiSync turns semi-synchronous replication on once the replica
	// runs, lossless: a commit waits for the replica to have its events
	// before the engine commits it (AFTER_SYNC), so no other session sees
	// it earlier. The timeout keeps it from falling back to asynchronous
	// replication during the test.
	semiSync bool
}

var mariaModes = []mariaMode{{name: "async"}, {name: "semi-sync", semiSync: true}}

// semiSync turns on lossless semi-synchronous replication from primary to
// replica and waits until the primary counts the replica as its
// semi-synchronous client.
func semiSync(t *testing.T, primary, replica *testenv.MariaDBServer) {
	primary.Exec("SET GLOBAL rpl_semi_sync_master_wait_point = AFTER_SYNC")
	primary.Exec("SET GLOBAL rpl_semi_sync_master_timeout = 60000")
	primary.Exec("SET GLOBAL rpl_semi_sync_master_enabled = ON")
	replica.Exec("SET GLOBAL rpl_semi_sync_slave_enabled = ON")
	replica.Exec("STOP SLAVE IO_THREAD")
	replica.Exec("START SLAVE IO_THREAD")
	testenv.Eventually(t, 30*time.Second, func() bool { return primary.GlobalStatus("Rpl_semi_sync_master_clients") == "1" },
		"the primary has no semi-synchronous replica")
}

// The polling relay on MariaDB follows a promoted replica: go-sql-driver
// takes one address, so writers and the relay reach the primary through
// one that moves to the promoted server (a virtual IP, or a proxy that
// follows the primary, such as MaxScale or ProxySQL; a test proxy here),
// and reconnect by themselves. Counts as for PostgreSQL; with
// semi-synchronous replication nothing a writer saw committed is lost and
// nothing is published for a transaction the new primary lacks.
func TestMariaDBPollingRelayFollowsFailover(t *testing.T) {
	for _, m := range mariaModes {
		t.Run(m.name, func(t *testing.T) { repeat(t, func(t *testing.T) outcome { return runMariaDBFailover(t, m) }) })
	}
}

func runMariaDBFailover(t *testing.T, m mariaMode) outcome {
	primary := testenv.StartMariaDB(t)
	replica := testenv.StartMariaDBReplica(t, primary, "read-only=ON")
	if m.semiSync {
		semiSync(t, primary, replica)
	}
	proxy := testenv.StartProxy(t, fmt.Sprintf("127.0.0.1:%d", primary.Port()))
	db, err := sql.Open("mysql", fmt.Sprintf("root@tcp(%s)/test?timeout=2s&readTimeout=5s&writeTimeout=5s", proxy.Addr()))
	testenv.Must(t, err, "open")
	t.Cleanup(func() { _ = db.Close() })
	ctx := context.Background()
	d := mysql.NewDriver(db)
	_, err = d.Migrate(ctx)
	testenv.Must(t, err, "migrate")
	_, err = db.ExecContext(ctx, "CREATE TABLE failover_orders (n bigint PRIMARY KEY)")
	testenv.Must(t, err, "orders table")

	log := slog.New(slog.NewTextHandler(logWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	rs, err := d.RelayStore(ctx, store.RelayConfig{KeepPublished: true})
	testenv.Must(t, err, "relay store")
	pub := memory.NewPublisher()
	began := time.Now()
	first := &firstPublish{RelayStore: rs}
	r, err := relay.New(first, pub, relay.Config{LeaseDuration: 5 * time.Second, PollInterval: 50 * time.Millisecond,
		Backoff: relay.Backoff{Initial: 20 * time.Millisecond, Max: 200 * time.Millisecond}, Observer: first, Logger: log})
	testenv.Must(t, err, "relay")
	rctx, stopRelay := context.WithCancel(ctx)
	relayDone := make(chan error, 1)
	go func() { relayDone <- r.Run(rctx) }()
	t.Cleanup(func() { stopRelay(); <-relayDone })

	w := mariaWriter(d)
	killed, promoted := failOver(t, w, pub, func() time.Time {
		primary.Crash()
		replica.Promote()
		proxy.Retarget(fmt.Sprintf("127.0.0.1:%d", replica.Port()))
		promoted := time.Now()
		first.from(promoted)
		return promoted
	})
	pending := func() int64 {
		var c int64
		if err := db.QueryRowContext(ctx, "SELECT count(*) FROM courier_outbox").Scan(&c); err != nil {
			return -1
		}
		return c
	}
	testenv.WhileProgressing(t, 30*time.Second, func() (bool, any) { n := pending(); return n == 0, n }, "outbox not drained on the new primary")

	rows, err := db.QueryContext(ctx, "SELECT n FROM failover_orders")
	testenv.Must(t, err, "read the orders")
	var survived []int64
	for rows.Next() {
		var n int64
		testenv.Must(t, rows.Scan(&n), "scan")
		survived = append(survived, n)
	}
	testenv.Must(t, rows.Err(), "read the orders")
	got := count(t, survived, w.acks(), pub.Messages())
	t.Logf("mariadb, %s: %d written and acknowledged, %d on the new primary, %d published (%d distinct): %d lost, %d phantoms, %d duplicates; the replica promoted %v after the kill; the relay's first publish from it %v after the promotion",
		m.name, got.acked, got.survived, got.deliveries, got.published, got.lost, got.phantoms, got.duplicates,
		promoted.Sub(killed).Round(time.Millisecond), first.when().Sub(promoted).Round(time.Millisecond))
	if got.unpublished != 0 {
		t.Fatalf("%d transactions on the new primary never published", got.unpublished)
	}
	checkAudit(t, d.Operations(), pub, began, promoted, false, got)
	if m.semiSync && (got.lost != 0 || got.phantoms != 0) {
		t.Fatalf("semi-synchronous replication: %d lost, %d phantoms; want none", got.lost, got.phantoms)
	}
	return outcome{counts: got, promotion: promoted.Sub(killed), firstPublish: first.when().Sub(promoted)}
}

// mariaWriter is a writer on MariaDB.
func mariaWriter(d mysql.Driver) *writer {
	w := outbox.New(d.Inserter(), outbox.Config{})
	return &writer{commit: func(ctx context.Context, n int64, msg courier.Message) error {
		return d.InTx(ctx, func(tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, "INSERT INTO failover_orders (n) VALUES (?)", n); err != nil {
				return err
			}
			return w.Write(ctx, tx, msg)
		})
	}}
}
