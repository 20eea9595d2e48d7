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
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"

	"github.com/courier-go/courier"
	couriernats "github.com/courier-go/courier/broker/nats"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/store/sqlite"
)

// writer writes a message to a SQLite outbox every few milliseconds, as an
// application would, until stopped.
type writer struct {
	n    atomic.Int64
	stop chan struct{}
	done chan struct{}
	mu   sync.Mutex
	msgs []courier.Message // written and committed, in order
}

// Written returns the messages written so far, in order.
func (w *writer) Written() []courier.Message {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.msgs)
}

// startWriter migrates a new SQLite database and starts writing to it; it
// returns the database's URL. The writer is stopped when the test ends, if
// it was not before.
func startWriter(t *testing.T) (*writer, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "courier.db")
	url := "sqlite://" + path
	if code, out, errOut := runCLI(t, "migrate", "--database-url", url); code != 0 {
		t.Fatalf("migrate: %d %q %q", code, out, errOut)
	}
	db, err := sqlite.Open(path)
	testenv.Must(t, err, "open")
	w := &writer{stop: make(chan struct{}), done: make(chan struct{})}
	ob := outbox.New(sqlite.DatabaseSQL(), outbox.Config{})
	go func() {
		defer close(w.done)
		defer db.Close()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-w.stop:
				return
			case <-tick.C:
			}
			ctx := context.Background()
			m := courier.NewMessage("orders", fmt.Sprintf("k%d", i%8), "OrderPlaced", []byte(fmt.Sprintf(`{"n":%d}`, i)))
			tx, err := db.BeginTx(ctx, nil)
			if err == nil {
				err = ob.Write(ctx, tx, m)
				if err == nil {
					err = tx.Commit()
				} else {
					_ = tx.Rollback()
				}
			}
			if err != nil {
				t.Errorf("write message %d: %v", i, err)
				return
			}
			w.mu.Lock()
			w.msgs = append(w.msgs, m)
			w.mu.Unlock()
			w.n.Add(1)
		}
	}()
	t.Cleanup(w.Stop)
	return w, url
}

// Stop stops the writer and waits for it; stopping it again does nothing.
func (w *writer) Stop() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

// relayProcess is `courier relay` running as a child process of the test.
type relayProcess struct {
	addr string // where /metrics, /healthz and /readyz are served, if asked for
	cmd  *exec.Cmd
	mu   sync.Mutex
	logs bytes.Buffer
	out  chan struct{} // closed once its stderr is read to the end
	done bool
}

func (r *relayProcess) Logs() string { r.mu.Lock(); defer r.mu.Unlock(); return r.logs.String() }

// startRelay starts `courier relay --log-format json args…` on the
// database at url. With --metrics-addr among args, it waits until the relay
// says where it serves its endpoints. The relay is stopped with SIGTERM
// when the test ends, if it was not before, and must stop cleanly.
func startRelay(t *testing.T, url string, args ...string) *relayProcess {
	t.Helper()
	r := &relayProcess{out: make(chan struct{})}
	started := make(chan struct{})
	var once sync.Once
	r.cmd = exec.Command(os.Args[0], append([]string{"relay", "--log-format", "json"}, args...)...)
	r.cmd.Env = append(os.Environ(), "COURIER_TEST_BE_CLI=1", "COURIER_DATABASE_URL="+url)
	stderr, err := r.cmd.StderrPipe()
	testenv.Must(t, err, "stderr")
	testenv.Must(t, r.cmd.Start(), "start relay")
	addr := make(chan string, 1)
	go func() {
		defer close(r.out)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			r.mu.Lock()
			r.logs.WriteString(line + "\n")
			r.mu.Unlock()
			var rec struct{ Msg, Addr string }
			if json.Unmarshal([]byte(line), &rec) == nil && strings.HasPrefix(rec.Msg, "serving /metrics") {
				addr <- rec.Addr
			}
			if rec.Msg == "relay started" {
				once.Do(func() { close(started) })
			}
		}
	}()
	t.Cleanup(func() { r.Stop(t) })
	// Running means claiming: the relay has opened its database and its
	// broker, which takes a while on a busy machine.
	select {
	case <-started:
	case <-r.out:
		t.Fatalf("the relay exited before it started:\n%s", r.Logs())
	case <-time.After(60 * time.Second):
		t.Fatalf("the relay did not start within a minute:\n%s", r.Logs())
	}
	if !strings.Contains(strings.Join(args, " "), "--metrics-addr") {
		return r
	}
	select {
	case r.addr = <-addr:
	case <-time.After(30 * time.Second):
		t.Fatalf("the relay did not say where it serves its endpoints:\n%s", r.Logs())
	}
	return r
}

