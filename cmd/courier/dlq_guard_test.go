package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/alecthomas/kong"

	"github.com/courier-go/courier"
	couriernats "github.com/courier-go/courier/broker/nats"
	"github.com/courier-go/courier/inbox"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/relay"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/sqlite"
)

// seedRelayLetter inserts relay dead letter id of topic, written at now
// (the dialect's SQL of the current time).
func seedRelayLetter(t *testing.T, d dlqDatabase, id int, topic string) {
	t.Helper()
	_, err := d.db.Exec(fmt.Sprintf(`INSERT INTO courier_outbox_dead_letters
    (id, message_id, topic, ordering_key, type, version, content_type, payload, occurred_at, created_at, attempts, last_error, dead_at)
VALUES (%d, '01939f3a-0000-7000-8000-%012d', '%s', 'k%d', 'OrderPlaced', 1, '', 'x', %s, %s, 1, 'no stream', %s)`, id, id, topic, id, d.now, d.now, d.now))
	testenv.Must(t, err, "seed relay dead letter")
}

// listRuns returns the runs courier dlq runs --json prints.
func listRuns(t *testing.T, url string) []store.ReplayRun {
	t.Helper()
	code, out, errOut := runCLI(t, "dlq", "runs", "--json", "--database-url", url)
	if code != 0 {
		t.Fatalf("dlq runs --json: %d %s", code, errOut)
	}
	var runs []store.ReplayRun
	testenv.Must(t, json.Unmarshal([]byte(out), &runs), "decode dlq runs --json")
	return runs
}

// On every dialect: --dry-run lists by group and changes nothing; a canary
// without an outcome (no relay runs) stops the run with the rest left,
// recorded in courier_replay_runs and shown by dlq runs; a consumer letter
// parked longer ago than --retention is refused unless --force.
func TestDLQReplayGuarded(t *testing.T) {
	for name, open := range dlqDatabases(t) {
		t.Run(name, func(t *testing.T) { testDLQReplayGuarded(t, open(t)) })
	}
}

