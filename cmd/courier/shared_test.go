package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/courier-go/courier"
	couriernats "github.com/courier-go/courier/broker/nats"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/store/sqlite"
)

// relayProc is a `courier relay` child process run in a directory of the
// test's, on the embedded default unless its arguments say otherwise.
type relayProc struct {
	cmd  *exec.Cmd
	logs *lockedBuffer
	done chan struct{} // closed once it has exited
	err  error         // its exit, once done
}

// startRelayIn starts `courier relay --log-format json args…` in dir, with
// none of the environment's COURIER_ settings of the relay's.
func startRelayIn(t *testing.T, dir string, args ...string) *relayProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"relay", "--log-format", "json"}, args...)...)
	cmd.Dir = dir
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if !slices.Contains([]string{"COURIER_DATABASE_URL", "COURIER_BROKER_URL", "COURIER_DATA_DIR", "COURIER_EMBEDDED_PORT"}, k) {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "COURIER_TEST_BE_CLI=1")
	p := &relayProc{cmd: cmd, logs: &lockedBuffer{}, done: make(chan struct{})}
	cmd.Stderr = p.logs
	testenv.Must(t, cmd.Start(), "start relay")
	go func() { p.err = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-p.done })
	return p
}

// exited reports whether the process has exited.
func (p *relayProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// ready waits until the relay relays, and returns its embedded server's
// URL ("" on --broker-url). It fails t if the relay exits first.
func (p *relayProc) ready(t *testing.T) string {
	t.Helper()
	testenv.Eventually(t, time.Minute, func() bool {
		return p.exited() || strings.Contains(p.logs.String(), `"msg":"relaying"`)
	}, "relay %d not relaying; logs:\n%s", p.cmd.Process.Pid, p.logs)
	if p.exited() {
		t.Fatalf("relay %d exited (%v) before relaying; logs:\n%s", p.cmd.Process.Pid, p.err, p.logs)
	}
	for line := range strings.SplitSeq(p.logs.String(), "\n") {
		var rec struct{ Msg, URL string }
		if json.Unmarshal([]byte(line), &rec) == nil && strings.HasPrefix(rec.Msg, "broker: embedded NATS") {
			return rec.URL
		}
	}
	return ""
}

// stop stops the relay with SIGTERM and fails t unless it stops cleanly.
func (p *relayProc) stop(t *testing.T) {
	t.Helper()
	testenv.Must(t, p.cmd.Process.Signal(syscall.SIGTERM), "SIGTERM the relay")
	<-p.done
	if p.err != nil || !strings.Contains(p.logs.String(), "relay stopped") {
		t.Fatalf("relay %d after SIGTERM: %v; logs:\n%s", p.cmd.Process.Pid, p.err, p.logs)
	}
}

// refused waits until the relay exits and returns its error line; it fails
// t unless it exits 1 (and as soon as it relays).
func (p *relayProc) refused(t *testing.T) string {
	t.Helper()
	testenv.Eventually(t, time.Minute, func() bool {
		return p.exited() || strings.Contains(p.logs.String(), `"msg":"relaying"`)
	}, "relay %d neither refused nor relays; logs:\n%s", p.cmd.Process.Pid, p.logs)
	if !p.exited() {
		t.Fatalf("relay %d relays, want it refused; logs:\n%s", p.cmd.Process.Pid, p.logs)
	}
	var ee *exec.ExitError
	if !errors.As(p.err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("relay %d exited with %v, want exit 1; logs:\n%s", p.cmd.Process.Pid, p.err, p.logs)
	}
	return p.logs.String()
}

// Two `courier relay` on the embedded default in one directory: the second
// would start a NATS server on the first one's store (--data-dir), and what
// each acknowledged would be lost when one rewrote the other's files. It is
// refused, naming the first's pid and URL and the fix (join it with
// --broker-url). A SIGKILLed relay's lock does not outlive it: a restart in
// the same directory starts at once.
func TestRelaysOnOneDataDir(t *testing.T) {
	dir := t.TempDir()
	first := startRelayIn(t, dir, "--embedded-port", "0")
	url := first.ready(t)
	if url == "" {
		t.Fatalf("the first relay did not say where its embedded NATS serves; logs:\n%s", first.logs)
	}

	second := startRelayIn(t, dir, "--embedded-port", "0")
	msg := second.refused(t)
	for _, want := range []string{"--data-dir courier-data is in use by courier process " + strconv.Itoa(first.cmd.Process.Pid),
		"serves at " + url, "--broker-url " + url, "another --data-dir"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the second relay's error does not say %q:\n%s", want, msg)
		}
	}
	if n := strings.Count(strings.TrimSpace(msg), "\n"); n != 0 {
		t.Errorf("the second relay's error is %d lines, want one:\n%s", n+1, msg)
	}
	// The plain `courier relay`, on the default port the first does not
	// hold, is refused the same way.
	if msg := startRelayIn(t, dir).refused(t); !strings.Contains(msg, "--broker-url "+url) {
		t.Errorf("courier relay (port 4222) beside the first: %s", msg)
	}

	testenv.Must(t, first.cmd.Process.Kill(), "SIGKILL the first relay")
	<-first.done
	again := startRelayIn(t, dir, "--embedded-port", "0")
	if u := again.ready(t); u == "" {
		t.Fatalf("the relay started after a SIGKILL did not start its embedded NATS; logs:\n%s", again.logs)
	}
	again.stop(t)
}

