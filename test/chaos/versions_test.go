package chaos

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/courier-go/courier"
	couriernats "github.com/courier-go/courier/broker/nats"
	"github.com/courier-go/courier/inbox"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/store/postgres"
)

// The role of TestConsumersUpgradedMidStream's consumer processes.
const (
	versionedConsumerRole = "versioned-consumer"
	envKnows              = "COURIER_CHAOS_KNOWS" // the newest version of ChargeRequested the consumer knows: 1 or 2
)

// Version 1 of ChargeRequested: an amount in cents.
type chargeV1 struct {
	Seq   int `json:"seq"`
	Cents int `json:"cents"`
}

func (chargeV1) MessageType() string { return "ChargeRequested" }

// Version 2: the amount with its currency.
type chargeV2 struct {
	Seq    int   `json:"seq"`
	Amount money `json:"amount"`
}

type money struct {
	Cents    int    `json:"cents"`
	Currency string `json:"currency"`
}

func (chargeV2) MessageType() string { return "ChargeRequested" }
func (chargeV2) MessageVersion() int { return 2 }

// The consumers' settings: a message newer than the consumer knows waits
// far longer than the upgrade takes, and two counted failures would park
// one, so a wait that counted would show.
const (
	versionsMaxDeliveries = 2
	versionsNewerWait     = 3 * time.Minute
)

