package sqlite_test

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/sqlite"
)

// Environment of the claimer child process (TestClaimerProcess).
const (
	envClaimerDB  = "COURIER_TEST_SQLITE_CLAIMER_DB"  // database file
	envClaimerOut = "COURIER_TEST_SQLITE_CLAIMER_OUT" // file the child writes its claims to
	envClaimerDir = "COURIER_TEST_SQLITE_CLAIMER_DIR" // where the start signal appears
)

// claimRecord is one claimed row, as the claimers report it.
type claimRecord struct {
	Owner string `json:"owner"`
	Lease int64  `json:"lease"`
	Seq   int64  `json:"seq"`
	Key   string `json:"key"`
}

// claimUntilIdle claims batches of limit rows until none come for a while,
// completing each as published after a moment (a relay publishes in
// between, holding no lock), and reports every claimed row.
func claimUntilIdle(ctx context.Context, st store.RelayStore, owner string, limit int, report func(claimRecord)) error {
	for idle := 0; idle < 20; {
		b, err := st.Claim(ctx, owner, limit, time.Minute)
		if err != nil {
			return err
		}
		if len(b.Records) == 0 {
			idle++
			time.Sleep(5 * time.Millisecond)
			continue
		}
		idle = 0
		ids := make([]int64, len(b.Records))
		for i, r := range b.Records {
			report(claimRecord{Owner: owner, Lease: b.Lease, Seq: r.Seq, Key: r.Message.Key})
			ids[i] = r.Seq
		}
		time.Sleep(time.Duration(100+rand.IntN(100)) * time.Millisecond)
		if err := st.Complete(ctx, owner, b.Lease, store.Outcome{Published: ids}); err != nil {
			return err
		}
	}
	return nil
}

// TestClaimerProcess is not a test: it is the claimer process that
// TestClaimsAcrossProcesses starts. It does nothing unless run as that child.
func TestClaimerProcess(t *testing.T) {
	path := os.Getenv(envClaimerDB)
	if path == "" {
		return
	}
	ctx := context.Background()
	db, err := sqlite.Open(path)
	testenv.Must(t, err, "open")
	defer db.Close()
	st, err := sqlite.NewDriver(db).RelayStore(ctx, store.RelayConfig{})
	testenv.Must(t, err, "store")
	out, err := os.Create(os.Getenv(envClaimerOut))
	testenv.Must(t, err, "create output")
	defer out.Close()
	w := bufio.NewWriter(out)
	enc := json.NewEncoder(w)
	// Start together with the other claimers.
	testenv.Must(t, os.WriteFile(filepath.Join(os.Getenv(envClaimerDir), fmt.Sprintf("ready-%d", os.Getpid())), nil, 0o644), "ready")
	testenv.Eventually(t, 60*time.Second, func() bool {
		_, err := os.Stat(filepath.Join(os.Getenv(envClaimerDir), "go"))
		return err == nil
	}, "no start signal")
	owner := fmt.Sprintf("process-%d", os.Getpid())
	testenv.Must(t, claimUntilIdle(ctx, st, owner, 17, func(r claimRecord) { _ = enc.Encode(r) }), "claim")
	testenv.Must(t, w.Flush(), "flush")
}

