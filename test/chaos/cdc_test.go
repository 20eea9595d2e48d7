package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	natsgo "github.com/nats-io/nats.go"

	"github.com/courier-go/courier"
	couriernats "github.com/courier-go/courier/broker/nats"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/store/postgres"
)

// TestCDCRelayKills runs `courier relay --mode cdc` processes, two at a
// time (one reads the slot, the other waits as a standby), each SIGKILLed
// 0.3–3s after it began relaying and replaced at once, while writers commit one
// message per transaction over 1,000 keys at about 300 a second, and
// terminates the reading relay's walsender now and then; then one relay
// drains. Every message reaches the JetStream stream exactly once, each
// key in commit order; the slot's confirmed position moves during the kill
// loop, and the relays publish fewer than 1.5 copies of each message on the wire
// (counted by a plain subscriber on the stream's subjects). It runs with
// the messages in the outbox table (rows) and as table-less messages
// (postgres.LogOnly, tableless), 20 seconds each, or 10 minutes each with
// -long.
func TestCDCRelayKills(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"rows", "tableless"} {
		t.Run(mode, func(t *testing.T) { cdcKills(t, mode == "tableless") })
	}
}

// cdcRun is one run of TestCDCRelayKills.
type cdcRun struct {
	*relayProcs
	t         *testing.T
	pg        *testenv.PG
	nc        *natsgo.Conn
	slot      string
	tableless bool
}

func cdcKills(t *testing.T, tableless bool) {
	chaosFor, keys, rate := 20*time.Second, 1000, 300
	if testenv.Long() {
		chaosFor = 10 * time.Minute
	}
	// A server of its own: making the slot waits for every transaction
	// open on the server to end, other tests' too.
	pg := testenv.PostgresOwn(t, testenv.Migrate(postgres.NewDriver))
	ctx := context.Background()
	natsURL := testenv.NATSOrEmbedded(t)
	nc := testenv.Connect(t, natsURL)
	stream := testenv.Name("CDCCHAOS")
	mapping := couriernats.Config{SubjectPrefix: strings.ToLower(stream) + "."}
	testenv.Must(t, couriernats.EnsureStream(ctx, nc, mapping, couriernats.StreamConfig{Name: stream}), "stream")
	slot := strings.ToLower(testenv.Name("chaos_"))
	t.Cleanup(func() { dropSlot(t, pg, slot) })

	wire := countWire(t, nc, mapping.SubjectPrefix)
	c := &cdcRun{t: t, pg: pg, nc: nc, slot: slot, tableless: tableless, relayProcs: newRelayProcs(t, "relay", "--mode", "cdc",
		"--slot", slot, "--publication", slot, "--database-url", pg.URL, "--broker-url", natsURL, "--stream", stream,
		"--subject-prefix", mapping.SubjectPrefix, "--batch-size", "200", "--log-format", "text", "--log-level", "info")}

	// A first relay makes the slot: table-less messages need it.
	first := c.start()
	testenv.Eventually(t, 60*time.Second, func() bool { return c.slotAt() > 0 }, "the slot is not made; log:\n%s",
		testenv.Lazy(func() any { return lastLines(c.logs.Name(), 20) }))

	chaos, stopChaos := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var terminated atomic.Int64
	// Two relays live at a time, each for 0.3–3s of relaying.
	wg.Go(func() { c.liveAndDie(chaos, first) })
	wg.Go(func() { c.liveAndDie(chaos, nil) })
	wg.Go(func() {
		for {
			select {
			case <-chaos.Done():
				return
			case <-time.After(time.Duration(3000+rand.IntN(4000)) * time.Millisecond):
			}
			var n int64
			_ = pg.Admin.QueryRow(ctx, `SELECT count(pg_terminate_backend(active_pid)) FROM pg_replication_slots WHERE slot_name = $1 AND active_pid IS NOT NULL`, slot).Scan(&n)
			terminated.Add(n)
		}
	})
	// The slot's position, once a second: it keeps moving.
	var samples, moved atomic.Int64
	wg.Go(func() {
		last := c.slotAt()
		for {
			select {
			case <-chaos.Done():
				return
			case <-time.After(time.Second):
			}
			at := c.slotAt()
			samples.Add(1)
			if at > last {
				moved.Add(1)
			}
			last = at
		}
	})

	written := c.write(ctx, chaosFor, keys, rate)
	stopChaos()
	wg.Wait()
	end := c.walAt()

	// One relay drains what is left.
	last := c.start()
	defer func() { _ = last.Process.Kill(); _ = last.Wait() }()
	js := testenv.StreamCount
	testenv.WhileProgressing(t, 30*time.Second, func() (bool, any) {
		n, at := js(t, nc, stream), c.slotAt()
		return n >= len(written) && at >= end, fmt.Sprintf("%d in the stream, the slot at %s", n, at)
	}, "the stream holds fewer than the %d messages, or the slot is short of the log's end at %s", len(written), end)
	_ = last.Process.Kill()
	_ = last.Wait()

	got := testenv.StreamMessages(t, nc, stream, mapping)
	dups := testenv.CheckDelivery(t, written, got)
	if dups != 0 {
		t.Errorf("%d duplicates reached the stream", dups)
	}
	if !tableless {
		var left int
		testenv.Must(t, pg.Pool.QueryRow(ctx, "SELECT count(*) FROM courier_outbox").Scan(&left), "rows left")
		if left != 0 {
			t.Errorf("%d rows left in the outbox", left)
		}
	}
	var dead int
	testenv.Must(t, pg.Pool.QueryRow(ctx, "SELECT count(*) FROM courier_outbox_dead_letters").Scan(&dead), "dead letters")
	if dead != 0 {
		t.Errorf("%d dead letters", dead)
	}
	onWire := wire.Load()
	if ratio := float64(onWire) / float64(len(written)); ratio >= 1.5 {
		t.Errorf("%d publishes on the wire for %d messages (%.2f×): the relays published too much again after kills", onWire, len(written), ratio)
	}
	// How many of the seconds see it move depends on how fast relay
	// processes start on the machine; that it moves at all, and that the
	// kills cost a bounded re-publishing (above), does not.
	if moved.Load() == 0 {
		t.Errorf("the slot's position never moved in %d one-second samples of the kill loop", samples.Load())
	}
	t.Logf("%s: %d messages in %s over %d keys; %d relay processes, %d SIGKILLed, %d walsenders terminated; %d publishes on the wire (%.2f×); slot moved in %d of %d seconds; 0 lost, 0 out of order, %d duplicates in the stream",
		map[bool]string{false: "rows", true: "table-less"}[tableless], len(written), chaosFor, keys, c.runs.Load(), c.kills.Load(), terminated.Load(),
		onWire, float64(onWire)/float64(len(written)), moved.Load(), samples.Load(), dups)
}

