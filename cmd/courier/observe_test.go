package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/sqlite"
)

// servedRelay is `courier relay --metrics-addr 127.0.0.1:0` (or another
// command that serves the endpoints) running as a child process.
type servedRelay struct {
	addr string // where /metrics, /healthz and /readyz are served
	mu   sync.Mutex
	logs bytes.Buffer
	cmd  *exec.Cmd
	// stop stops it with SIGTERM, once, and fails the test unless it
	// exits cleanly.
	stop func(t *testing.T)
}

func (s *servedRelay) Logs() string { s.mu.Lock(); defer s.mu.Unlock(); return s.logs.String() }

// serveRelay writes n messages to a new SQLite outbox and starts `courier
// relay` on it with the embedded NATS server and args, serving its
// endpoints on a free port. The relay is stopped with SIGTERM when the test
// ends, and must stop cleanly.
func serveRelay(t *testing.T, n int, args ...string) *servedRelay {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "courier.db")
	if code, out, errOut := runCLI(t, "migrate", "--database-url", "sqlite://"+path); code != 0 {
		t.Fatalf("migrate: %d %q %q", code, out, errOut)
	}
	db, err := sqlite.Open(path)
	testenv.Must(t, err, "open")
	tx, err := db.BeginTx(ctx, nil)
	testenv.Must(t, err, "begin")
	for i := range n {
		testenv.Must(t, outbox.New(sqlite.DatabaseSQL(), outbox.Config{}).Write(ctx, tx,
			courier.NewMessage("orders", fmt.Sprintf("k%d", i%4), "OrderPlaced", nil)), "write")
	}
	testenv.Must(t, tx.Commit(), "commit")
	testenv.Must(t, db.Close(), "close")

	return startServedRelay(t, []string{"COURIER_DATABASE_URL=sqlite://" + path},
		append([]string{"--data-dir", filepath.Join(dir, "nats"), "--embedded-port", "0"}, args...)...)
}

// startServedRelay starts `courier relay --metrics-addr 127.0.0.1:0 args…`
// (env added to its environment) and returns once it serves its
// endpoints; it is stopped with SIGTERM when the test ends.
func startServedRelay(t *testing.T, env []string, args ...string) *servedRelay {
	t.Helper()
	return startServed(t, env, "relay", args...)
}

// startServed starts `courier command --metrics-addr 127.0.0.1:0 args…`
// as startServedRelay does.
func startServed(t *testing.T, env []string, command string, args ...string) *servedRelay {
	t.Helper()
	s := &servedRelay{}
	s.cmd = exec.Command(os.Args[0], append([]string{command, "--log-format", "json", "--metrics-addr", "127.0.0.1:0"}, args...)...)
	s.cmd.Env = append(append(os.Environ(), "COURIER_TEST_BE_CLI=1"), env...)
	stderr, err := s.cmd.StderrPipe()
	testenv.Must(t, err, "stderr")
	testenv.Must(t, s.cmd.Start(), "start relay")
	addr := make(chan string, 1)
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			s.mu.Lock()
			s.logs.WriteString(line + "\n")
			s.mu.Unlock()
			var rec struct{ Msg, Addr string }
			if json.Unmarshal([]byte(line), &rec) == nil && strings.HasPrefix(rec.Msg, "serving /metrics") {
				addr <- rec.Addr
			}
		}
	}()
	var once sync.Once
	s.stop = func(t *testing.T) {
		once.Do(func() {
			_ = s.cmd.Process.Signal(syscall.SIGTERM)
			<-copied // before Wait, which closes the pipe
			err := s.cmd.Wait()
			if err != nil {
				t.Errorf("%s exit after SIGTERM: %v\n%s", command, err, s.Logs())
			}
		})
	}
	t.Cleanup(func() { s.stop(t) })
	select {
	case s.addr = <-addr:
	case <-time.After(30 * time.Second):
		t.Fatalf("the relay did not say where it serves its endpoints:\n%s", s.Logs())
	}
	return s
}

// get answers GET path from the relay: the status code and the body.
func (s *servedRelay) get(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + s.addr + path)
	testenv.Must(t, err, "GET "+path)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	testenv.Must(t, err, "read "+path)
	return resp.StatusCode, string(b)
}

