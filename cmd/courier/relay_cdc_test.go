package main

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/courier-go/courier"
	couriernats "github.com/courier-go/courier/broker/nats"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/store/postgres"
)

// `courier relay --mode cdc` processes, two at a time (one reads the slot,
// the other waits as a standby), SIGKILLed in a loop while writers commit,
// and the active one's walsender terminated now and then: every message
// reaches the stream, each key in commit order.
func TestRelayCDCSurvivesKills(t *testing.T) {
	pg := testenv.Postgres(t, testenv.Migrate(postgres.NewDriver))
	natsURL := testenv.NATSOrEmbedded(t)
	nc := testenv.Connect(t, natsURL)
	ctx := context.Background()
	stream := testenv.Name("CDC")
	mapping := couriernats.Config{SubjectPrefix: strings.ToLower(stream) + "."}
	testenv.Must(t, couriernats.EnsureStream(ctx, nc, mapping, couriernats.StreamConfig{Name: stream}), "stream")
	slot := strings.ToLower(testenv.Name("cdc_"))
	t.Cleanup(func() {
		deadline := time.Now().Add(10 * time.Second)
		for {
			_, err := pg.Admin.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1`, slot)
			if err == nil || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		_, _ = pg.Admin.Exec(ctx, "DROP PUBLICATION IF EXISTS "+slot)
	})

	var logs lockedBuffer
	start := func() *exec.Cmd {
		cmd := exec.Command(os.Args[0], "relay", "--mode", "cdc", "--slot", slot, "--publication", slot,
			"--database-url", pg.URL, "--broker-url", natsURL, "--stream", stream, "--subject-prefix", mapping.SubjectPrefix,
			"--batch-size", "200", "--log-format", "json")
		cmd.Env = append(os.Environ(), "COURIER_TEST_BE_CLI=1")
		cmd.Stderr = &logs
		testenv.Must(t, cmd.Start(), "start relay")
		return cmd
	}
	kill := func(cmd *exec.Cmd) {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}

	// Writers: messages over 40 keys, a few per transaction, each key
	// written by one writer so its order is the commit order.
	d := postgres.NewDriver(pg.Pool)
	w := outbox.New(d.Inserter(), outbox.Config{})
	const writers, perWriter = 4, 600
	written := make([][]courier.Message, writers)
	var wg sync.WaitGroup
	for g := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < perWriter; i += 5 {
				var tx []courier.Message
				for j := i; j < i+5; j++ {
					tx = append(tx, courier.NewMessage("orders", fmt.Sprintf("w%d-k%d", g, j%10), "T", []byte(fmt.Sprint(j))))
				}
				if err := d.InTx(ctx, func(t pgx.Tx) error { return w.Write(ctx, t, tx...) }); err != nil {
					panic(err)
				}
				written[g] = append(written[g], tx...)
				time.Sleep(time.Duration(rand.IntN(3)) * time.Millisecond)
			}
		}()
	}

	relays := []*exec.Cmd{start(), start()}
	kills, terminated := 0, 0
	for round := range 10 {
		time.Sleep(time.Duration(200+rand.IntN(400)) * time.Millisecond)
		if round%3 == 2 {
			var n int
			testenv.Must(t, pg.Admin.QueryRow(ctx,
				`SELECT count(pg_terminate_backend(active_pid)) FROM pg_replication_slots WHERE slot_name = $1 AND active_pid IS NOT NULL`, slot).Scan(&n), "terminate walsender")
			terminated += n
			continue
		}
		i := rand.IntN(len(relays))
		kill(relays[i])
		kills++
		relays[i] = start()
	}
	wg.Wait()
	var all []courier.Message
	for _, ms := range written {
		all = append(all, ms...)
	}
	testenv.WhileProgressing(t, 30*time.Second, func() (bool, any) {
		var n int
		_ = pg.Pool.QueryRow(ctx, "SELECT count(*) FROM courier_outbox").Scan(&n)
		return n == 0, n
	}, "the outbox is not drained; logs:\n%s", testenv.Lazy(func() any { return logs.String() }))
	for _, r := range relays {
		kill(r)
	}
	got := testenv.StreamMessages(t, nc, stream, mapping)
	dups := testenv.CheckDelivery(t, all, got)
	var dead int
	testenv.Must(t, pg.Pool.QueryRow(ctx, "SELECT count(*) FROM courier_outbox_dead_letters").Scan(&dead), "dead letters")
	if dead != 0 {
		t.Fatalf("%d dead letters", dead)
	}
	t.Logf("%d messages; %d relays SIGKILLed, %d walsenders terminated; %d duplicates in the stream", len(all), kills, terminated, dups)
}

// lockedBuffer is a bytes.Buffer several processes write to.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Two `courier relay --mode cdc` started at the same moment on a new
// schema, round after round on new publication and slot names: both make
// sure of the publication at once and neither fails (one makes the slot
// and reads it, the other waits as a standby); every message written
// before they started reaches the stream.
func TestRelayCDCStartTogether(t *testing.T) {
	natsURL := testenv.NATSOrEmbedded(t)
	nc := testenv.Connect(t, natsURL)
	ctx := context.Background()
	for round := range 3 {
		pg := testenv.Postgres(t, testenv.Migrate(postgres.NewDriver))
		stream := testenv.Name("CDCSTART")
		mapping := couriernats.Config{SubjectPrefix: strings.ToLower(stream) + "."}
		testenv.Must(t, couriernats.EnsureStream(ctx, nc, mapping, couriernats.StreamConfig{Name: stream}), "stream")
		slot := strings.ToLower(testenv.Name("start_"))
		t.Cleanup(func() {
			// The relays are gone (below); their walsenders end soon after.
			testenv.Eventually(t, 10*time.Second, func() bool {
				_, err := pg.Admin.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1`, slot)
				return err == nil
			}, "drop slot %s", slot)
			_, _ = pg.Admin.Exec(ctx, "DROP PUBLICATION IF EXISTS "+slot)
		})
		d := postgres.NewDriver(pg.Pool)
		msgs := make([]courier.Message, 20)
		for i := range msgs {
			msgs[i] = courier.NewMessage("orders", fmt.Sprintf("k%d", i%4), "T", []byte(fmt.Sprint(i)))
		}
		testenv.Must(t, d.InTx(ctx, func(tx pgx.Tx) error { return outbox.New(d.Inserter(), outbox.Config{}).Write(ctx, tx, msgs...) }), "write")

		type proc struct {
			cmd  *exec.Cmd
			logs *lockedBuffer
			done chan struct{} // closed once it has exited, with err
			err  error
		}
		var procs []*proc
		for range 2 {
			p := &proc{logs: &lockedBuffer{}, done: make(chan struct{})}
			p.cmd = exec.Command(os.Args[0], "relay", "--mode", "cdc", "--slot", slot, "--publication", slot,
				"--database-url", pg.URL, "--broker-url", natsURL, "--stream", stream, "--subject-prefix", mapping.SubjectPrefix, "--log-format", "json")
			p.cmd.Env = append(os.Environ(), "COURIER_TEST_BE_CLI=1")
			p.cmd.Stderr = p.logs
			procs = append(procs, p)
		}
		for _, p := range procs {
			testenv.Must(t, p.cmd.Start(), "start relay")
			go func() { p.err = p.cmd.Wait(); close(p.done) }()
			t.Cleanup(func() { _ = p.cmd.Process.Kill(); <-p.done })
		}
		exited := func() string {
			for i, p := range procs {
				select {
				case <-p.done:
					return fmt.Sprintf("relay %d exited (%v):\n%s", i, p.err, p.logs)
				default:
				}
			}
			return ""
		}
		testenv.WhileProgressing(t, 30*time.Second, func() (bool, any) {
			if exited() != "" {
				return true, nil
			}
			var n int
			_ = pg.Pool.QueryRow(ctx, "SELECT count(*) FROM courier_outbox").Scan(&n)
			return n == 0, n
		}, "round %d: the outbox is not drained; logs:\n%s\n%s", round, procs[0].logs, procs[1].logs)
		if msg := exited(); msg != "" {
			t.Fatalf("round %d: %s", round, msg)
		}
		for i, p := range procs {
			testenv.Must(t, p.cmd.Process.Signal(syscall.SIGTERM), "SIGTERM")
			<-p.done
			if p.err != nil {
				t.Fatalf("round %d: relay %d after SIGTERM: %v\n%s", round, i, p.err, p.logs)
			}
		}
		testenv.CheckDelivery(t, msgs, testenv.StreamMessages(t, nc, stream, mapping))
	}
}
