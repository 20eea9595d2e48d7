package chaos

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/courier-go/courier"
	couriernats "github.com/courier-go/courier/broker/nats"
	"github.com/courier-go/courier/inbox"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/postgres"
)

// TestHeldKeys runs held keys (relay.Config.HoldKeys, `courier relay
// --hold-keys`; inbox.ConsumerConfig.HoldKeys) through kills, on PostgreSQL,
// MariaDB and SQLite:
//
//   - relay/postgres, /mysql, /sqlite, and /cdc (`courier relay --mode
//     cdc` on a PostgreSQL server of its own; the messages in the table:
//     a table-less message of a held key that the relay reads after the
//     key's release goes out ahead of the released ones, see relay/cdc,
//     Held keys): three `courier relay
//     --hold-keys orders,late` processes, one SIGKILLed every 0.5–2s,
//     publish what three writers commit over 1,000 keys. In the middle of some keys the test writes a poison
//     message, with a backlog of its key behind it: one larger than the
//     stream's maximum message size, or one on topic "late", whose subject
//     no stream binds (the key then is held across topics). Each becomes a
//     dead letter that holds its key; the key's later messages wait behind
//     it while the other keys flow. Then, under load and kills, the test
//     cures the cause (raises the stream's limit, binds "late") and
//     replays half of the poison dead letters and discards the others
//     (through store.Admin, and once each through `courier dlq replay` and
//     `courier dlq discard`). Reading the stream back in order, applying
//     each message once by its id: every message but the discarded ones is
//     there, none that was never written, each key in the order written
//     across the replay (the replayed message, then those held behind it,
//     then the later ones), nothing of a held key published between its
//     poison and its release, the other keys published meanwhile, no dead
//     letter but the poison ones, and none left.
//   - consumer/…: an inbox consumer with KeepOrder and HoldKeys, a process
//     SIGKILLed every 2–4s, applies what the test publishes over 1,000 keys;
//     its handler fails for the poison messages the test names in a table
//     (some as malformed, parked at once, some with an error, parked after
//     MaxDeliveries), each with a backlog of its key published right
//     behind it. Each poison holds its key: the key's later deliveries are
//     parked behind it (reason held) while the others are applied. Then,
//     under load and kills, the test cures the handler and replays half
//     of the causes and discards the others: every message but the
//     discarded ones applied exactly once, each key in the order
//     published, the held ones only after their cause's release, and
//     nothing left parked.
//
// Each run takes about 20s (consumer/mysql runs with -long only), or a few
// minutes with -long.
func TestHeldKeys(t *testing.T) {
	t.Parallel()
	s := heldSettings{keys: 1000, rate: 300, runFor: 16 * time.Second, poisons: 6, consumerPoisons: 4}
	if testenv.Long() {
		s = heldSettings{keys: 1000, rate: 500, runFor: 3 * time.Minute, poisons: 40, consumerPoisons: 30}
	}
	for _, d := range dialects {
		t.Run("relay/"+d.name, func(t *testing.T) { t.Parallel(); heldRelays(t, d, s) })
	}
	t.Run("relay/cdc", func(t *testing.T) { t.Parallel(); heldRelays(t, dialect{"cdc", setupCDC(false)}, s) })
	for _, d := range dialects {
		if d.name == "mysql" && !testenv.Long() {
			continue // the consumer's holds take turns the same way on MariaDB and PostgreSQL: -long runs it
		}
		t.Run("consumer/"+d.name, func(t *testing.T) { t.Parallel(); heldConsumer(t, d, s) })
	}
}

// heldSettings are the settings of TestHeldKeys's runs.
type heldSettings struct {
	keys, rate int           // keys written to; messages a second
	runFor     time.Duration // how long the writers write
	// poisons and consumerPoisons are how many poison messages the relay
	// and the consumer runs write.
	poisons, consumerPoisons int
}

// heldBacklog is how many messages of its key are written right behind
// each poison message (in its transaction, relay side).
const heldBacklog = 3

// The relay runs' topics: orders, which the stream binds, and late, which
// it binds only once the test cures the unbound poison messages.
const (
	heldTopic = "orders"
	lateTopic = "late"
)

// heldPoison is one poison message and what became of it.
type heldPoison struct {
	id, key, kind string // kind: "oversize" or "unbound" (relay), "malformed" or "failing" (consumer)
	seq           int
	discard       bool  // discarded rather than replayed
	cause         int64 // its dead letter's or parked delivery's id
	// mark is, relay side, the stream's last sequence just before its
	// release; consumer side, the last effect's number then. Nothing of
	// its key after it may come before.
	mark uint64
	// released is when its release began, releaseEnded when the call
	// that released it returned.
	released, releaseEnded time.Time
}

// heldRun is one relay run of TestHeldKeys.
type heldRun struct {
	t       *testing.T
	s       heldSettings
	name    string
	db      *databases
	js      jetstream.JetStream
	stream  string
	mapping couriernats.Config

	mu      sync.Mutex
	written []written // committed, each key's in commit order
	// committed is when each message's transaction committed, by id.
	committed map[string]time.Time
	// begun is when each message's writing transaction began.
	begun   map[string]time.Time
	poisons []*heldPoison
}