// Stop stops the relay with SIGTERM and fails the test unless it stops
// cleanly. Stopping it again does nothing.
func (r *relayProcess) Stop(t *testing.T) {
	t.Helper()
	if r.done {
		return
	}
	r.done = true
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	// Read stderr to its end before Wait, which closes the pipe: the
	// relay's last lines would be lost otherwise.
	<-r.out
	err := r.cmd.Wait()
	if err != nil || !strings.Contains(r.Logs(), "relay stopped") {
		t.Errorf("relay exit after SIGTERM: %v\n%s", err, r.Logs())
	}
}

// ready answers GET /readyz: the status code and the body.
func (r *relayProcess) ready(t *testing.T) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + r.addr + "/readyz")
	testenv.Must(t, err, "GET /readyz")
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	testenv.Must(t, err, "read /readyz")
	return resp.StatusCode, string(b)
}

// drained waits until the outbox at url has nothing pending, leased or
// retrying, and no dead letters.
func drained(t *testing.T, url string, logs func() string) {
	t.Helper()
	testenv.WhileProgressing(t, 30*time.Second, func() (bool, any) {
		s := outboxStatus(t, url)
		return s["pending"] == 0 && s["leased"] == 0 && s["in_backoff"] == 0, fmt.Sprint(s)
	}, "the relay did not drain the outbox; logs:\n%s", testenv.Lazy(func() any { return logs() }))
	if s := outboxStatus(t, url); s["dead_letters"] != 0 {
		t.Fatalf("dead letters after the outage: %v; logs:\n%s", s, logs())
	}
}

