package dashboard_test

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/courier-go/courier/broker/memory"
	"github.com/courier-go/courier/dashboard"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/internal/testwait"
	"github.com/courier-go/courier/relay"
	"github.com/courier-go/courier/store"
)

// A replay with guards runs in the dashboard's process, recorded in the
// database: a canary without an outcome (no relay runs) stops it with the
// rest left, and the runs page shows it, and the runs other processes
// record. A consumer replay of a message parked longer ago than the
// inbox's retention is refused (409) unless "replay anyway" is ticked.
func TestGuardedReplayOverHTTP(t *testing.T) {
	for name, url := range databases {
		t.Run(name, func(t *testing.T) { testGuardedReplayOverHTTP(t, url(t)) })
	}
}

func testGuardedReplayOverHTTP(t *testing.T, dbURL string) {
	f := newFixtureAt(t, dbURL, []string{"orders", "orders", "orders"}, []string{"message too big"})
	f.park(t, "billing", "courier.payments", "card declined")
	srv := serve(t, dashboard.Config{Database: f.drv, InboxRetention: time.Millisecond})
	c := newClient(t, srv.URL)
	dead := f.deadLetters(t)
	q := url.Values{"action": {"replay"}}
	for _, d := range dead {
		q.Add("id", strconv.FormatInt(d.ID, 10))
	}
	code, page := c.get("/dead-letters/confirm?" + q.Encode())
	if code != 200 || !strings.Contains(page, `id="guards"`) || !strings.Contains(page, "(3)") || !strings.Contains(page, `name="canary"`) || strings.Contains(page, `id="stale"`) {
		t.Fatalf("replay confirmation: %d\n%s", code, page)
	}
	csrf := csrfOf(t, page)
	if _, runs := c.get("/runs"); !strings.Contains(runs, "No replay runs yet.") {
		t.Fatalf("runs page before any run:\n%s", runs)
	}

	form := url.Values{"csrf": {csrf}, "canary": {"-1"}, "wait": {"300ms"}}
	for _, d := range dead {
		form.Add("id", strconv.FormatInt(d.ID, 10))
	}
	if code, body := c.post("/dead-letters/replay", form, nil); code != http.StatusBadRequest || !strings.Contains(body, "Canary is -1: use the number") {
		t.Fatalf("canary -1: %d\n%.2000s", code, body)
	}
	form.Set("canary", "1")
	code, body := c.post("/dead-letters/replay", form, nil)
	if code != 200 || !strings.Contains(body, "started replay run") || !strings.Contains(body, `id="runs"`) {
		t.Fatalf("guarded replay: %d\n%.3000s", code, body)
	}
	var run store.ReplayRun
	testwait.Eventually(t, 10*time.Second, func() bool {
		runs, err := f.drv.ReplayRuns().ListRuns(context.Background(), 0, 10)
		testenv.Must(t, err, "list runs")
		if len(runs) == 1 {
			run = runs[0]
		}
		return run.State != "" && run.State != store.RunRunning
	}, "the dashboard's replay run did not end")
	if run.State != store.RunStopped || run.Side != "relay" || run.Total != 3 || run.Replayed != 1 || run.Left != 2 || !strings.Contains(run.Note, "canary") ||
		!strings.Contains(run.Selection, "dashboard: 3 dead letters; canary 1, wait 300ms") {
		t.Fatalf("the run recorded: %+v", run)
	}
	if n := len(f.deadLetters(t)); n != 2 {
		t.Fatalf("%d dead letters after the canary, want 2 left", n)
	}
	// A run another process records shows too.
	id, err := f.drv.ReplayRuns().StartRun(context.Background(), store.ReplayRun{Side: "consumer", Selection: "courier dlq replay: <b>consumer:9</b>", Total: 4})
	testenv.Must(t, err, "start a run")
	_, runs := c.get("/runs")
	if !strings.Contains(runs, "stopped") || !strings.Contains(runs, ">"+strconv.FormatInt(id, 10)+"<") || !strings.Contains(runs, "&lt;b&gt;consumer:9&lt;/b&gt;") ||
		strings.Contains(runs, "<b>consumer:9") {
		t.Fatalf("runs page:\n%s", runs)
	}

	// The parked delivery is older than the 1ms retention.
	parked := f.parked(t)
	pid := strconv.FormatInt(parked[0].ID, 10)
	_, page = c.get("/parked/confirm?action=replay&id=" + pid)
	if !strings.Contains(page, `id="stale"`) || !strings.Contains(page, "consumer:"+pid+" (parked ") || !strings.Contains(page, `name="force"`) {
		t.Fatalf("confirmation of a stale replay:\n%s", page)
	}
	code, body = c.post("/parked/replay", url.Values{"csrf": {csrf}, "id": {pid}}, nil)
	if code != http.StatusConflict || !strings.Contains(body, "marker retention (1ms)") {
		t.Fatalf("stale replay without force: %d\n%.3000s", code, body)
	}
	if p := f.parked(t); p[0].ReplayRequested != nil {
		t.Fatal("the refused replay was asked")
	}
	code, body = c.post("/parked/replay", url.Values{"csrf": {csrf}, "id": {pid}, "force": {"1"}}, nil)
	if code != 200 || !strings.Contains(body, "replayed 1") {
		t.Fatalf("stale replay with force: %d\n%.3000s", code, body)
	}
	if p := f.parked(t); p[0].ReplayRequested == nil {
		t.Fatal("the forced replay was not asked")
	}
	// A replay without guards is recorded too, over at once.
	recorded, err := f.drv.ReplayRuns().ListRuns(context.Background(), 0, 1)
	testenv.Must(t, err, "list runs")
	if r := recorded[0]; r.State != store.RunDone || r.Side != "consumer" || r.Total != 1 || r.Replayed != 1 || r.FinishedAt == nil || r.Note != "replayed 1" {
		t.Fatalf("the plain replay's run: %+v", r)
	}
	// A cross-site post of a replay is refused, as every action is.
	if code, _ := c.post("/dead-letters/replay", form, map[string]string{"Sec-Fetch-Site": "cross-site"}); code != http.StatusForbidden {
		t.Fatalf("cross-site guarded replay: %d, want 403", code)
	}
}

