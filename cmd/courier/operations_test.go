package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/sqlite"
)

// statusJSONOf runs courier status --json with args and decodes it.
func statusJSONOf(t *testing.T, args ...string) (int, statusJSON, string) {
	t.Helper()
	code, out, errOut := runCLI(t, append([]string{"status", "--json"}, args...)...)
	var st statusJSON
	if out != "" {
		testenv.Must(t, json.Unmarshal([]byte(out), &st), "status json: "+out)
	}
	return code, st, errOut
}

// Status shows both kinds of dead letters on every dialect, and its
// --fail-if checks exit 1 naming what failed, after printing the status.
func TestStatusChecks(t *testing.T) {
	for name, open := range dlqDatabases(t) {
		t.Run(name, func(t *testing.T) {
			d := open(t)
			code, st, errOut := statusJSONOf(t, "--database-url", d.url, "--fail-if-dead-letters", "--fail-if-parked", "--fail-if-oldest", "1m")
			if code != 0 || st.DeadLetters != 0 || len(st.Consumers) != 0 || st.Failed != nil {
				t.Fatalf("status of an empty database: exit %d, %+v, %s", code, st, errOut)
			}
			for _, q := range d.seed {
				if _, err := d.db.Exec(q); err != nil {
					t.Fatalf("seed: %v", err)
				}
			}
			code, st, errOut = statusJSONOf(t, "--database-url", d.url)
			if code != 0 || st.DeadLetters != 1 || len(st.Topics) != 1 || st.Topics[0].Topic != "orders" || st.Topics[0].DeadLetters != 1 ||
				len(st.Consumers) != 1 || st.Consumers[0].Consumer != "billing" || st.Consumers[0].Parked != 1 {
				t.Fatalf("status: exit %d, %+v, %s; want the seeded dead letter and parked message", code, st, errOut)
			}
			code, st, errOut = statusJSONOf(t, "--database-url", d.url, "--fail-if-dead-letters", "--fail-if-parked")
			if code != 1 || len(st.Failed) != 2 || !strings.Contains(errOut, "1 relay-side dead letters: see courier dlq list") ||
				!strings.Contains(errOut, "1 parked messages") {
				t.Fatalf("status --fail-if-dead-letters --fail-if-parked: exit %d, failed %q, stderr %s", code, st.Failed, errOut)
			}
			code, out, errOut := runCLI(t, "status", "--database-url", d.url)
			for _, want := range []string{"OUTBOX", "orders", "RELAYS", "CONSUMERS", "billing", "SAGAS", "published copies", "keys in flight"} {
				if code != 0 || !strings.Contains(out, want) {
					t.Fatalf("status table lacks %q: exit %d\n%s%s", want, code, out, errOut)
				}
			}
		})
	}
}

// past is a clock an hour behind, for stores that should leave behind
// leases, locks and rows that are over when the CLI looks.
func past() time.Time { return time.Now().Add(-time.Hour) }