// The scenario of two relays on the embedded default, without loss: the
// first relay runs the embedded server; the second, started as the first
// one's refusal says, joins it as a client. Both relay one SQLite file
// (./courier.db, the default), which the application writes meanwhile: 60
// messages, drained; both stopped and one started again, the stream holds
// all 60.
func TestRelaysShareTheFirstsBroker(t *testing.T) {
	dir := t.TempDir()
	first := startRelayIn(t, dir, "--embedded-port", "0")
	url := first.ready(t)
	if msg := startRelayIn(t, dir, "--embedded-port", "0").refused(t); !strings.Contains(msg, "--broker-url "+url) {
		t.Fatalf("the second relay's refusal does not say how to join the first:\n%s", msg)
	}
	second := startRelayIn(t, dir, "--broker-url", url)
	second.ready(t)

	written, dbURL := writeAndDrain(t, dir, 60, 6, testenv.Lazy(func() any { return first.logs.String() + "\n" + second.logs.String() }))
	if s := outboxStatus(t, dbURL); s["dead_letters"] != 0 {
		t.Fatalf("dead letters: %v", s)
	}
	second.stop(t)
	first.stop(t)

	again := startRelayIn(t, dir, "--embedded-port", "0")
	nc := testenv.Connect(t, again.ready(t))
	got := testenv.StreamMessages(t, nc, "COURIER", couriernats.Config{SubjectPrefix: "courier."})
	dups := testenv.CheckDelivery(t, written, got)
	if len(got)-dups != len(written) {
		t.Fatalf("the stream holds %d messages (%d duplicates), want the %d written", len(got), dups, len(written))
	}
	again.stop(t)
}

// Relays started at the same moment on one new SQLite file: each creates
// and migrates it, as the embedded default does, and all relay; the
// application's writes and their claims queue for SQLite's write lock
// (WAL, busy timeout), and every message is published once drained.
func TestRelaysStartTogetherOnOneSQLiteFile(t *testing.T) {
	natsURL := testenv.NATSOrEmbedded(t)
	stream := testenv.Name("SQL")
	prefix := strings.ToLower(stream) + "."
	dir := t.TempDir()
	var relays []*relayProc
	for range 3 {
		relays = append(relays, startRelayIn(t, dir, "--broker-url", natsURL, "--stream", stream, "--subject-prefix", prefix))
	}
	for _, r := range relays {
		r.ready(t)
	}
	written, _ := writeAndDrain(t, dir, 300, 10, "")
	for _, r := range relays {
		r.stop(t)
		if strings.Contains(r.logs.String(), `"level":"ERROR"`) || strings.Contains(r.logs.String(), "SQLITE_BUSY") {
			t.Errorf("relay %d logged errors:\n%s", r.cmd.Process.Pid, r.logs)
		}
	}
	got := testenv.StreamMessages(t, testenv.Connect(t, natsURL), stream, couriernats.Config{SubjectPrefix: prefix})
	testenv.CheckDelivery(t, written, got)
}

// A second `courier demo` on the --data-dir of one under way is refused,
// naming the first's pid, and deletes nothing: without the lock it would
// delete the first run's files (its log, its stream's directory, its SQLite
// files) as an earlier run's, and write the same ones.
func TestDemoDataDirInUse(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "demo")
	first := exec.Command(os.Args[0], "demo", "--orders", "1000000", "--crash", "none", "--data-dir", dir)
	first.Env = append(os.Environ(), "COURIER_TEST_BE_CLI=1")
	var out lockedBuffer
	first.Stdout, first.Stderr = &out, &out
	testenv.Must(t, first.Start(), "start the first demo")
	t.Cleanup(func() { _ = first.Process.Kill(); _ = first.Wait() })
	log := filepath.Join(dir, "demo.log")
	// The demo logs that it starts before it creates its databases: wait
	// for both, so that the second demo meets a directory fully in use.
	testenv.Eventually(t, time.Minute, func() bool {
		b, _ := os.ReadFile(log)
		_, err := os.Stat(filepath.Join(dir, "orders.db"))
		return strings.Contains(string(b), "demo starting") && err == nil
	}, "the first demo did not start; its output:\n%s", &out)

	code, _, errOut := runCLI(t, "demo", "--orders", "5", "--crash", "none", "--data-dir", dir)
	want := fmt.Sprintf("--data-dir %s is in use by courier process %d", dir, first.Process.Pid)
	if code != 1 || !strings.Contains(errOut, want) {
		t.Errorf("second demo on the first's --data-dir: exit %d, %q; want exit 1 and %q", code, errOut, want)
	}
	b, err := os.ReadFile(log)
	if err != nil || !strings.Contains(string(b), "demo starting") {
		t.Errorf("the first demo's log is gone or rewritten: %v", err)
	}
	for _, name := range []string{"nats", "orders.db"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Errorf("the first demo's %s: %v", name, err)
		}
	}
}