func testDLQReplayGuarded(t *testing.T, d dlqDatabase) {
	for _, q := range d.seed {
		_, err := d.db.Exec(q)
		testenv.Must(t, err, "seed dead letters")
	}
	for id := 51; id <= 54; id++ {
		seedRelayLetter(t, d, id, "orders")
	}
	db := []string{"--database-url", d.url}
	code, out, errOut := runCLI(t, append([]string{"dlq", "replay", "--side", "relay", "--dry-run", "--canary", "2", "--wait", "5s", "--rate", "10"}, db...)...)
	if code != 0 || !strings.Contains(out, "(relay): 4 dead letter(s)") || !strings.Contains(out, "(relay): 1 dead letter(s)") ||
		!strings.Contains(out, "guards: canary 2, rate 10/s, wait 5s") || !strings.Contains(out, "2 group(s); 5 dead letter(s) would be replayed (--dry-run: nothing changed)") {
		t.Fatalf("dry run: %d\n%s%s", code, out, errOut)
	}
	if d.count(t, "courier_outbox") != 0 || d.count(t, "courier_outbox_dead_letters") != 5 || len(listRuns(t, d.url)) != 0 {
		t.Fatal("the dry run changed something")
	}
	if code, out, _ := runCLI(t, append([]string{"dlq", "runs"}, db...)...); code != 0 || !strings.Contains(out, "no replay runs") {
		t.Fatalf("dlq runs before any: %d %s", code, out)
	}

	// No relay runs: the canary has no outcome in its wait, and the run
	// stops with the others left as they were.
	code, out, errOut = runCLI(t, append([]string{"dlq", "replay", "relay:51", "relay:52", "relay:53", "--canary", "1", "--wait", "300ms"}, db...)...)
	if code != 1 || !strings.Contains(errOut, "1 of the 1 canary replay(s) had no outcome after 300ms; 2 left unreplayed") ||
		!strings.Contains(errOut, "(1 replayed, 0 failed again, 2 left)") || !strings.Contains(out, "relay:51         not published after 300ms") ||
		!strings.Contains(errOut, "replay run: finished: 1 of 3 replayed") {
		t.Fatalf("canary without a relay: %d\n%s%s", code, out, errOut)
	}
	if d.count(t, "courier_outbox") != 1 || d.count(t, "courier_outbox_dead_letters") != 4 {
		t.Fatal("the canary replayed more than one letter")
	}
	runs := listRuns(t, d.url)
	if len(runs) != 1 {
		t.Fatalf("runs: %+v", runs)
	}
	r := runs[0]
	if r.State != store.RunStopped || r.Side != "relay" || r.Total != 3 || r.Replayed != 1 || r.Failed != 0 || r.Left != 2 || r.FinishedAt == nil ||
		r.Selection != "courier dlq replay: relay:51 relay:52 relay:53; canary 1, wait 300ms" || !strings.Contains(r.Note, "canary") {
		t.Fatalf("the run recorded: %+v", r)
	}
	code, out, _ = runCLI(t, append([]string{"dlq", "runs"}, db...)...)
	if code != 0 || !strings.Contains(out, "RUN") || !strings.Contains(out, "stopped") || !strings.Contains(out, "relay:51 relay:52") {
		t.Fatalf("dlq runs: %d\n%s", code, out)
	}

	// The consumer letter was parked a moment ago: longer than a
	// retention of 1ms, so refused without --force, replayed with it.
	code, _, errOut = runCLI(t, append([]string{"dlq", "replay", "consumer:1", "--retention", "1ms"}, db...)...)
	if code != 1 || !strings.Contains(errOut, "consumer:1 (parked ") || !strings.Contains(errOut, "marker retention (1ms)") || !strings.Contains(errOut, "--force") {
		t.Fatalf("replay beyond the retention: %d %s", code, errOut)
	}
	if n := len(listRuns(t, d.url)); n != 1 {
		t.Fatalf("a refused replay recorded a run: %d runs", n)
	}
	code, out, _ = runCLI(t, append([]string{"dlq", "replay", "consumer:1", "--retention", "1ms", "--dry-run"}, db...)...)
	if code != 0 || !strings.Contains(out, "beyond the retention: needs --force") {
		t.Fatalf("dry run beyond the retention: %d %s", code, out)
	}
	code, out, errOut = runCLI(t, append([]string{"dlq", "replay", "consumer:1", "--retention", "1ms", "--force"}, db...)...)
	if code != 0 || !strings.Contains(out, "consumer:1: replay requested") {
		t.Fatalf("forced replay: %d %s%s", code, out, errOut)
	}
	// Within the default retention (7 days) it needs no --force.
	code, out, errOut = runCLI(t, append([]string{"dlq", "replay", "consumer:1"}, db...)...)
	if code != 0 || !strings.Contains(out, "consumer:1: replay requested") {
		t.Fatalf("replay within the retention: %d %s%s", code, out, errOut)
	}
	if runs := listRuns(t, d.url); len(runs) != 3 || runs[0].State != store.RunDone || runs[0].Side != "consumer" || runs[0].Replayed != 1 {
		t.Fatalf("runs after the consumer replays: %+v", runs)
	}
}

// Bad combinations of the guards are refused before anything is opened,
// naming the flag and the fix.
func TestDLQReplayGuardFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--canary", "2"}, "--canary needs --wait"},
		{[]string{"--stop-on-failure"}, "--stop-on-failure needs --wait"},
		{[]string{"--canary=-1", "--wait", "1s"}, "--canary is -1"},
		{[]string{"--rate=-5"}, "--rate is -5"},
	} {
		code, _, errOut := runCLI(t, append([]string{"dlq", "replay", "--all", "--database-url", "sqlite:///nonexistent/x.db"}, c.args...)...)
		if code == 0 || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: %d %q, want %q", c.args, code, errOut, c.want)
		}
	}
}