// runVersionedConsumer is consumer "billing" of the topic, knowing
// ChargeRequested up to version envKnows: version 1 alone, or an upcaster
// of version 1 (in euros) and the handler of version 2. Each application
// is a row in charges, saying which consumer applied what.
func runVersionedConsumer(ctx context.Context, log *slog.Logger) error {
	knows, _ := strconv.Atoi(os.Getenv(envKnows))
	nc, err := couriernats.Connect(os.Getenv(envNATS))
	if err != nil {
		return err
	}
	defer nc.Close()
	sub, err := couriernats.NewSubscriber(ctx, nc, couriernats.SubscriberConfig{
		Config: couriernats.Config{SubjectPrefix: os.Getenv(envPrefix)}, Stream: os.Getenv(envStream),
		Consumer: "billing", Topics: []string{os.Getenv(envTopic)}, AckWait: 3 * time.Second,
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
	apply := func(ctx context.Context, tx *sql.Tx, msg courier.Message, seq, cents int, currency string) error {
		_, err := db.Exec(ctx, tx, "INSERT INTO charges (message_id, seq, cents, currency, version_seen, knows) VALUES (?, ?, ?, ?, ?, ?)",
			msg.ID.String(), seq, cents, currency, msg.Version, knows)
		return err
	}
	r := inbox.NewRouter[*sql.Tx]()
	if knows == 1 {
		inbox.On(r, func(ctx context.Context, tx *sql.Tx, msg courier.Message, v chargeV1) error {
			return apply(ctx, tx, msg, v.Seq, v.Cents, "")
		})
	} else {
		inbox.Upcast(r, func(v chargeV1) (chargeV2, error) {
			return chargeV2{Seq: v.Seq, Amount: money{Cents: v.Cents, Currency: "EUR"}}, nil
		})
		inbox.On(r, func(ctx context.Context, tx *sql.Tx, msg courier.Message, v chargeV2) error {
			return apply(ctx, tx, msg, v.Seq, v.Amount.Cents, v.Amount.Currency)
		})
	}
	cfg := inbox.ConsumerConfig{Concurrency: 4, MaxDeliveries: versionsMaxDeliveries, NewerVersionWait: versionsNewerWait, Group: groupedCommits,
		Backoff: courier.Backoff{Initial: 20 * time.Millisecond, Max: 200 * time.Millisecond}, Logger: log}
	return consume(ctx, db.Inbox(), "billing", sub, db.ConsumerStore(), r.Handler(), cfg)
}

// TestConsumersUpgradedMidStream deploys a new version of an event
// producer first, as a rolling deploy may: a writer commits ChargeRequested
// version 1 while two consumer processes know only version 1, then switches
// to version 2; once an old consumer has retried one version 2 message more
// often than MaxDeliveries, the consumers are replaced one at a time by ones
// that know version 2 (SIGKILLed, not stopped), which are then SIGKILLed
// and restarted in a loop while the writer goes on, writing both versions
// (half its instances deployed), then only version 2. Every message is
// applied exactly once and never wrongly: version 2 only by a consumer that
// knows it, with its currency; version 1 as it was written, upcast to euros
// by the new consumers. Nothing is parked: the waits did not count.
func TestConsumersUpgradedMidStream(t *testing.T) {
	t.Parallel()
	pg := testenv.Postgres(t, testenv.Migrate(postgres.NewDriver))
	ctx := context.Background()
	_, err := pg.Pool.Exec(ctx, `CREATE TABLE charges (message_id uuid NOT NULL, seq int NOT NULL, cents int NOT NULL,
currency text NOT NULL, version_seen int NOT NULL, knows int NOT NULL)`)
	testenv.Must(t, err, "charges table")
	natsURL := testenv.NATSOrEmbedded(t)
	nc := testenv.Connect(t, natsURL)
	stream := testenv.Name("VERSIONS")
	mapping := couriernats.Config{SubjectPrefix: strings.ToLower(stream) + "."}
	testenv.Must(t, couriernats.EnsureStream(ctx, nc, mapping, couriernats.StreamConfig{Name: stream}), "stream")

	relays := newRelayProcs(t, "relay", "--database-url", pg.URL, "--broker-url", natsURL, "--stream", stream,
		"--subject-prefix", mapping.SubjectPrefix, "--log-format", "text", "--log-level", "warn")
	relay := relays.start()
	defer func() { _ = relay.Process.Kill(); _ = relay.Wait() }()
	consumers := &versionedConsumers{t: t, logs: relays.logs, env: []string{envRole + "=" + versionedConsumerRole, envDB + "=" + pg.URL,
		envNATS + "=" + natsURL, envPrefix + "=" + mapping.SubjectPrefix, envStream + "=" + stream, envTopic + "=billing"}}
	defer consumers.killAll()
	a, b := consumers.start(1), consumers.start(1)

	w := &chargeWriter{d: postgres.NewDriver(pg.Pool)}
	w.phase.Store(1)
	writing, stopWriting := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { w.write(writing, t) })
	applied := func(where string) int {
		var n int
		testenv.Must(t, pg.Pool.QueryRow(ctx, "SELECT count(*) FROM charges WHERE "+where).Scan(&n), "count charges")
		return n
	}
	logs := func() any { return lastLines(relays.logs.Name(), 30) }

	testenv.WhileProgressing(t, 30*time.Second, func() (bool, any) { n := applied("knows = 1"); return n >= 200, n },
		"the old consumers applied fewer than 200; log:\n%s", testenv.Lazy(logs))
	w.phase.Store(2) // the producer is deployed first, one instance after the other
	testenv.Eventually(t, time.Minute, func() bool { return mostWaits(relays.logs.Name()) > versionsMaxDeliveries },
		"no old consumer retried a version 2 message more than %d times; log:\n%s", versionsMaxDeliveries, testenv.Lazy(logs))
	waitsBefore := mostWaits(relays.logs.Name())

	// The rolling upgrade, one consumer at a time.
	consumers.kill(a)
	consumers.start(2)
	testenv.Eventually(t, time.Minute, func() bool { return applied("knows = 2 AND version_seen = 2") > 0 },
		"the upgraded consumer applied nothing; log:\n%s", testenv.Lazy(logs))
	consumers.kill(b)
	consumers.start(2)
	// Then the new ones crash and restart while the writer goes on.
	for i := range 8 {
		time.Sleep(time.Duration(500+rand.IntN(1500)) * time.Millisecond)
		consumers.kill(consumers.any())
		consumers.start(2)
		if i == 4 {
			w.phase.Store(3) // every producer instance writes version 2
		}
	}
	stopWriting()
	wg.Wait()
	written := w.written()
	testenv.WhileProgressing(t, 30*time.Second, func() (bool, any) { n := applied("true"); return n >= len(written), n },
		"applied of %d; log:\n%s", len(written), testenv.Lazy(logs))
	consumers.killAll()

	upcast := checkCharges(t, pg, written)
	if upcast == 0 {
		t.Error("no version 1 charge was upcast: the writer wrote both versions after the upgrade")
	}
	var parked int
	testenv.Must(t, pg.Pool.QueryRow(ctx, "SELECT count(*) FROM courier_inbox_dead_letters").Scan(&parked), "parked")
	if parked != 0 {
		t.Errorf("%d messages parked: the waits for the upgrade counted", parked)
	}
	var v1, v2 int
	for _, c := range written {
		if c.version == 1 {
			v1++
		} else {
			v2++
		}
	}
	t.Logf("%d charges (%d version 1, %d of them upcast by upgraded consumers; %d version 2); %d consumer processes, %d SIGKILLed; an old consumer retried one version 2 message %d times (MaxDeliveries %d) before the upgrade; none parked, none applied twice or wrongly",
		len(written), v1, upcast, v2, consumers.runs, consumers.kills, waitsBefore, versionsMaxDeliveries)
}

// checkCharges fails unless each written charge was applied once, as
// written: version 2 by a consumer that knows it; version 1 as version 1
// by an old consumer, or upcast to euros by a new one. It returns how many
// were upcast.
func checkCharges(t *testing.T, pg *testenv.PG, written []writtenCharge) (upcast int) {
	t.Helper()
	rows, err := pg.Pool.Query(context.Background(), "SELECT message_id::text, seq, cents, currency, version_seen, knows FROM charges")
	testenv.Must(t, err, "read charges")
	type charge struct {
		id                      string
		seq, cents, seen, knows int
		currency                string
	}
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (charge, error) {
		var c charge
		return c, r.Scan(&c.id, &c.seq, &c.cents, &c.currency, &c.seen, &c.knows)
	})
	testenv.Must(t, err, "read charges")
	byID := map[string][]charge{}
	for _, c := range got {
		byID[c.id] = append(byID[c.id], c)
	}
	for _, w := range written {
		cs := byID[w.msg.ID.String()]
		if len(cs) != 1 {
			t.Errorf("charge %d (version %d) applied %d times", w.seq, w.version, len(cs))
			continue
		}
		c := cs[0]
		ok := c.seq == w.seq && c.cents == w.cents
		switch {
		case w.version == 2:
			ok = ok && c.knows == 2 && c.seen == 2 && c.currency == w.currency
		case c.knows == 1:
			ok = ok && c.seen == 1 && c.currency == ""
		default:
			ok = ok && c.seen == 2 && c.currency == "EUR"
			upcast++
		}
		if !ok {
			t.Errorf("charge %d written as version %d (%d %s) applied as %+v", w.seq, w.version, w.cents, w.currency, c)
		}
	}
	if len(got) != len(written) {
		t.Errorf("%d charges applied for %d written", len(got), len(written))
	}
	return upcast
}