// write commits one message per transaction, rate a second over keys
// keys, for d, from three writers with keys of their own; it returns the
// messages in commit order.
func (c *cdcRun) write(ctx context.Context, d time.Duration, keys, rate int) []courier.Message {
	d2 := postgres.NewDriver(c.pg.Pool)
	inserter := d2.Inserter()
	if c.tableless {
		inserter = postgres.LogOnly()
	}
	w := outbox.New(inserter, outbox.Config{})
	const writers = 3
	out := make([][]courier.Message, writers)
	var wg sync.WaitGroup
	deadline := time.Now().Add(d)
	for g := range writers {
		wg.Go(func() {
			tick := time.NewTicker(time.Second * writers / time.Duration(rate))
			defer tick.Stop()
			for i := 0; time.Now().Before(deadline); i++ {
				<-tick.C
				m := courier.NewMessage("orders", fmt.Sprintf("w%d-k%d", g, i%(keys/writers)), "Step", []byte(fmt.Sprint(i)))
				if err := d2.InTx(ctx, func(tx pgx.Tx) error { return w.Write(ctx, tx, m) }); err != nil {
					c.t.Errorf("write: %v", err)
					return
				}
				out[g] = append(out[g], m)
			}
		})
	}
	wg.Wait()
	var all []courier.Message
	for _, ms := range out {
		all = append(all, ms...)
	}
	return all
}

// slotAt returns the slot's confirmed position, 0 before it exists.
func (c *cdcRun) slotAt() pglogrepl.LSN {
	var at pglogrepl.LSN
	_ = c.pg.Admin.QueryRow(context.Background(), "SELECT coalesce(confirmed_flush_lsn, '0/0')::text FROM pg_replication_slots WHERE slot_name = $1", c.slot).Scan(&at)
	return at
}

// walAt returns the end of the log now.
func (c *cdcRun) walAt() pglogrepl.LSN {
	var at pglogrepl.LSN
	testenv.Must(c.t, c.pg.Admin.QueryRow(context.Background(), "SELECT pg_current_wal_lsn()::text").Scan(&at), "log position")
	return at
}

// dropSlot drops slot and its publication once no relay reads it.
func dropSlot(t *testing.T, pg *testenv.PG, slot string) {
	ctx := context.Background()
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := pg.Admin.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1`, slot)
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	_, _ = pg.Admin.Exec(ctx, "DROP PUBLICATION IF EXISTS "+slot)
}