// dlq replay --retention and dashboard --inbox-retention default to the
// inbox's marker retention.
func TestDLQReplayRetentionDefault(t *testing.T) {
	var c cli
	parser, err := kong.New(&c, kong.Name("courier"), kong.Writers(io.Discard, io.Discard), helpVars())
	testenv.Must(t, err, "parser")
	_, err = parser.Parse([]string{"dlq", "replay", "--all"})
	testenv.Must(t, err, "parse")
	if c.DLQ.Replay.Retention != inbox.DefaultRetention {
		t.Fatalf("dlq replay --retention defaults to %s, want inbox.DefaultRetention (%s)", c.DLQ.Replay.Retention, inbox.DefaultRetention)
	}
	_, err = parser.Parse([]string{"dashboard"})
	testenv.Must(t, err, "parse")
	if c.Dashboard.Retention != inbox.DefaultRetention || c.Dashboard.inboxRetention() != inbox.DefaultRetention {
		t.Fatalf("dashboard --inbox-retention defaults to %s, want inbox.DefaultRetention (%s)", c.Dashboard.Retention, inbox.DefaultRetention)
	}
	c.Dashboard.Retention = 0
	if c.Dashboard.inboxRetention() >= 0 {
		t.Fatal("dashboard --inbox-retention 0 (markers never deleted) is not a negative Config.InboxRetention")
	}
}