// On SQLite: status reports pending rows, leases and keys; reconcile finds
// an ended lease, a message failing for long, an overdue saga and a key
// left in flight, and --repair releases the lease and the key; cleanup
// deletes old published copies, expired keys and old latency samples in
// batches.
func TestReconcileAndCleanup(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ops.db")
	db, err := sqlite.Open(path)
	testenv.Must(t, err, "open")
	defer db.Close()
	_, err = sqlite.Migrate(ctx, db)
	testenv.Must(t, err, "migrate")
	url := "sqlite://" + path
	d := sqlite.NewDriver(db).WithClock(past)

	// Three published an hour ago (kept), one failing for long, one
	// leased by a relay that died an hour ago.
	write := func(msgs ...courier.Message) {
		testenv.Must(t, d.InTx(ctx, func(tx *sql.Tx) error { return d.Inserter().Insert(ctx, tx, msgs) }), "write")
	}
	rs, err := d.RelayStore(ctx, store.RelayConfig{KeepPublished: true})
	testenv.Must(t, err, "relay store")
	for i := range 3 {
		write(courier.NewMessage("orders", "k"+string(rune('a'+i)), "T", []byte("x")))
		b, err := rs.Claim(ctx, "relay-1", 10, time.Minute)
		testenv.Must(t, err, "claim")
		testenv.Must(t, rs.Complete(ctx, "relay-1", b.Lease, store.Outcome{Published: []int64{b.Records[0].Seq}}), "publish")
	}
	write(courier.NewMessage("payments", "p", "T", []byte("x")))
	b, err := rs.Claim(ctx, "relay-1", 10, time.Minute)
	testenv.Must(t, err, "claim")
	testenv.Must(t, rs.Complete(ctx, "relay-1", b.Lease, store.Outcome{Retry: []store.Failure{
		{Seq: b.Records[0].Seq, Error: "broker says no", Delay: 2 * time.Hour, Counted: true}}}), "fail")
	write(courier.NewMessage("audit", "a", "T", []byte("x")))
	dead, err := rs.Claim(ctx, "relay-dead", 10, time.Minute)
	testenv.Must(t, err, "claim")
	if len(dead.Records) != 1 {
		t.Fatalf("relay-dead claimed %d rows, want 1", len(dead.Records))
	}
	// The inserter dates rows by this process's clock: an hour back too.
	_, err = db.Exec(`UPDATE courier_outbox SET created_at = created_at - 3600000000`)
	testenv.Must(t, err, "backdate")
	// A key left in flight, one completed that expired, a saga overdue.
	keys := d.Idempotency()
	_, _, err = keys.Claim(ctx, store.KeyClaim{Scope: "api", Key: "lost", Fingerprint: []byte("f"), Owner: uuid.New(), LockFor: time.Minute, Retain: 24 * time.Hour})
	testenv.Must(t, err, "claim key")
	owner := uuid.New()
	_, _, err = keys.Claim(ctx, store.KeyClaim{Scope: "api", Key: "old", Fingerprint: []byte("f"), Owner: owner, LockFor: time.Minute, Retain: time.Minute})
	testenv.Must(t, err, "claim key")
	testenv.Must(t, keys.InTx(ctx, func(tx *sql.Tx) error {
		_, err := keys.Complete(ctx, tx, "api", "old", owner, store.StoredResponse{Status: 200})
		return err
	}), "complete key")
	deadline := past()
	sagas := d.Sagas()
	testenv.Must(t, sagas.InTx(ctx, func(tx *sql.Tx) error {
		return sagas.Create(ctx, tx, store.SagaRecord{Type: "order", ID: "o1", State: "charging", Phase: "running", Data: []byte("{}"),
			Deadline: &deadline, Version: 1, CreatedAt: deadline, UpdatedAt: deadline})
	}), "create saga")

	// Three latency samples recorded an hour ago, one now.
	sample := []store.LatencySample{{Consumer: "billing", Topic: "orders", Period: 10 * time.Second, Messages: 1, Buckets: []int64{1}}}
	for range 3 {
		testenv.Must(t, d.Delivery().RecordLatency(ctx, sample), "record latency")
	}
	testenv.Must(t, sqlite.NewDriver(db).Delivery().RecordLatency(ctx, sample), "record latency")

	code, st, errOut := statusJSONOf(t, "--database-url", url, "--fail-if-oldest", "5m", "--fail-if-expired-leases", "--fail-if-overdue-sagas", "1m")
	if code != 1 || st.Pending != 2 || st.InBackoff != 1 || st.Published.N != 3 || st.Keys.InFlight != 1 || st.Keys.LockExpired != 1 ||
		len(st.Relays) != 1 || st.Relays[0].Owner != "relay-dead" || st.Relays[0].Expired != 1 || len(st.OverdueSagas) != 1 || len(st.Failed) != 3 {
		t.Fatalf("status: exit %d, %+v; stderr %s", code, st, errOut)
	}
	for _, want := range []string{"the oldest pending message (topic \"payments\") has waited 1h", "1 relay leases ended", "1 order sagas are past their deadline"} {
		if !strings.Contains(errOut, want) {
			t.Fatalf("status's failed checks lack %q:\n%s", want, errOut)
		}
	}

	code, out, errOut := runCLI(t, "reconcile", "--database-url", url, "--retry-attempts", "1", "--fail-if-stuck")
	for _, want := range []string{"ENDED LEASES (1)", "relay-dead", "MESSAGES FAILING FOR LONG (1)", "broker says no",
		"SAGAS PAST THEIR DEADLINE (1)", "o1", "IDEMPOTENCY KEYS LEFT IN FLIGHT (1)", "lost", "run again with --repair"} {
		if code != 1 || !strings.Contains(out, want) {
			t.Fatalf("reconcile lacks %q: exit %d\n%s%s", want, code, out, errOut)
		}
	}
	code, out, errOut = runCLI(t, "reconcile", "--database-url", url, "--retry-attempts", "1", "--repair", "--json", "--log-format", "json")
	var rep reconcileReport
	testenv.Must(t, json.Unmarshal([]byte(out), &rep), "reconcile json")
	if code != 0 || rep.Repaired.Leases != 1 || rep.Repaired.Keys != 1 || len(rep.OverdueSagas) != 1 || len(rep.RetriedRows) != 1 {
		t.Fatalf("reconcile --repair: exit %d, %+v\n%s", code, rep, errOut)
	}
	for _, want := range []string{`"msg":"released an ended lease"`, `"owner":"relay-dead"`, `"msg":"released an idempotency key left in flight"`,
		`"key":"lost"`, `"saga_id":"o1"`} {
		if !strings.Contains(errOut, want) {
			t.Fatalf("the repairs' log lacks %s:\n%s", want, errOut)
		}
	}
	if _, st, _ := statusJSONOf(t, "--database-url", url); len(st.Relays) != 0 || st.Keys.InFlight != 0 {
		t.Fatalf("status after the repair: relays %+v, keys %+v", st.Relays, st.Keys)
	}

	if code, _, errOut := runCLI(t, "cleanup", "--database-url", url, "--no-expired-keys", "--keep-inbox-failures", "0", "--keep-released", "0",
		"--keep-latency", "0"); code != 1 ||
		!strings.Contains(errOut, "nothing to clean up: pass a retention such as --keep-published 168h") {
		t.Fatalf("cleanup without retentions: exit %d, %s", code, errOut)
	}
	for _, flag := range []string{"--keep-published", "--keep-latency"} {
		if code, _, errOut := runCLI(t, "cleanup", "--database-url", url, flag+"=-1s"); code != 1 ||
			!strings.Contains(errOut, flag+" is -1s") {
			t.Fatalf("cleanup with a negative %s: exit %d, %s", flag, code, errOut)
		}
	}
	code, out, errOut = runCLI(t, "cleanup", "--database-url", url, "--keep-published", "2h", "--json")
	if code != 0 || !strings.Contains(out, `"published": 0`) || !strings.Contains(out, `"idempotency_keys": 1`) || !strings.Contains(out, `"latency": 0`) {
		t.Fatalf("cleanup keeping 2h (and latency samples a week): exit %d\n%s%s", code, out, errOut)
	}
	t.Setenv("COURIER_KEEP_LATENCY", "30m")
	code, out, errOut = runCLI(t, "cleanup", "--database-url", url, "--keep-published", "30m", "--batch", "2")
	if code != 0 || !regexp.MustCompile(`published +30m0s +3`).MatchString(out) || !regexp.MustCompile(`latency +30m0s +3`).MatchString(out) {
		t.Fatalf("cleanup keeping 30m: exit %d\n%s%s", code, out, errOut)
	}
	if _, st, _ := statusJSONOf(t, "--database-url", url); st.Published.N != 0 || st.Keys.Completed.N != 0 {
		t.Fatalf("status after the cleanup: published %+v, keys %+v", st.Published, st.Keys)
	}
	if left, err := d.Delivery().Latency(ctx, time.Time{}, 10); err != nil || len(left) != 1 {
		t.Fatalf("latency samples after the cleanup: %d, %v; want the one recorded now", len(left), err)
	}
}