// courier relay --metrics-addr serves /healthz, /readyz and /metrics over
// HTTP while it drains the outbox.
func TestRelayServesMetricsAndHealth(t *testing.T) {
	s := serveRelay(t, 100, "--stats-interval", "100ms", "--ready-max-oldest", "1m")
	if code, body := s.get(t, "/healthz"); code != http.StatusOK || body != "ok\n" {
		t.Fatalf("/healthz: %d %q", code, body)
	}
	testenv.Eventually(t, 30*time.Second, func() bool {
		code, body := s.get(t, "/metrics")
		return code == http.StatusOK && strings.Contains(body, "courier_relay_published_messages_total 100") &&
			strings.Contains(body, `courier_outbox_pending_messages{topic=""} 0`)
	}, "/metrics never showed the 100 messages published and none pending:\n%s", testenv.Lazy(func() any { _, b := s.get(t, "/metrics"); return b }))
	code, body := s.get(t, "/readyz")
	if code != http.StatusOK {
		t.Fatalf("/readyz: %d\n%s", code, body)
	}
	for _, c := range []string{`"database": "ok"`, `"broker": "ok"`, `"relay": "ok"`, `"outbox": "ok"`} {
		if !strings.Contains(body, c) {
			t.Errorf("/readyz lacks %s:\n%s", c, body)
		}
	}
	_, metrics := s.get(t, "/metrics")
	for _, want := range []string{"courier_relay_publish_duration_seconds_count", "courier_relay_claimed_batches_total", "go_goroutines", "process_cpu_seconds_total"} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// Messages that cannot get out (no stream binds their subject, and the
// relay may not create one) age in the outbox: /readyz answers 503 and says
// why, while /healthz still answers 200 and /metrics counts the failures.
func TestRelayNotReadyWhileMessagesAge(t *testing.T) {
	s := serveRelay(t, 4, "--no-create-stream", "--max-attempts", "1000", "--stats-interval", "100ms", "--ready-max-oldest", "200ms")
	testenv.Eventually(t, 30*time.Second, func() bool {
		code, body := s.get(t, "/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "the oldest pending message has waited")
	}, "/readyz did not report the aging messages:\n%s", testenv.Lazy(func() any { _, b := s.get(t, "/readyz"); return b }))
	if code, _ := s.get(t, "/healthz"); code != http.StatusOK {
		t.Errorf("/healthz: %d", code)
	}
	testenv.Eventually(t, 30*time.Second, func() bool {
		_, metrics := s.get(t, "/metrics")
		return strings.Contains(metrics, `courier_relay_publish_errors_total{kind="refused"}`) &&
			strings.Contains(metrics, "courier_relay_retried_messages_total") && !strings.Contains(metrics, "courier_relay_retried_messages_total 0\n")
	}, "/metrics never counted the failed publishes:\n%s", testenv.Lazy(func() any { _, b := s.get(t, "/metrics"); return b }))
}

// Bad observability flags fail before anything starts, naming the flag.
func TestObserveFlagErrors(t *testing.T) {
	db := "sqlite://" + filepath.Join(t.TempDir(), "x.db")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--metrics-addr", "9464"}, `--metrics-addr "9464" is not host:port`},
		{[]string{"--metrics-addr", ":9464", "--stats-interval", "0s"}, "--stats-interval is 0s"},
		{[]string{"--metrics-addr", ":9464", "--ready-max-oldest=-1s"}, "--ready-max-oldest is -1s"},
		{[]string{"--metrics-addr", ":9464", "--metrics-max-topics", "0"}, "--metrics-max-topics is 0"},
	} {
		code, _, stderr := runCLI(t, append([]string{"relay", "--database-url", db}, tc.args...)...)
		if code != 1 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, %q; want %q", tc.args, code, stderr, tc.want)
		}
	}
}

// courier relay --metrics-addr serves the gauges of the keys consumers
// hold, per consumer, from the database's status.
func TestRelayServesConsumerHeldKeys(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "courier.db")
	if code, out, errOut := runCLI(t, "migrate", "--database-url", "sqlite://"+path); code != 0 {
		t.Fatalf("migrate: %d %q %q", code, out, errOut)
	}
	db, err := sqlite.Open(path)
	testenv.Must(t, err, "open")
	kh, ok := sqlite.NewDriver(db).ConsumerStore().(store.KeyHolds)
	if !ok {
		t.Fatal("the SQLite ConsumerStore holds no keys")
	}
	for i := range 3 { // a cause, and two parked behind it
		if _, ok, err := kh.ParkHolding(ctx, store.Parked{Consumer: "ledger", MessageID: fmt.Sprintf("m%d", i), Subject: "accounts",
			Payload: []byte(`{}`), Reason: store.ReasonFailed, Error: "boom", Attempts: 3, Key: "acct-1"}, false); err != nil || !ok {
			t.Fatalf("park delivery %d: %v, %v", i, ok, err)
		}
	}
	testenv.Must(t, db.Close(), "close")
	s := startServedRelay(t, []string{"COURIER_DATABASE_URL=sqlite://" + path},
		"--data-dir", filepath.Join(dir, "nats"), "--embedded-port", "0", "--stats-interval", "100ms")
	testenv.Eventually(t, 30*time.Second, func() bool {
		code, body := s.get(t, "/metrics")
		return code == http.StatusOK && strings.Contains(body, `courier_consumer_held_keys{consumer="ledger"} 1`) &&
			strings.Contains(body, `courier_consumer_held_messages{consumer="ledger"} 2`) &&
			strings.Contains(body, `courier_consumer_oldest_hold_age_seconds{consumer="ledger"}`)
	}, "/metrics never showed ledger's held key:\n%s", testenv.Lazy(func() any { _, b := s.get(t, "/metrics"); return b }))
}