// With a relay running: a canary that fails again stops the run, one that
// is published lets it go on; --stop-on-failure stops when a replayed
// letter fails again, with the counts the database then holds.
func TestDLQReplayCanaryRelay(t *testing.T) {
	d := dlqDatabases(t)["sqlite"](t)
	seedRelayLetter(t, d, 1, "nowhere") // no stream binds it: it fails again
	for id := 2; id <= 5; id++ {
		seedRelayLetter(t, d, id, "orders")
	}
	for id := 10; id <= 19; id++ {
		topic := "orders"
		if id == 12 {
			topic = "nowhere"
		}
		seedRelayLetter(t, d, id, topic)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv := testenv.EmbeddedNATS(t)
	nc := testenv.Connect(t, srv.ClientURL())
	mapping := couriernats.Config{SubjectPrefix: "orders-only."}
	testenv.Must(t, couriernats.EnsureStream(ctx, nc, mapping, couriernats.StreamConfig{Subjects: []string{"orders-only.orders"}}), "stream")
	pub, err := couriernats.NewPublisher(nc, couriernats.PublisherConfig{Config: mapping})
	testenv.Must(t, err, "publisher")
	st, err := sqlite.NewStore(ctx, d.db, sqlite.StoreConfig{})
	testenv.Must(t, err, "store")
	r, err := relay.New(st, pub, relay.Config{MaxAttempts: 1, PollInterval: 50 * time.Millisecond})
	testenv.Must(t, err, "relay")
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	defer func() { cancel(); <-done }()
	db := []string{"--database-url", d.url}

	code, out, errOut := runCLI(t, append([]string{"dlq", "replay", "relay:1", "relay:2", "relay:3", "relay:4", "relay:5", "--canary", "1", "--wait", "10s"}, db...)...)
	if code != 1 || !strings.Contains(out, "relay:1          dead again") || !strings.Contains(errOut, "1 of the 1 canary replay(s) failed again; 4 left unreplayed") {
		t.Fatalf("failing canary: %d\n%s%s", code, out, errOut)
	}
	if got := d.ids(t, "courier_outbox_dead_letters"); fmt.Sprint(got[:5]) != "[1 2 3 4 5]" {
		t.Fatalf("after the failing canary, dead letters %v: want 1 to 5 still there", got)
	}
	code, out, errOut = runCLI(t, append([]string{"dlq", "replay", "relay:2", "relay:3", "relay:4", "relay:5", "--canary", "1", "--wait", "10s"}, db...)...)
	if code != 0 || !strings.Contains(out, "relay:2          published") || !strings.Contains(out, "relay:5          published") {
		t.Fatalf("passing canary: %d\n%s%s", code, out, errOut)
	}
	if got := d.ids(t, "courier_outbox_dead_letters"); fmt.Sprint(got[:1]) != "[1]" || len(got) != 11 {
		t.Fatalf("after the passing canary, dead letters %v: want 1 and 10 to 19", got)
	}

	// Two replays a second: relay:12 fails again long before the tenth.
	code, out, errOut = runCLI(t, append([]string{"dlq", "replay", "relay:10", "relay:11", "relay:12", "relay:13", "relay:14", "relay:15", "relay:16", "relay:17", "relay:18", "relay:19",
		"--stop-on-failure", "--rate", "2", "--wait", "10s"}, db...)...)
	runs := listRuns(t, d.url)
	last := runs[0]
	if code != 1 || last.State != store.RunStopped || last.Failed != 1 || last.Left < 1 || last.Replayed+last.Left != 10 ||
		!strings.Contains(errOut, fmt.Sprintf("(%d replayed, 1 failed again, %d left)", last.Replayed, last.Left)) || !strings.Contains(out, "relay:12         dead again") ||
		!strings.Contains(errOut, "replay run: replaying: ") {
		t.Fatalf("stop on failure: %d %+v\n%s%s", code, last, out, errOut)
	}
	// What was left is still a dead letter, and relay:12 is one again.
	if n := d.count(t, "courier_outbox_dead_letters"); n != 1+last.Left+1 {
		t.Fatalf("%d dead letters after the stop, want relay:1, relay:12 and the %d left", n, last.Left)
	}
}

// With a consumer running: a consumer-side canary that fails again stops
// the run with the rest not asked; one that is applied lets it go on.
func TestDLQReplayCanaryConsumer(t *testing.T) {
	path := filepath.Join(t.TempDir(), "billing.db")
	db, err := sqlite.Open(path)
	testenv.Must(t, err, "open")
	defer db.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, err = sqlite.Migrate(ctx, db)
	testenv.Must(t, err, "migrate")
	parkedInsert(t, db, 1, "01939f3a-0000-7000-8000-000000000031", "ChargeRequested", "fail")
	parkedInsert(t, db, 2, "01939f3a-0000-7000-8000-000000000032", "ChargeRequested", "ok")
	parkedInsert(t, db, 3, "01939f3a-0000-7000-8000-000000000033", "ChargeRequested", "ok")
	url := "sqlite://" + path

	srv := testenv.EmbeddedNATS(t)
	nc := testenv.Connect(t, srv.ClientURL())
	testenv.Must(t, couriernats.EnsureStream(ctx, nc, couriernats.Config{}, couriernats.StreamConfig{}), "stream")
	sub, err := couriernats.NewSubscriber(ctx, nc, couriernats.SubscriberConfig{Consumer: "billing"})
	testenv.Must(t, err, "subscriber")
	ib, err := inbox.New(sqlite.NewDriver(db).Inbox(), "billing")
	testenv.Must(t, err, "inbox")
	r := inbox.NewRouter[*sql.Tx]()
	r.Handle("ChargeRequested", func(ctx context.Context, tx *sql.Tx, msg courier.Message) error {
		if string(msg.Payload) == "fail" {
			return errors.New("card still declined")
		}
		return nil
	})
	c, err := inbox.NewConsumer(ib, sub, sqlite.NewDriver(db).ConsumerStore(), r.Handler(), inbox.ConsumerConfig{ReplayEvery: 100 * time.Millisecond})
	testenv.Must(t, err, "consumer")
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	defer func() { cancel(); <-done }()

	code, out, errOut := runCLI(t, "dlq", "replay", "consumer:1", "consumer:2", "consumer:3", "--canary", "1", "--wait", "10s", "--database-url", url)
	if code != 1 || !strings.Contains(out, "consumer:1       replay failed, still parked: card still declined") ||
		!strings.Contains(errOut, "1 of the 1 canary replay(s) failed again; 2 left unreplayed") {
		t.Fatalf("failing consumer canary: %d\n%s%s", code, out, errOut)
	}
	var asked int
	testenv.Must(t, db.QueryRow(`SELECT count(*) FROM courier_inbox_dead_letters WHERE replay_requested IS NOT NULL`).Scan(&asked), "count asked")
	if asked != 0 {
		t.Fatalf("%d replays asked after the failing canary, want none", asked)
	}
	code, out, errOut = runCLI(t, "dlq", "replay", "consumer:2", "consumer:3", "--canary", "1", "--wait", "10s", "--database-url", url)
	if code != 0 || !strings.Contains(out, "consumer:2       applied by consumer billing") || !strings.Contains(out, "consumer:3       applied by consumer billing") {
		t.Fatalf("passing consumer canary: %d\n%s%s", code, out, errOut)
	}
	runs := listRuns(t, url)
	if len(runs) != 2 || runs[0].State != store.RunDone || runs[0].Replayed != 2 || runs[0].Failed != 0 || runs[1].State != store.RunStopped || runs[1].Failed != 1 {
		t.Fatalf("the runs recorded: %+v", runs)
	}
}