// While the NATS server the relay publishes to is down, /readyz answers
// 503 naming the broker, all through an outage longer than the ready grace;
// once the server is back and the backlog written meanwhile is published,
// 200 again, and every message is in the stream.
func TestRelayReadyzAcrossBrokerOutage(t *testing.T) {
	const grace = 2 * time.Second
	nats := testenv.StartNATSServer(t, testenv.NATSServerConfig{})
	w, url := startWriter(t)
	r := startRelay(t, url, "--broker-url", nats.URL, "--metrics-addr", "127.0.0.1:0", "--ready-grace", grace.String(),
		"--ready-max-oldest", "5s", "--stats-interval", "100ms")
	lazyReady := testenv.Lazy(func() any { code, body := r.ready(t); return fmt.Sprintf("%d %s\nlogs:\n%s", code, body, r.Logs()) })

	testenv.Eventually(t, 30*time.Second, func() bool { code, _ := r.ready(t); return code == http.StatusOK && w.n.Load() > 20 },
		"/readyz never answered 200 with the broker up: %s", lazyReady)

	nats.Kill()
	down := time.Now()
	testenv.Eventually(t, 30*time.Second, func() bool {
		code, body := r.ready(t)
		return code == http.StatusServiceUnavailable && strings.Contains(body, `"broker"`) && !strings.Contains(body, `"broker": "ok"`)
	}, "/readyz did not answer 503 for the broker with the broker down: %s", lazyReady)
	t.Logf("/readyz answered 503 %s after the NATS server was killed", time.Since(down).Round(time.Millisecond))
	// Messages go on being written while the broker is down, for longer
	// than the grace; /readyz answers 503 all along.
	for time.Since(down) < 2*grace {
		if code, body := r.ready(t); code != http.StatusServiceUnavailable {
			t.Fatalf("/readyz %s into the broker's outage: %d\n%s", time.Since(down).Round(time.Millisecond), code, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	_, body := r.ready(t)
	backlog := outboxStatus(t, url)["pending"]
	if backlog == 0 {
		t.Fatalf("no backlog after %s with the broker down", time.Since(down))
	}
	t.Logf("after %s with the broker down: %v pending; /readyz says %s", time.Since(down).Round(time.Millisecond), backlog, strings.Join(strings.Fields(body), " "))

	nats.Start()
	up := time.Now()
	testenv.Eventually(t, 60*time.Second, func() bool {
		code, _ := r.ready(t)
		return code == http.StatusOK && outboxStatus(t, url)["pending"] < backlog
	}, "/readyz did not answer 200 again once the broker was back and the backlog published: %s", lazyReady)
	t.Logf("/readyz answered 200 %s after the NATS server was started again", time.Since(up).Round(time.Millisecond))

	w.Stop()
	drained(t, url, r.Logs)
	if code, body := r.ready(t); code != http.StatusOK {
		t.Fatalf("/readyz after draining: %d\n%s", code, body)
	}
	r.Stop(t)

	nc, err := natsgo.Connect(nats.URL)
	testenv.Must(t, err, "connect to NATS")
	defer nc.Close()
	written := w.Written()
	dups := testenv.CheckDelivery(t, written, testenv.StreamMessages(t, nc, "COURIER", couriernats.Config{}))
	t.Logf("%d messages written, all in the stream, %d duplicates", len(written), dups)
}

var waitedRe = regexp.MustCompile(`has waited ([0-9hms.]+), more than --fail-if-oldest 2s`)

// courier status --fail-if-oldest fails, naming the oldest message's age,
// while no relay runs and messages are written; once a relay runs again
// and drains the backlog, it passes.
func TestStatusFailIfOldestWithoutRelay(t *testing.T) {
	w, url := startWriter(t)
	natsDir := filepath.Join(t.TempDir(), "nats")
	relayArgs := []string{"--data-dir", natsDir, "--embedded-port", "0"}
	status := func() (int, string) {
		code, _, errOut := runCLI(t, "status", "--database-url", url, "--fail-if-oldest", "2s")
		return code, errOut
	}

	r := startRelay(t, url, relayArgs...)
	testenv.Eventually(t, 30*time.Second, func() bool { code, _ := status(); return code == 0 && w.n.Load() > 20 },
		"status --fail-if-oldest 2s did not pass with a relay running: %v", testenv.Lazy(func() any { _, e := status(); return e }))
	r.Stop(t)

	var errOut string
	testenv.Eventually(t, 30*time.Second, func() bool {
		var code int
		code, errOut = status()
		return code == 1
	}, "status --fail-if-oldest 2s did not fail with no relay running: %v", testenv.Lazy(func() any { return outboxStatus(t, url) }))
	m := waitedRe.FindStringSubmatch(errOut)
	if m == nil {
		t.Fatalf("status --fail-if-oldest 2s does not name the oldest message's age:\n%s", errOut)
	}
	if age, err := time.ParseDuration(m[1]); err != nil || age < 2*time.Second {
		t.Fatalf("status names the oldest message's age %q, want 2s or more:\n%s", m[1], errOut)
	}
	t.Logf("with no relay running, courier status --fail-if-oldest 2s exits 1: %s", strings.TrimSpace(errOut))
	if !strings.Contains(errOut, "is a relay running?") {
		t.Errorf("status does not say what to check:\n%s", errOut)
	}

	r = startRelay(t, url, relayArgs...)
	testenv.Eventually(t, 60*time.Second, func() bool { code, _ := status(); return code == 0 },
		"status --fail-if-oldest 2s did not pass once a relay ran again: %v", testenv.Lazy(func() any { _, e := status(); return e }))
	w.Stop()
	drained(t, url, r.Logs)
	if code, errOut := status(); code != 0 {
		t.Fatalf("status after draining: exit %d\n%s", code, errOut)
	}
	r.Stop(t)
}
