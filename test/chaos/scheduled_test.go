package chaos

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	natsgo "github.com/nats-io/nats.go"

	"github.com/courier-go/courier"
	couriernats "github.com/courier-go/courier/broker/nats"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/postgres"
)

// TestScheduledRelayKills runs two `courier relay` processes, polling and
// then CDC, each SIGKILLed 0.3–3s after it began relaying and replaced at once,
// while writers schedule messages due one to six seconds later (many at
// the same instants, so that releases are under way when the kills come)
// and cancel every tenth of them a moment later; then one relay drains.
// Every scheduled message that was not cancelled reaches the JetStream
// stream exactly once, never before its due time (JetStream's own
// timestamp), each key's in due order; no cancelled one does. 20 seconds
// of writes per mode, 5 minutes with -long.
func TestScheduledRelayKills(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"polling", "cdc"} {
		t.Run(mode, func(t *testing.T) { scheduledKills(t, mode) })
	}
}

// scheduledRun is one run of TestScheduledRelayKills.
type scheduledRun struct {
	*relayProcs
	t  *testing.T
	pg *testenv.PG
}

// scheduledMsg is a message scheduled by the test, and what became of it.
type scheduledMsg struct {
	msg       courier.Message
	due       time.Time
	seq       int // the order its writer scheduled it in
	cancelled bool
}

func scheduledKills(t *testing.T, mode string) {
	writeFor := 20 * time.Second
	if testenv.Long() {
		writeFor = 5 * time.Minute
	}
	open := testenv.Postgres
	if mode == "cdc" {
		// A server of its own: making the slot waits for every
		// transaction open on the server to end, other tests' too.
		open = testenv.PostgresOwn
	}
	pg := open(t, testenv.Migrate(postgres.NewDriver))
	natsURL := testenv.NATSOrEmbedded(t)
	nc := testenv.Connect(t, natsURL)
	ctx := context.Background()
	stream := testenv.Name("SCHED")
	mapping := couriernats.Config{SubjectPrefix: strings.ToLower(stream) + "."}
	testenv.Must(t, couriernats.EnsureStream(ctx, nc, mapping, couriernats.StreamConfig{Name: stream}), "stream")
	wire := countWire(t, nc, mapping.SubjectPrefix)
	args := []string{"relay", "--database-url", pg.URL, "--broker-url", natsURL, "--stream", stream,
		"--subject-prefix", mapping.SubjectPrefix, "--batch-size", "100", "--log-format", "text", "--log-level", "info"}
	if mode == "cdc" {
		slot := strings.ToLower(testenv.Name("sched_"))
		t.Cleanup(func() { dropSlot(t, pg, slot) })
		args = append(args, "--mode", "cdc", "--slot", slot, "--publication", slot)
	}
	r := &scheduledRun{t: t, pg: pg, relayProcs: newRelayProcs(t, args...)}

	chaos, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() { r.liveAndDie(chaos, nil) })
	}
	written := r.schedule(ctx, writeFor)
	stop()
	wg.Wait()

	last := r.start()
	defer func() { _ = last.Process.Kill(); _ = last.Wait() }()
	var want []scheduledMsg
	for _, s := range written {
		if !s.cancelled {
			want = append(want, s)
		}
	}
	ops := postgres.NewDriver(pg.Pool).Operations()
	testenv.WhileProgressing(t, 30*time.Second, func() (bool, any) {
		st, err := ops.Status(ctx)
		if err != nil {
			return false, err.Error()
		}
		n := testenv.StreamCount(t, nc, stream)
		return st.Scheduled.Waiting.N == 0 && n >= len(want), fmt.Sprintf("%d waiting, %d in the stream", st.Scheduled.Waiting.N, n)
	}, "the stream holds fewer than the %d messages", len(want))
	_ = last.Process.Kill()
	_ = last.Wait()
	checkScheduledStream(t, nc, stream, mapping, written, want)
	t.Logf("%s: %d scheduled in %s (%d cancelled in time), %d relays SIGKILLed; %d publishes on the wire for %d messages (%.2f×); none early, none lost, none twice in the stream, each key in due order",
		mode, len(written), writeFor, len(written)-len(want), r.kills.Load(), wire.Load(), len(want), float64(wire.Load())/float64(len(want)))
}

// checkScheduledStream fails unless the stream holds each of want once,
// none of written's cancelled ones, each no earlier than its due time,
// and each key's in due order.
func checkScheduledStream(t *testing.T, nc *natsgo.Conn, stream string, mapping couriernats.Config, written, want []scheduledMsg) {
	t.Helper()
	stamps := testenv.StreamStamps(t, nc, stream)
	for _, s := range written {
		at, ok := stamps[s.msg.ID]
		switch {
		case s.cancelled && ok:
			t.Errorf("message %s was cancelled, and published at %s", s.msg.ID, at)
		case !s.cancelled && ok && at.Before(s.due):
			t.Errorf("message %s due at %s was stored %s early", s.msg.ID, s.due.Format(time.StampMilli), s.due.Sub(at))
		}
	}
	slices.SortStableFunc(want, func(a, b scheduledMsg) int { return cmp.Or(a.due.Compare(b.due), cmp.Compare(a.seq, b.seq)) })
	msgs := make([]courier.Message, len(want))
	for i, s := range want {
		msgs[i] = s.msg
	}
	if dups := testenv.CheckDelivery(t, msgs, testenv.StreamMessages(t, nc, stream, mapping)); dups != 0 {
		t.Errorf("%d duplicates reached the stream", dups)
	}
}

// schedule runs two writers for d, each scheduling about 50 messages a
// second over keys of its own, due 1–6s later on quarter-second
// boundaries, and cancelling every tenth a moment after; it returns what
// they scheduled, and whether each cancel held.
func (r *scheduledRun) schedule(ctx context.Context, d time.Duration) []scheduledMsg {
	drv := postgres.NewDriver(r.pg.Pool)
	w := outbox.New(drv.Inserter(), outbox.Config{})
	out := make([][]scheduledMsg, 2)
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	for g := range out {
		wg.Go(func() {
			tick := time.NewTicker(20 * time.Millisecond)
			defer tick.Stop()
			for i := 0; time.Now().Before(deadline); i++ {
				<-tick.C
				due := time.Now().Add(time.Second + time.Duration(rand.IntN(5000))*time.Millisecond).Truncate(250 * time.Millisecond)
				s := scheduledMsg{msg: courier.NewMessage("reminders", fmt.Sprintf("w%d-k%d", g, i%50), "Reminder", fmt.Appendf(nil, "%d", i)),
					due: due, seq: i}
				if err := drv.InTx(ctx, func(tx pgx.Tx) error { return w.Schedule(ctx, tx, outbox.At(due), s.msg) }); err != nil {
					r.t.Errorf("schedule: %v", err)
					return
				}
				out[g] = append(out[g], s)
				if i%10 == 9 {
					victim := &out[g][len(out[g])-3]
					err := drv.InTx(ctx, func(tx pgx.Tx) error { return w.Cancel(ctx, tx, victim.msg.ID) })
					switch {
					case err == nil:
						victim.cancelled = true
					case !errors.Is(err, store.ErrAlreadyDue):
						r.t.Errorf("cancel: %v", err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	return append(out[0], out[1]...)
}