// courier migrate --dir writes new files only: a name that exists, as a
// file or as a symbolic link (dangling or not), is neither written over
// nor written through, and the files the failed export created are
// removed; exports running at the same moment into one directory write
// each file once, whole.
func TestMigrateExportWritesNewFilesOnly(t *testing.T) {
	dir := t.TempDir()
	elsewhere := filepath.Join(t.TempDir(), "target.sql")
	second := "0002_courier_" + sqlite.ExportSQL()[1].Name + ".up.sql"
	testenv.Must(t, os.Symlink(elsewhere, filepath.Join(dir, second)), "symlink")
	code, out, errOut := runCLI(t, "migrate", "--dir", dir, "--dialect", "sqlite")
	if code != 1 || !strings.Contains(errOut, second+" exists already") {
		t.Errorf("migrate --dir over a dangling symbolic link: exit %d, %q %q; want exit 1 naming %s", code, out, errOut, second)
	}
	if _, err := os.Lstat(elsewhere); err == nil {
		t.Errorf("migrate --dir wrote through the symbolic link %s to %s", second, elsewhere)
	}
	if left, _ := os.ReadDir(dir); len(left) != 1 {
		t.Errorf("a failed export left %v; want only the link that was there", left)
	}

	// Exports at the same moment into one new directory.
	dir = filepath.Join(t.TempDir(), "migrations")
	const n = 4
	codes := make(chan int, n)
	for range n {
		go func() {
			cmd := exec.Command(os.Args[0], "migrate", "--dir", dir, "--dialect", "sqlite")
			cmd.Env = append(os.Environ(), "COURIER_TEST_BE_CLI=1")
			_ = cmd.Run()
			codes <- cmd.ProcessState.ExitCode()
		}()
	}
	ok := 0
	for range n {
		if <-codes == 0 {
			ok++
		}
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.up.sql"))
	if ok < 1 || len(files) != len(sqlite.ExportSQL()) {
		t.Fatalf("%d of %d concurrent exports succeeded, %d files; want at least one and %d files", ok, n, len(files), len(sqlite.ExportSQL()))
	}
	for i, m := range sqlite.ExportSQL() {
		name := filepath.Join(dir, fmt.Sprintf("%04d_courier_%s.up.sql", i+1, m.Name))
		if b, err := os.ReadFile(name); err != nil || string(b) != m.SQL {
			t.Errorf("%s: %d bytes (%v), want the migration's %d", name, len(b), err, len(m.SQL))
		}
	}
}

// writeAndDrain writes n messages over keys keys, each in a transaction of
// its own, to dir's ./courier.db, and waits while the relays drain them
// (logs, shown on failure, says what they did). It returns the messages
// and the database's URL.
func writeAndDrain(t *testing.T, dir string, n, keys int, logs any) ([]courier.Message, string) {
	t.Helper()
	path := filepath.Join(dir, "courier.db")
	db, err := sqlite.Open(path)
	testenv.Must(t, err, "open ./courier.db")
	defer db.Close()
	ctx := context.Background()
	w := outbox.New(sqlite.DatabaseSQL(), outbox.Config{})
	var written []courier.Message
	for i := range n {
		m := courier.NewMessage("orders", fmt.Sprintf("k%d", i%keys), "OrderPlaced", []byte(strconv.Itoa(i)))
		tx, err := db.BeginTx(ctx, nil)
		testenv.Must(t, err, "begin")
		testenv.Must(t, w.Write(ctx, tx, m), "write")
		testenv.Must(t, tx.Commit(), "commit")
		written = append(written, m)
	}
	dbURL := "sqlite://" + path
	testenv.WhileProgressing(t, 30*time.Second, func() (bool, any) {
		s := outboxStatus(t, dbURL)
		return s["pending"] == 0 && s["leased"] == 0 && s["in_backoff"] == 0, s["pending"]
	}, "the relays did not drain the outbox; logs:\n%v", logs)
	return written, dbURL
}