// Two claimer processes and a claimer in this process share one file:
// SQLite has no SKIP LOCKED and one writer, and BEGIN IMMEDIATE must still
// hand every row out exactly once, each key's rows in order.
func TestClaimsAcrossProcesses(t *testing.T) {
	if os.Getenv(envClaimerDB) != "" {
		t.Skip("running as a claimer child")
	}
	db, path := openFile(t)
	ctx := context.Background()
	_, err := sqlite.NewDriver(db).Migrate(ctx)
	testenv.Must(t, err, "migrate")
	const n = 600
	w := outbox.New(sqlite.DatabaseSQL(), outbox.Config{})
	tx, err := db.BeginTx(ctx, nil)
	testenv.Must(t, err, "begin")
	msgs := make([]courier.Message, n)
	for i := range msgs {
		msgs[i] = courier.NewMessage("t", fmt.Sprintf("ключ-%d", i%41), "T", nil)
	}
	testenv.Must(t, w.Write(ctx, tx, msgs...), "write")
	testenv.Must(t, tx.Commit(), "commit")

	dir := t.TempDir()
	var children []*exec.Cmd
	var outs []string
	for i := range 2 {
		out := filepath.Join(dir, fmt.Sprintf("claims-%d.jsonl", i))
		cmd := exec.Command(os.Args[0], "-test.run=^TestClaimerProcess$", "-test.count=1")
		cmd.Env = append(os.Environ(), envClaimerDB+"="+path, envClaimerOut+"="+out, envClaimerDir+"="+dir)
		var stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stderr, &stderr
		testenv.Must(t, cmd.Start(), "start claimer process")
		t.Cleanup(func() {
			if cmd.ProcessState == nil {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
			}
		})
		children = append(children, cmd)
		outs = append(outs, out)
		defer func() {
			if t.Failed() {
				t.Logf("claimer process %d output:\n%s", i, stderr.String())
			}
		}()
	}

	testenv.Eventually(t, 60*time.Second, func() bool {
		ready, _ := filepath.Glob(filepath.Join(dir, "ready-*"))
		return len(ready) == len(children)
	}, "claimer processes not ready")
	var mu sync.Mutex
	var claims []claimRecord
	var wg sync.WaitGroup
	testenv.Must(t, os.WriteFile(filepath.Join(dir, "go"), nil, 0o644), "start signal")
	for i := range 1 {
		st, err := sqlite.NewDriver(db).RelayStore(ctx, store.RelayConfig{})
		testenv.Must(t, err, "store")
		wg.Go(func() {
			err := claimUntilIdle(ctx, st, fmt.Sprintf("local-%d", i), 23, func(r claimRecord) {
				mu.Lock()
				claims = append(claims, r)
				mu.Unlock()
			})
			if err != nil {
				t.Errorf("local claimer %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	fromChildren := 0
	for i, cmd := range children {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("claimer process %d: %v", i, err)
		}
		f, err := os.Open(outs[i])
		testenv.Must(t, err, "open claims")
		dec := json.NewDecoder(f)
		got := 0
		for {
			var r claimRecord
			if err := dec.Decode(&r); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("claimer process %d output: %v", i, err)
			}
			claims = append(claims, r)
			got++
		}
		f.Close()
		t.Logf("claimer process %d claimed %d rows", i, got)
		fromChildren += got
	}
	// SQLite's busy handler is not fair (a connection that has waited long
	// polls every 100 ms, a newcomer every millisecond), so one claimer may
	// starve for seconds; the race detector makes every lock hold longer.
	// Some rows must have gone to another process, or the test proved
	// nothing about processes.
	if fromChildren == 0 || fromChildren == n {
		t.Fatalf("the claimer processes claimed %d of %d rows: no contention between processes happened", fromChildren, n)
	}

	// Exactly once, and per key in order of the claims. Claims are
	// serialised, so lease ids (AUTOINCREMENT) are in claim order.
	byOwner := map[int64]string{}
	for _, r := range claims {
		if prev, ok := byOwner[r.Seq]; ok {
			t.Fatalf("row %d claimed by %s and %s", r.Seq, prev, r.Owner)
		}
		byOwner[r.Seq] = r.Owner
	}
	if len(byOwner) != n {
		t.Fatalf("%d rows claimed, want %d", len(byOwner), n)
	}
	sort.Slice(claims, func(i, j int) bool {
		if claims[i].Lease != claims[j].Lease {
			return claims[i].Lease < claims[j].Lease
		}
		return claims[i].Seq < claims[j].Seq
	})
	last := map[string]int64{}
	for _, r := range claims {
		if r.Seq < last[r.Key] {
			t.Fatalf("key %s: row %d (lease %d, %s) claimed after row %d", r.Key, r.Seq, r.Lease, r.Owner, last[r.Key])
		}
		last[r.Key] = r.Seq
	}
}

func TestOpenRejectsQueryInPath(t *testing.T) {
	for _, p := range []string{"", "a.db?mode=ro", "a#b"} {
		if _, err := sqlite.Open(p); err == nil || !strings.Contains(err.Error(), "plain file path") {
			t.Errorf("Open(%q) = %v, want an error asking for a plain path", p, err)
		}
	}
}

// A handle without a busy timeout would fail claims with SQLITE_BUSY under
// any contention; RelayStore says how to fix it.
func TestRelayStoreNeedsBusyTimeout(t *testing.T) {
	path := filepath.Join(t.TempDir(), "plain.db")
	db, err := sql.Open("sqlite", path)
	testenv.Must(t, err, "open")
	defer db.Close()
	_, err = sqlite.NewDriver(db).Migrate(context.Background())
	testenv.Must(t, err, "migrate")
	if _, err := sqlite.NewDriver(db).RelayStore(context.Background(), store.RelayConfig{}); err == nil || !strings.Contains(err.Error(), "busy_timeout") {
		t.Fatalf("RelayStore without a busy timeout = %v, want an error naming busy_timeout", err)
	}
}

// Open turns WAL on for the file.
func TestOpenUsesWAL(t *testing.T) {
	db, _ := openFile(t)
	var mode string
	testenv.Must(t, db.QueryRow("PRAGMA journal_mode").Scan(&mode), "journal mode")
	if mode != "wal" {
		t.Fatalf("journal_mode %q, want wal", mode)
	}
}

// The shorthands make what the Driver makes: NewStore's relay store reads
// the clock of its config, Admin the process's, and Migrate's schema is the
// one both check.
func TestShorthands(t *testing.T) {
	db, _ := openFile(t)
	ctx := context.Background()
	applied, err := sqlite.Migrate(ctx, db)
	testenv.Must(t, err, "migrate")
	if len(applied) == 0 {
		t.Fatal("Migrate applied nothing to a new file")
	}
	at := time.Date(2031, 5, 6, 7, 8, 9, 0, time.UTC)
	st, err := sqlite.NewStore(ctx, db, sqlite.StoreConfig{Clock: func() time.Time { return at }})
	testenv.Must(t, err, "store")
	s, err := st.Stats(ctx)
	testenv.Must(t, err, "stats")
	if !s.Now.Equal(at) {
		t.Errorf("NewStore's stats at %s, want the configured clock's %s", s.Now, at)
	}
	a, err := sqlite.Admin(db).Stats(ctx)
	testenv.Must(t, err, "admin stats")
	if d := time.Since(a.Now); d < -time.Minute || d > time.Minute {
		t.Errorf("Admin's stats at %s, want this process's clock", a.Now)
	}
}