func heldRelays(t *testing.T, d dialect, s heldSettings) {
	began := time.Now()
	ctx := context.Background()
	r := &heldRun{t: t, s: s, name: d.name, db: d.setup(t), committed: map[string]time.Time{}, begun: map[string]time.Time{}}
	natsURL := testenv.NATSOrEmbedded(t)
	nc := testenv.Connect(t, natsURL)
	var err error
	r.js, err = jetstream.New(nc)
	testenv.Must(t, err, "jetstream")
	r.stream = testenv.Name("HELD")
	r.mapping = couriernats.Config{SubjectPrefix: strings.ToLower(r.stream) + "."}
	_, err = r.js.CreateStream(ctx, jetstream.StreamConfig{Name: r.stream, Subjects: []string{r.mapping.SubjectPrefix + heldTopic},
		Storage: jetstream.FileStorage, Duplicates: 5 * time.Minute, MaxMsgSize: maxMsgSize})
	testenv.Must(t, err, "create the stream")
	t.Cleanup(func() { _ = r.js.DeleteStream(context.Background(), r.stream) })

	logs, err := os.Create(filepath.Join(t.TempDir(), "relays.log"))
	testenv.Must(t, err, "log file")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("last lines of the relays' log:\n%s", lastLines(logs.Name(), 30))
		}
		logs.Close()
	})
	var relays []*testenv.Proc
	for i := range 3 {
		relays = append(relays, &testenv.Proc{Name: fmt.Sprintf("relay %d", i), Stderr: logs, Cmdline: append([]string{testenv.CourierBinary(t), "relay",
			"--log-format", "text", "--log-level", "warn", "--database-url", r.db.relayURL(i), "--broker-url", natsURL,
			"--stream", r.stream, "--subject-prefix", r.mapping.SubjectPrefix, "--no-create-stream",
			"--lease", "2s", "--max-attempts", "3", "--batch-size", "200", "--poll-interval", "100ms",
			"--hold-keys", heldTopic + "," + lateTopic}, r.db.relayArgs...)})
	}
	stop := make(chan struct{})
	var procs sync.WaitGroup
	for _, p := range relays {
		p.Supervise(t, stop, &procs)
	}
	stopRelays := sync.OnceFunc(func() { close(stop); procs.Wait() })
	t.Cleanup(stopRelays)
	if r.db.ready != nil {
		testenv.Eventually(t, 60*time.Second, r.db.ready, "%s: the relays are not ready; log:\n%s", d.name,
			testenv.Lazy(func() any { return lastLines(logs.Name(), 20) }))
	}
	kills := killEvery(relays, 500*time.Millisecond, 2*time.Second)
	defer kills()

	// The writers write for runFor; the poison messages come in its first
	// third, their release in its second half.
	poisonReq := make(chan string, s.poisons)
	writing := r.write(s.runFor, poisonReq)
	for i := range s.poisons {
		time.Sleep(s.runFor / 3 / time.Duration(s.poisons))
		poisonReq <- map[bool]string{false: "oversize", true: "unbound"}[i%3 == 2]
	}
	// Every poison message becomes a dead letter that holds its key.
	testenv.WhileProgressing(t, 30*time.Second, func() (bool, any) {
		n := r.dead(ctx)
		return n == s.poisons, n
	}, "%s: not every poison message became a dead letter that holds its key", d.name)
	heldFrom := r.lastSeq(ctx)
	t.Logf("%s: %d poison messages dead letters holding their keys at +%.1fs", d.name, s.poisons, time.Since(began).Seconds())
	// Their keys' backlogs wait behind them, out of the outbox.
	testenv.WhileProgressing(t, 20*time.Second, func() (bool, any) {
		held := r.heldKeys(ctx)
		ok := len(held) == s.poisons
		for _, h := range held {
			ok = ok && h.Held >= heldBacklog
		}
		return ok, fmt.Sprint(held)
	}, "%s: the poison messages' keys do not hold their backlogs (HeldKeys)", d.name)
	dls, err := r.db.producerAdmin.DeadLetters(ctx, 10000)
	testenv.Must(t, err, "dead letters")
	if len(dls) != s.poisons {
		t.Errorf("%s: %d dead letters while %d poison messages hold their keys: %v", d.name, len(dls), s.poisons, dls)
	}
	// A few seconds of the hold under load, then the release.
	for deadAt := time.Now(); time.Since(began) < s.runFor/2 || time.Since(deadAt) < 3*time.Second; {
		time.Sleep(100 * time.Millisecond)
	}
	heldTo := r.lastSeq(ctx)

	// The cure, then the releases, while the writers write and relays die.
	_, err = r.js.UpdateStream(ctx, jetstream.StreamConfig{Name: r.stream, Subjects: []string{r.mapping.SubjectPrefix + heldTopic, r.mapping.SubjectPrefix + lateTopic},
		Storage: jetstream.FileStorage, Duplicates: 5 * time.Minute, MaxMsgSize: 4 * maxMsgSize})
	testenv.Must(t, err, "cure: raise the stream's limit and bind "+lateTopic)
	r.release(ctx)
	msgs := <-writing
	t.Logf("%s: released at +%.1fs; %d messages written", d.name, time.Since(began).Seconds(), len(msgs))

	discarded := map[string]bool{}
	for _, p := range r.poisons {
		if p.discard {
			discarded[p.id] = true
		}
	}
	testenv.WhileProgressing(t, 60*time.Second, func() (bool, any) {
		st, err := r.db.producerAdmin.Stats(ctx)
		if err != nil {
			return false, err.Error()
		}
		n := r.streamMsgs(ctx)
		return st.Pending == 0 && st.Held == 0 && st.HeldKeys == 0 && n >= len(msgs)-len(discarded),
			fmt.Sprintf("%d pending, %d held behind %d keys, %d of %d in the stream", st.Pending, st.Held, st.HeldKeys, n, len(msgs)-len(discarded))
	}, "%s: the relays do not settle", d.name)
	kills()
	stopRelays()

	dls, err = r.db.producerAdmin.DeadLetters(ctx, 10000)
	testenv.Must(t, err, "dead letters")
	for _, dl := range dls {
		t.Errorf("%s: dead letter %d left (message %s, key %s): %s", d.name, dl.ID, dl.MessageID, dl.Key, dl.LastError)
	}
	got := r.readStream(ctx)
	res := checkHeld(t, d.name, msgs, r.poisons, got, true, r.committed, r.begun)
	// The other keys flowed while the poison messages held theirs.
	poisoned := map[string]bool{}
	for _, p := range r.poisons {
		poisoned[p.key] = true
	}
	others := 0
	for _, m := range got {
		if m.at > heldFrom && m.at <= heldTo && !poisoned[m.key] {
			others++
		}
	}
	if others == 0 {
		t.Errorf("%s: no message of another key was published while the poison messages held their keys (stream sequences %d to %d)", d.name, heldFrom, heldTo)
	}
	runs := 0
	for _, p := range relays {
		runs += p.Runs()
	}
	t.Logf("summary relay/%s: %d messages over %d keys, %d poison (%d replayed, %d discarded), %d relay processes; %s; %d messages of other keys published while held; %s in all",
		d.name, len(msgs), s.keys, len(r.poisons), len(r.poisons)-len(discarded), len(discarded), runs, res, others, time.Since(began).Round(100*time.Millisecond))
}