// writtenCharge is a charge the writer committed.
type writtenCharge struct {
	msg      courier.Message
	seq      int
	version  int
	cents    int
	currency string
}

// chargeWriter commits one ChargeRequested per transaction, about 200 a
// second over 100 keys, of the versions of its phase (next).
type chargeWriter struct {
	d     postgres.Driver
	phase atomic.Int32
	mu    sync.Mutex
	out   []writtenCharge
}

func (w *chargeWriter) write(ctx context.Context, t *testing.T) {
	ow := outbox.New(w.d.Inserter(), outbox.Config{})
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for seq := 0; ; seq++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		c := writtenCharge{seq: seq, version: w.next(), cents: 100 + rand.IntN(10_000)}
		var v any = chargeV1{Seq: seq, Cents: c.cents}
		if c.version == 2 {
			c.currency = []string{"USD", "EUR", "JPY"}[rand.IntN(3)]
			v = chargeV2{Seq: seq, Amount: money{Cents: c.cents, Currency: c.currency}}
		}
		msg, err := courier.NewJSON("billing", fmt.Sprintf("order-%d", seq%100), v)
		if err != nil || msg.Version != c.version {
			t.Errorf("NewJSON(%T): version %d, %v", v, msg.Version, err)
			return
		}
		c.msg = msg
		// Not cut short by the stop: what committed is what was written.
		wctx := context.WithoutCancel(ctx)
		if err := w.d.InTx(wctx, func(tx pgx.Tx) error { return ow.Write(wctx, tx, msg) }); err != nil {
			t.Errorf("write: %v", err)
			return
		}
		w.mu.Lock()
		w.out = append(w.out, c)
		w.mu.Unlock()
	}
}

// next returns the version of the next charge: in phase 1 version 1; in
// phase 2 (half the producer's instances deployed) either; in phase 3
// version 2.
func (w *chargeWriter) next() int {
	switch w.phase.Load() {
	case 1:
		return 1
	case 2:
		return 1 + rand.IntN(2)
	}
	return 2
}

func (w *chargeWriter) written() []writtenCharge {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.out
}

// versionedConsumers are the consumer processes of the test, logging into
// one file.
type versionedConsumers struct {
	t           *testing.T
	logs        *os.File
	env         []string
	live        []*exec.Cmd
	runs, kills int
}

// start starts a consumer that knows versions up to knows.
func (c *versionedConsumers) start(knows int) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), c.env...), envKnows+"="+strconv.Itoa(knows))
	cmd.Stderr = c.logs
	testenv.Must(c.t, cmd.Start(), "start a consumer")
	c.live = append(c.live, cmd)
	c.runs++
	return cmd
}

// any returns one of the live consumers.
func (c *versionedConsumers) any() *exec.Cmd { return c.live[rand.IntN(len(c.live))] }

// kill SIGKILLs cmd.
func (c *versionedConsumers) kill(cmd *exec.Cmd) {
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	for i, l := range c.live {
		if l == cmd {
			c.live = append(c.live[:i], c.live[i+1:]...)
			break
		}
	}
	c.kills++
}

// killAll SIGKILLs the live consumers.
func (c *versionedConsumers) killAll() {
	for len(c.live) > 0 {
		c.kill(c.live[0])
		c.kills--
	}
}

// waitLine finds a consumer's log of a run that met a message newer than it
// knows, and the message's id.
var waitLine = regexp.MustCompile(`waiting for its deploy".*? message_id=(\S+)`)

// mostWaits returns the most such runs the log shows of one message.
func mostWaits(path string) int {
	n := map[string]int{}
	most := 0
	for _, m := range waitLine.FindAllStringSubmatch(readFile(path), -1) {
		n[m[1]]++
		most = max(most, n[m[1]])
	}
	return most
}