// With a relay running, a replay with a rate that stops on failure stops
// once the letter the broker rejects is a dead letter again, with the
// rest left; the letters replayed before it are published. The outcomes
// are read from the database (replayguard.DatabaseOutcome).
func TestGuardedReplayStopsOnFailure(t *testing.T) {
	f := newFixture(t, []string{"orders", "orders", "orders", "orders", "orders", "orders"}, []string{"message too big"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pub := memory.NewPublisher()
	dead := f.deadLetters(t)
	pub.Reject(uuid.MustParse(dead[1].MessageID), "still too big")
	rs, err := f.drv.RelayStore(ctx, store.RelayConfig{})
	testenv.Must(t, err, "relay store")
	r, err := relay.New(rs, pub, relay.Config{MaxAttempts: 1, PollInterval: 20 * time.Millisecond})
	testenv.Must(t, err, "relay")
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	defer func() { cancel(); <-done }()

	srv := serve(t, dashboard.Config{Database: f.drv})
	c := newClient(t, srv.URL)
	_, page := c.get("/dead-letters/confirm?action=replay&all=1")
	form := url.Values{"csrf": {csrfOf(t, page)}, "stop_on_failure": {"1"}, "rate": {"2"}, "wait": {"10s"}}
	for _, d := range dead {
		form.Add("id", strconv.FormatInt(d.ID, 10))
	}
	if code, body := c.post("/dead-letters/replay", form, nil); code != 200 || !strings.Contains(body, "started replay run") {
		t.Fatalf("guarded replay: %d\n%.3000s", code, body)
	}
	var run store.ReplayRun
	testwait.Eventually(t, 20*time.Second, func() bool {
		runs, err := f.drv.ReplayRuns().ListRuns(context.Background(), 0, 1)
		testenv.Must(t, err, "list runs")
		if len(runs) == 1 {
			run = runs[0]
		}
		return run.State != "" && run.State != store.RunRunning
	}, "the dashboard's replay run did not end")
	if run.State != store.RunStopped || run.Failed != 1 || run.Left < 1 || run.Replayed+run.Left != 6 || !strings.Contains(run.Note, "failed again") {
		t.Fatalf("the run: %+v", run)
	}
	left := f.deadLetters(t)
	again := false
	for _, d := range left {
		again = again || d.MessageID == dead[1].MessageID
	}
	if len(left) != run.Left+1 || !again {
		t.Fatalf("%d dead letters after the stop (the rejected one among them: %v), want it and the %d left", len(left), again, run.Left)
	}
	testwait.Eventually(t, 10*time.Second, func() bool { return len(pub.Messages()) == run.Replayed-1 }, "the replayed letters but the rejected one were not published")
}

// With a token, the runs page and a guarded replay need it, as every page
// and action does.
func TestGuardedReplayNeedsTheToken(t *testing.T) {
	f := newFixture(t, []string{"orders"}, []string{"too big"})
	srv := serve(t, dashboard.Config{Database: f.drv, Token: "s3cret-token-for-the-test"})
	c := newClient(t, srv.URL)
	code, page := c.get("/runs")
	if code != 200 || !strings.Contains(page, "Log in") || strings.Contains(page, `id="runs"`) {
		t.Fatalf("the runs page without the token: %d\n%s", code, page)
	}
	dead := f.deadLetters(t)
	code, _ = c.post("/dead-letters/replay", url.Values{"csrf": {csrfOf(t, page)}, "id": {strconv.FormatInt(dead[0].ID, 10)}, "canary": {"1"}}, nil)
	if code != http.StatusUnauthorized {
		t.Fatalf("a guarded replay without the token: %d, want 401", code)
	}
	if runs, err := f.drv.ReplayRuns().ListRuns(context.Background(), 0, 10); err != nil || len(runs) != 0 || len(f.deadLetters(t)) != 1 {
		t.Fatalf("the refused replay ran: %+v %v", runs, err)
	}
}

// The runs page lists the runs newest first, a page at a time.
func TestRunsPages(t *testing.T) {
	f := newFixture(t, []string{"orders"}, []string{"too big"})
	runs := f.drv.ReplayRuns()
	var ids []int64
	for _, sel := range []string{"first run", "second run"} {
		id, err := runs.StartRun(context.Background(), store.ReplayRun{Side: "relay", Selection: sel, Total: 1})
		testenv.Must(t, err, "start a run")
		ids = append(ids, id)
	}
	srv := serve(t, dashboard.Config{Database: f.drv, PageSize: 1})
	c := newClient(t, srv.URL)
	code, page := c.get("/runs")
	next := "/runs?before=" + strconv.FormatInt(ids[1], 10)
	if code != 200 || !strings.Contains(page, "second run") || strings.Contains(page, "first run") || !strings.Contains(page, `href="`+next+`"`) {
		t.Fatalf("the first page: %d\n%s", code, page)
	}
	code, page = c.get(next)
	if code != 200 || !strings.Contains(page, "first run") || strings.Contains(page, "second run") {
		t.Fatalf("the second page: %d\n%s", code, page)
	}
	code, page = c.get("/runs?before=" + strconv.FormatInt(ids[0], 10))
	if code != 200 || !strings.Contains(page, "No older runs.") {
		t.Fatalf("past the last page: %d\n%s", code, page)
	}
	if code, _ := c.get("/runs?before=x"); code != http.StatusBadRequest {
		t.Fatalf("before=x: %d, want 400", code)
	}
}