// courier relay --cleanup-every runs a cleanup in the background: copies
// of messages published an hour ago go while it relays.
func TestRelayCleanupEvery(t *testing.T) {
	for _, args := range [][]string{{"--cleanup-every=-1s"}, {"--cleanup-every", "1m", "--cleanup-keep-published=-1h"}} {
		if code, _, errOut := runCLI(t, append([]string{"relay", "--database-url", "sqlite:///no/such/dir/x.db"}, args...)...); code != 1 ||
			!strings.Contains(errOut, "--cleanup-") {
			t.Fatalf("relay %v: exit %d, %s; want the flag named before anything is opened", args, code, errOut)
		}
	}
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "relay.db")
	url := "sqlite://" + path
	if code, out, errOut := runCLI(t, "migrate", "--database-url", url); code != 0 {
		t.Fatalf("migrate: %d %q %q", code, out, errOut)
	}
	db, err := sqlite.Open(path)
	testenv.Must(t, err, "open")
	d := sqlite.NewDriver(db).WithClock(past)
	rs, err := d.RelayStore(ctx, store.RelayConfig{KeepPublished: true})
	testenv.Must(t, err, "relay store")
	for i := range 5 {
		msg := courier.NewMessage("orders", "k", "T", []byte{byte(i)})
		testenv.Must(t, d.InTx(ctx, func(tx *sql.Tx) error { return d.Inserter().Insert(ctx, tx, []courier.Message{msg}) }), "write")
		b, err := rs.Claim(ctx, "relay-1", 10, time.Minute)
		testenv.Must(t, err, "claim")
		testenv.Must(t, rs.Complete(ctx, "relay-1", b.Lease, store.Outcome{Published: []int64{b.Records[0].Seq}}), "publish")
	}
	testenv.Must(t, db.Close(), "close")

	cmd := exec.Command(os.Args[0], "relay", "--log-format", "json", "--embedded-port", "0", "--data-dir", filepath.Join(dir, "nats"),
		"--keep-published", "--cleanup-every", "1h", "--cleanup-keep-published", "30m", "--cleanup-batch", "2")
	cmd.Env = append(os.Environ(), "COURIER_TEST_BE_CLI=1", "COURIER_DATABASE_URL="+url)
	var logs bytes.Buffer
	cmd.Stderr = &logs
	testenv.Must(t, cmd.Start(), "start relay")
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	testenv.Eventually(t, 30*time.Second, func() bool {
		_, st, _ := statusJSONOf(t, "--database-url", url)
		return st.Published.N == 0
	}, "the relay's cleanup did not delete the old published copies; logs:\n%s", &logs)
	testenv.Must(t, cmd.Process.Signal(syscall.SIGTERM), "sigterm")
	if err := cmd.Wait(); err != nil {
		t.Fatalf("relay exit after SIGTERM: %v\n%s", err, &logs)
	}
	if !strings.Contains(logs.String(), `"msg":"cleanup","table":"published","deleted":5`) {
		t.Fatalf("the relay did not log its cleanup:\n%s", &logs)
	}
}