// setupCDC returns the setup of a run of relays with --mode cdc: a
// PostgreSQL server of the test's own (making a slot waits for every
// transaction open on the server to end, other tests' too), a slot and
// publication of the test's, dropped when it ends, and a run that waits
// for the slot before it writes. Tableless writes the messages to the log
// only (postgres.LogOnly).
func setupCDC(tableless bool) func(t *testing.T) *databases {
	return func(t *testing.T) *databases {
		pg := testenv.PostgresOwn(t, testenv.Migrate(postgres.NewDriver))
		consumer := testenv.Postgres(t, testenv.Migrate(postgres.NewDriver))
		slot := strings.ToLower(testenv.Name("held_"))
		t.Cleanup(func() { dropSlot(t, pg, slot) })
		pd := postgres.NewDriver(pg.Pool)
		producer := stdlib.OpenDBFromPool(pg.Pool)
		t.Cleanup(func() { producer.Close() })
		write := writer(pd)
		if tableless {
			w := outbox.New(postgres.LogOnly(), outbox.Config{})
			write = func(ctx context.Context, msgs []courier.Message) error {
				return pd.InTx(ctx, func(tx pgx.Tx) error { return w.Write(ctx, tx, msgs...) })
			}
		}
		return &databases{
			relayURL: func(int) string { return pg.URL }, consumerURL: func(int) string { return consumer.URL },
			producer: producer, producerDB: pd, producerAdmin: pd.Admin(), consumerAdmin: postgres.NewDriver(consumer.Pool).Admin(),
			write:     write,
			relayArgs: []string{"--mode", "cdc", "--slot", slot, "--publication", slot},
			ready: func() bool {
				var n int
				_ = pg.Admin.QueryRow(context.Background(), `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&n)
				return n > 0
			},
		}
	}
}

// killEvery SIGKILLs one of procs, at random, every min to max until the
// function it returns is called.
func killEvery(procs []*testenv.Proc, lo, hi time.Duration) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(lo + rand.N(hi-lo)):
			}
			procs[rand.IntN(len(procs))].Signal(syscall.SIGKILL)
		}
	})
	return sync.OnceFunc(func() { close(done); wg.Wait() })
}

// write runs three writers, each on keys of its own, for d, at s.rate
// messages a second in transactions of ten; a writer takes a poison
// request (its kind) when one waits and writes it, on one of its keys
// not poisoned yet, with heldBacklog messages of the key behind it in one
// transaction. The channel yields every message committed.
func (r *heldRun) write(d time.Duration, poisons <-chan string) <-chan []written {
	out := make(chan []written, 1)
	const writers = 3
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	for g := range writers {
		wg.Go(func() {
			seq := map[string]int{}
			tick := time.NewTicker(10 * writers * time.Second / time.Duration(r.s.rate))
			defer tick.Stop()
			for time.Now().Before(deadline) {
				<-tick.C
				key := func() string { return fmt.Sprintf("k%d", rand.IntN(r.s.keys/writers)*writers+g) }
				var build func() ([]courier.Message, []written, *heldPoison)
				select {
				case kind := <-poisons:
					k := key()
					for r.poisoned(k) {
						k = key()
					}
					build = func() ([]courier.Message, []written, *heldPoison) {
						topic, pad := heldTopic, ""
						if kind == "unbound" {
							topic = lateTopic
						} else {
							pad = " " + strings.Repeat("x", 2*maxMsgSize)
						}
						seq[k]++
						m := courier.NewMessage(topic, k, "Step", []byte(strconv.Itoa(seq[k])+pad))
						msgs, ws := []courier.Message{m}, []written{{id: m.ID.String(), key: k, seq: seq[k], dead: kind}}
						p := &heldPoison{id: m.ID.String(), key: k, kind: kind, seq: seq[k]}
						for range heldBacklog {
							seq[k]++
							m := courier.NewMessage(heldTopic, k, "Step", []byte(strconv.Itoa(seq[k])))
							msgs, ws = append(msgs, m), append(ws, written{id: m.ID.String(), key: k, seq: seq[k]})
						}
						return msgs, ws, p
					}
				default:
					build = func() ([]courier.Message, []written, *heldPoison) {
						msgs, ws := make([]courier.Message, 10), make([]written, 10)
						for i := range msgs {
							k := key()
							seq[k]++
							msgs[i] = courier.NewMessage(heldTopic, k, "Step", []byte(strconv.Itoa(seq[k])))
							ws[i] = written{id: msgs[i].ID.String(), key: k, seq: seq[k]}
						}
						return msgs, ws, nil
					}
				}
				for attempt := 0; ; attempt++ {
					before := maps(seq)
					msgs, ws, p := build()
					began := time.Now()
					err := r.db.write(context.Background(), msgs)
					if err == nil {
						now := time.Now()
						r.mu.Lock()
						r.written = append(r.written, ws...)
						for _, w := range ws {
							r.committed[w.id], r.begun[w.id] = now, began
						}
						if p != nil {
							r.poisons = append(r.poisons, p)
						}
						r.mu.Unlock()
						break
					}
					seq = before // not written: take the numbers back
					if attempt == 100 {
						r.t.Errorf("write: %v", err)
						return
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
		})
	}
	go func() {
		wg.Wait()
		r.mu.Lock()
		defer r.mu.Unlock()
		out <- slices.Clone(r.written)
	}()
	return out
}

// maps returns a copy of m.
func maps(m map[string]int) map[string]int {
	out := make(map[string]int, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func (r *heldRun) poisoned(key string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.ContainsFunc(r.poisons, func(p *heldPoison) bool { return p.key == key })
}

// dead finds the poison messages' dead letters and returns how many hold
// their key.
func (r *heldRun) dead(ctx context.Context) int {
	dls, err := r.db.producerAdmin.DeadLetters(ctx, 10000)
	if err != nil {
		return -1
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, dl := range dls {
		for _, p := range r.poisons {
			if p.id == dl.MessageID && dl.Holds {
				p.cause = dl.ID
				n++
			}
		}
	}
	return n
}

func (r *heldRun) heldKeys(ctx context.Context) []store.HeldKey {
	held, err := r.db.producerAdmin.HeldKeys(ctx, store.ListQuery{})
	if err != nil {
		r.t.Logf("held keys: %v", err)
	}
	return held
}

// release replays the poison dead letters and discards the others, one
// every 300ms, the first of each through the courier command, noting the
// stream's last sequence before each.
func (r *heldRun) release(ctx context.Context) {
	releaseAll(r.t, r.poisons, "relay", r.db.relayURL(9), r.db.producerAdmin, func() uint64 { return r.lastSeq(ctx) })
}

// releaseAll releases the causes of poisons (side "relay": dead letters;
// "consumer": parked deliveries), one every 300ms: it replays half of each
// kind and discards the others, the first replay and the first discard
// through `courier dlq replay|discard side:ID --database-url url`, the
// others through admin. It sets each poison's discard, and its mark to
// what mark returns just before its release.
func releaseAll(t *testing.T, poisons []*heldPoison, side, url string, admin store.Admin, mark func() uint64) {
	ctx := context.Background()
	kinds := map[string]int{}
	cli := map[bool]bool{}
	for _, p := range poisons {
		kinds[p.kind]++
		p.discard = kinds[p.kind]%2 == 0
	}
	for _, p := range poisons {
		time.Sleep(300 * time.Millisecond)
		p.mark, p.released = mark(), time.Now()
		if !cli[p.discard] {
			cli[p.discard] = true
			verb := map[bool]string{false: "replay", true: "discard"}[p.discard]
			out, err := exec.Command(testenv.CourierBinary(t), "dlq", verb, side+":"+strconv.FormatInt(p.cause, 10),
				"--database-url", url).CombinedOutput()
			if err != nil {
				t.Fatalf("courier dlq %s %s:%d: %v\n%s", verb, side, p.cause, err, out)
			}
			p.releaseEnded = time.Now()
			continue
		}
		var err error
		switch {
		case side == "relay" && p.discard:
			err = admin.DiscardDeadLetter(ctx, p.cause)
		case side == "relay":
			err = admin.ReplayDeadLetter(ctx, p.cause)
		case p.discard:
			err = admin.DiscardParked(ctx, p.cause)
		default:
			err = admin.RequestReplay(ctx, p.cause)
		}
		testenv.Must(t, err, fmt.Sprintf("release %s:%d", side, p.cause))
		p.releaseEnded = time.Now()
	}
}

func (r *heldRun) streamInfo(ctx context.Context) *jetstream.StreamInfo {
	for attempt := 0; ; attempt++ {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		st, err := r.js.Stream(cctx, r.stream)
		var info *jetstream.StreamInfo
		if err == nil {
			info, err = st.Info(cctx)
		}
		cancel()
		if err == nil {
			return info
		}
		if attempt == 10 {
			r.t.Fatalf("stream info: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (r *heldRun) lastSeq(ctx context.Context) uint64 { return r.streamInfo(ctx).State.LastSeq }
func (r *heldRun) streamMsgs(ctx context.Context) int { return int(r.streamInfo(ctx).State.Msgs) }

// streamed is a message as the stream holds it: at is its stream sequence.
type streamed struct {
	at      uint64
	id, key string
	seq     int
}

// readStream reads the whole stream, in order.
func (r *heldRun) readStream(ctx context.Context) []streamed {
	t := r.t
	total := r.streamMsgs(ctx)
	cons, err := r.js.OrderedConsumer(ctx, r.stream, jetstream.OrderedConsumerConfig{})
	testenv.Must(t, err, "read the stream")
	var out []streamed
	for len(out) < total {
		batch, err := cons.Fetch(1000, jetstream.FetchMaxWait(5*time.Second))
		testenv.Must(t, err, "read the stream")
		n := 0
		for m := range batch.Messages() {
			n++
			md, err := m.Metadata()
			testenv.Must(t, err, "metadata")
			msg, err := r.mapping.FromNATS(&natsgo.Msg{Subject: m.Subject(), Header: natsgo.Header(m.Headers()), Data: m.Data()})
			testenv.Must(t, err, "decode")
			var seq int
			fmt.Sscan(string(msg.Payload), &seq)
			out = append(out, streamed{at: md.Sequence.Stream, id: msg.ID.String(), key: msg.Key, seq: seq})
		}
		if n == 0 {
			t.Fatalf("read %d of the stream's %d messages", len(out), total)
		}
	}
	return out
}

// checkHeld checks what was applied (got, in order, the stream's or the
// consumer's, by first application) against what was written: every
// message but the discarded poison ones once at least (applied once: by
// its id), none unknown, each key in the order written, and nothing of a
// poison's key after it applied before its release (poison.mark: got's at
// then). It returns the counts.
func checkHeld(t *testing.T, name string, msgs []written, poisons []*heldPoison, got []streamed, dedup bool, committed, begun map[string]time.Time) string {
	t.Helper()
	byID := make(map[string]written, len(msgs))
	bySeq := map[string]map[int]string{} // key → seq → id
	for _, m := range msgs {
		byID[m.id] = m
		if bySeq[m.key] == nil {
			bySeq[m.key] = map[int]string{}
		}
		bySeq[m.key][m.seq] = m.id
	}
	// straddled reports whether the message of key's seq was written by a
	// transaction open while its key's release ran: the bound the release's
	// order documents (store's and relay/cdc's package documentation), not
	// a break of it.
	straddled := func(key string, seq int) bool {
		p, id := poisonOfKey(poisons, key), bySeq[key][seq]
		if p == nil || p.releaseEnded.IsZero() || begun == nil {
			return false
		}
		b, okB := begun[id]
		c, okC := committed[id]
		return okB && okC && b.Before(p.releaseEnded) && c.After(p.released)
	}
	discarded := map[string]bool{}
	poisonOf := map[string]*heldPoison{}
	for _, p := range poisons {
		discarded[p.id] = p.discard
		poisonOf[p.key] = p
	}
	count := map[string]int{}
	last := map[string]int{}
	var unknown, twice, disorder, early, discardedSeen, across int
	report := func(n *int, format string, args ...any) {
		if *n++; *n <= 5 {
			t.Errorf(name+": "+format, args...)
		}
	}
	for _, g := range got {
		m, ok := byID[g.id]
		if !ok {
			report(&unknown, "message %s (key %s) applied, never written", g.id, g.key)
			continue
		}
		if count[g.id]++; count[g.id] > 1 {
			if !dedup {
				report(&twice, "message %s (key %s, seq %d) applied twice", g.id, m.key, m.seq)
			} else {
				twice++
			}
			continue
		}
		if discarded[g.id] {
			report(&discardedSeen, "discarded poison message %s (key %s, seq %d) applied", g.id, m.key, m.seq)
		}
		switch {
		case m.seq > last[m.key]:
		case straddled(m.key, last[m.key]):
			across++
			t.Logf("%s: key %s: seq %d applied after seq %d, whose transaction was open while the key's release ran (the documented bound)", name, m.key, m.seq, last[m.key])
		default:
			report(&disorder, "key %s: seq %d applied after seq %d", m.key, m.seq, last[m.key])
		}
		last[m.key] = max(last[m.key], m.seq)
		if p := poisonOf[m.key]; p != nil && m.seq >= p.seq && g.at <= p.mark && !(m.seq == p.seq && p.discard) {
			report(&early, "key %s held by poison seq %d: seq %d applied at %d, before its release (at %d)", m.key, p.seq, m.seq, g.at, p.mark)
		}
	}
	if disorder+early > 0 {
		// Each such key's messages as applied, seq@position, and when
		// it was committed, from its poison's release, and its poison.
		bad := map[string]bool{}
		for _, g := range got {
			if m, ok := byID[g.id]; ok && poisonOf[m.key] != nil {
				bad[m.key] = true
			}
		}
		for k := range bad {
			var order []string
			for _, g := range got {
				if g.key == k {
					e := fmt.Sprintf("%d@%d", g.seq, g.at)
					if c, ok := committed[g.id]; ok {
						e += fmt.Sprintf("(%+.3fs)", c.Sub(poisonOf[k].released).Seconds())
					}
					order = append(order, e)
				}
			}
			p := poisonOf[k]
			t.Logf("%s: key %s, poison seq %d (%s, discarded %t, released at %d), as applied: %v", name, k, p.seq, p.kind, p.discard, p.mark, order)
		}
	}
	lost := 0
	for _, m := range msgs {
		if count[m.id] == 0 && !discarded[m.id] {
			report(&lost, "message %s (key %s, seq %d) never applied", m.id, m.key, m.seq)
		}
	}
	return fmt.Sprintf("%d applied of %d written: %d lost, %d unknown, %d out of key order (and %d behind a message whose transaction was open across its key's release), %d before their key's release, %d discarded applied; %d applied again (skipped by id)",
		len(count), len(msgs), lost, unknown, disorder, across, early, discardedSeen, twice)
}

// heldConsumerRole is the role of the consumer process of TestHeldKeys's
// consumer runs.
const heldConsumerRole = "held-consumer"

// heldConsumerName is that consumer's name.
const heldConsumerName = "held"

// runHeldConsumer is an inbox consumer with KeepOrder and HoldKeys on its
// topic, one delivery in flight, whose handler fails for the messages the
// poison table names (how: "malformed" parks at once, else a plain error,
// parked after MaxDeliveries) and records the others in effects.
func runHeldConsumer(ctx context.Context, log *slog.Logger) error {
	nc, err := couriernats.Connect(os.Getenv(envNATS))
	if err != nil {
		return err
	}
	defer nc.Close()
	topic := os.Getenv(envTopic)
	sub, err := couriernats.NewSubscriber(ctx, nc, couriernats.SubscriberConfig{
		Config: couriernats.Config{SubjectPrefix: os.Getenv(envPrefix)}, Stream: os.Getenv(envStream),
		Consumer: heldConsumerName, Topics: []string{topic}, AckWait: 2 * time.Second, MaxAckPending: 1,
	})
	if err != nil {
		return err
	}
	defer sub.Close()
	db, err := openDatabase(ctx, os.Getenv(envDB))
	if err != nil {
		return err
	}
	defer db.Close()
	cfg := inbox.ConsumerConfig{KeepOrder: true, HoldKeys: []string{topic}, Concurrency: 8, MaxDeliveries: 3, Group: groupedCommits,
		Backoff: courier.Backoff{Initial: 20 * time.Millisecond, Max: 200 * time.Millisecond}, ExtendEvery: 500 * time.Millisecond,
		ReplayEvery: 200 * time.Millisecond, Logger: log}
	return consume(ctx, db.Inbox(), heldConsumerName, sub, db.ConsumerStore(), poisonedEffect(db), cfg)
}

// poisonedEffect is applyEffect, but for the messages the poison table
// names, for which it fails.
func poisonedEffect[TTx any](db store.Driver[TTx]) inbox.Handler[TTx] {
	apply := applyEffect(db)
	return func(ctx context.Context, tx TTx, msg courier.Message) error {
		var n int
		if err := db.QueryRow(ctx, tx, "SELECT count(*) FROM poison WHERE message_id = ? AND how = 'malformed'", []any{&n}, msg.ID.String()); err != nil {
			return err
		}
		if n > 0 {
			return fmt.Errorf("%w: poison message %s", courier.ErrMalformed, msg.ID)
		}
		if err := db.QueryRow(ctx, tx, "SELECT count(*) FROM poison WHERE message_id = ?", []any{&n}, msg.ID.String()); err != nil {
			return err
		}
		if n > 0 {
			return fmt.Errorf("poison message %s fails", msg.ID)
		}
		return apply(ctx, tx, msg)
	}
}

func heldConsumer(t *testing.T, d dialect, s heldSettings) {
	began := time.Now()
	ctx := context.Background()
	db := d.setup(t)
	_, err := db.consumer.ExecContext(ctx, `CREATE TABLE poison (message_id VARCHAR(36) PRIMARY KEY, how VARCHAR(16) NOT NULL)`)
	testenv.Must(t, err, "poison table")
	natsURL := testenv.NATSOrEmbedded(t)
	nc := testenv.Connect(t, natsURL)
	js, err := jetstream.New(nc)
	testenv.Must(t, err, "jetstream")
	stream := testenv.Name("HELDC")
	mapping := couriernats.Config{SubjectPrefix: strings.ToLower(stream) + "."}
	const topic = "ledger"
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{mapping.SubjectPrefix + topic}, Storage: jetstream.FileStorage})
	testenv.Must(t, err, "create the stream")
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), stream) })
	pub, err := couriernats.NewPublisher(nc, couriernats.PublisherConfig{Config: mapping})
	testenv.Must(t, err, "publisher")

	logs, err := os.Create(filepath.Join(t.TempDir(), "consumer.log"))
	testenv.Must(t, err, "log file")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("last lines of the consumer's log:\n%s", lastLines(logs.Name(), 30))
		}
		logs.Close()
	})
	proc := &testenv.Proc{Name: "consumer", Stderr: logs, Env: []string{envRole + "=" + heldConsumerRole, envDB + "=" + db.consumerURL(0),
		envNATS + "=" + natsURL, envPrefix + "=" + mapping.SubjectPrefix, envStream + "=" + stream, envTopic + "=" + topic, envLogLevel + "=warn"}}
	stop := make(chan struct{})
	var procs sync.WaitGroup
	proc.Supervise(t, stop, &procs)
	stopConsumer := sync.OnceFunc(func() { close(stop); procs.Wait() })
	t.Cleanup(stopConsumer)
	kills := killEvery([]*testenv.Proc{proc}, 2*time.Second, 4*time.Second)
	defer kills()

	// The publisher: one goroutine, batches of ten in order, a poison
	// message when asked, with its backlog behind it.
	rate := s.rate / 2 // one delivery in flight: the consumer's pace
	poisonReq := make(chan string, s.consumerPoisons)
	var mu sync.Mutex
	var poisons []*heldPoison
	published := make(chan []written, 1)
	go func() {
		var all []written
		defer func() { published <- all }()
		seq := map[string]int{}
		next := func(k string) (courier.Message, written) {
			seq[k]++
			m := courier.NewMessage(topic, k, "Step", []byte(strconv.Itoa(seq[k])))
			return m, written{id: m.ID.String(), key: k, seq: seq[k]}
		}
		tick := time.NewTicker(10 * time.Second / time.Duration(rate))
		defer tick.Stop()
		for deadline := time.Now().Add(s.runFor); time.Now().Before(deadline); {
			<-tick.C
			var msgs []courier.Message
			var ws []written
			select {
			case how := <-poisonReq:
				k := fmt.Sprintf("k%d", rand.IntN(s.keys))
				for slices.ContainsFunc(poisons, func(p *heldPoison) bool { return p.key == k }) {
					k = fmt.Sprintf("k%d", rand.IntN(s.keys))
				}
				m, w := next(k)
				w.dead = how
				if _, err := db.consumer.ExecContext(ctx, "INSERT INTO poison (message_id, how) VALUES ('"+w.id+"', '"+how+"')"); err != nil {
					t.Errorf("poison %s: %v", w.id, err)
					return
				}
				mu.Lock()
				poisons = append(poisons, &heldPoison{id: w.id, key: k, kind: how, seq: w.seq})
				mu.Unlock()
				msgs, ws = append(msgs, m), append(ws, w)
				for range heldBacklog {
					m, w := next(k)
					msgs, ws = append(msgs, m), append(ws, w)
				}
			default:
				for range 10 {
					m, w := next(fmt.Sprintf("k%d", rand.IntN(s.keys)))
					msgs, ws = append(msgs, m), append(ws, w)
				}
			}
			for i, err := range pub.Publish(ctx, msgs) {
				if err != nil {
					// A retry could reorder the key: NATS is not disturbed here.
					t.Errorf("publish %s: %v", msgs[i].ID, err)
					return
				}
			}
			all = append(all, ws...)
		}
	}()
	for i := range s.consumerPoisons {
		time.Sleep(s.runFor / 3 / time.Duration(s.consumerPoisons))
		poisonReq <- map[bool]string{false: "malformed", true: "failing"}[i%2 == 1]
	}

	applied := func() uint64 {
		var n uint64
		testenv.Must(t, db.consumer.QueryRowContext(ctx, `SELECT coalesce(max(n), 0) FROM effects`).Scan(&n), "effects")
		return n
	}
	parked := func() []store.Parked {
		ps, err := db.consumerAdmin.Parked(ctx, heldConsumerName, 10000)
		testenv.Must(t, err, "parked")
		return ps
	}
	// Every poison message is parked and holds its key: its backlog is
	// parked behind it.
	testenv.WhileProgressing(t, 30*time.Second, func() (bool, any) {
		mu.Lock()
		defer mu.Unlock()
		ps := parked()
		held := map[int64]int{}
		for _, p := range ps {
			if p.Reason == store.ReasonHeld {
				held[p.Behind]++
			}
		}
		n := 0
		for _, pz := range poisons {
			for _, p := range ps {
				if p.MessageID == pz.id && p.Behind == 0 && p.Reason != store.ReasonHeld {
					pz.cause = p.ID
					if held[p.ID] >= heldBacklog {
						n++
					}
				}
			}
		}
		return len(poisons) == s.consumerPoisons && n == len(poisons), fmt.Sprintf("%d of %d poison messages parked with their backlog behind them; %d parked in all", n, len(poisons), len(ps))
	}, "%s: the poison messages do not hold their keys", d.name)
	heldFrom := applied()
	t.Logf("%s: %d poison messages parked, holding their keys, at +%.1fs", d.name, s.consumerPoisons, time.Since(began).Seconds())
	for _, p := range parked() {
		if p.Reason != store.ReasonHeld && !slices.ContainsFunc(poisons, func(pz *heldPoison) bool { return pz.id == p.MessageID }) {
			t.Errorf("%s: message %s (key %s) parked, not a poison message: %s: %s", d.name, p.MessageID, p.Key, p.Reason, p.Error)
		}
	}
	for deadAt := time.Now(); time.Since(began) < s.runFor/2 || time.Since(deadAt) < 3*time.Second; {
		time.Sleep(100 * time.Millisecond)
	}
	heldTo := applied()

	// The cure, then the releases, while the publisher publishes and the
	// consumer dies.
	_, err = db.consumer.ExecContext(ctx, `DELETE FROM poison`)
	testenv.Must(t, err, "cure the handler")
	releaseAll(t, poisons, "consumer", db.consumerURL(0), db.consumerAdmin, applied)
	msgs := <-published
	discarded := 0
	for _, p := range poisons {
		if p.discard {
			discarded++
		}
	}
	t.Logf("%s: released at +%.1fs; %d messages published", d.name, time.Since(began).Seconds(), len(msgs))
	testenv.WhileProgressing(t, 60*time.Second, func() (bool, any) {
		var n int
		testenv.Must(t, db.consumer.QueryRowContext(ctx, `SELECT count(DISTINCT message_id) FROM effects`).Scan(&n), "effects")
		ps := parked()
		return n >= len(msgs)-discarded && len(ps) == 0, fmt.Sprintf("%d of %d applied, %d parked", n, len(msgs)-discarded, len(ps))
	}, "%s: the consumer does not settle", d.name)
	kills()
	stopConsumer()

	rows, err := db.consumer.QueryContext(ctx, `SELECT n, message_id, k, seq FROM effects ORDER BY n`)
	testenv.Must(t, err, "read effects")
	var got []streamed
	for rows.Next() {
		var g streamed
		testenv.Must(t, rows.Scan(&g.at, &g.id, &g.key, &g.seq), "scan effect")
		got = append(got, g)
	}
	testenv.Must(t, rows.Err(), "effects")
	rows.Close()
	res := checkHeld(t, d.name, msgs, poisons, got, false, nil, nil)
	poisoned := map[string]bool{}
	for _, p := range poisons {
		poisoned[p.key] = true
	}
	others := 0
	for _, g := range got {
		if g.at > heldFrom && g.at <= heldTo && !poisoned[g.key] {
			others++
		}
	}
	if others == 0 {
		t.Errorf("%s: no message of another key was applied while the poison messages held their keys", d.name)
	}
	t.Logf("summary consumer/%s: %d messages over %d keys, %d poison (%d replayed, %d discarded), %d consumer processes; %s; %d messages of other keys applied while held; %s in all",
		d.name, len(msgs), s.keys, len(poisons), len(poisons)-discarded, discarded, proc.Runs(), res, others, time.Since(began).Round(100*time.Millisecond))
}

// poisonOfKey returns the poison message of key, nil when key has none.
func poisonOfKey(poisons []*heldPoison, key string) *heldPoison {
	for _, p := range poisons {
		if p.key == key {
			return p
		}
	}
	return nil
}
