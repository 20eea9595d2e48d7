package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/store/postgres"
	"github.com/courier-go/courier/store/sqlite"
)

// The test binary doubles as the courier binary for subprocess tests.
func TestMain(m *testing.M) {
	if os.Getenv("COURIER_TEST_BE_CLI") == "1" {
		main()
		return
	}
	os.Exit(testenv.M(m).Run())
}

func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestBadInputGetsOneLineAndNonZeroExit(t *testing.T) {
	t.Chdir(t.TempDir()) // no ./courier.db here
	l, err := net.Listen("tcp", "127.0.0.1:0")
	testenv.Must(t, err, "listen")
	defer l.Close()
	taken := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	for _, v := range []string{"COURIER_DATABASE_URL", "COURIER_BROKER_URL", "COURIER_WEBHOOK_SECRET"} {
		t.Setenv(v, "")
		os.Unsetenv(v)
	}
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"relay", "--bogus"}, 2, "unknown flag --bogus"},
		{[]string{"status"}, 1, "no database given and ./courier.db does not exist"},
		{[]string{"status", "--database-url", "redis://localhost/x"}, 1, "use postgres://user:password@host:5432/db, mysql://"},
		{[]string{"status", "--database-url", "mysql://nohost"}, 1, "is not a MySQL URL"},
		{[]string{"status", "--database-url", "sqlite:///no/such/dir/x.db"}, 1, "no SQLite database at /no/such/dir/x.db"},
		{[]string{"status", "--database-url", "postgres://nobody@127.0.0.1:1/x"}, 1, "cannot reach the database at postgres://nobody@127.0.0.1:1/x"},
		{[]string{"status", "--database-url", "postgres://u:secret@127.0.0.1:1/x"}, 1, "postgres://u:xxxxx@127.0.0.1:1/x"},
		{[]string{"status", "--database-url", "postgres://u@127.0.0.1:1/x?password=secret&sslpassword=secret2"}, 1, "postgres://u@127.0.0.1:1/x?password=xxxxx&sslpassword=xxxxx"},
		{[]string{"status", "--database-url", "mysql://u:p#secret@127.0.0.1:1/x"}, 1, "percent-encode"},
		{[]string{"status", "--database-url", "host=db password=secret"}, 1, "password=xxxxx"},
		{[]string{"relay", "--database-url", "postgres://u@127.0.0.1:1/x", "--broker-url", "amqp://u:se/cret@x/"}, 1, "percent-encode"},
		{[]string{"relay", "--database-url", "postgres://u@127.0.0.1:1/x", "--broker-url", "redis://x"}, 1, "is not a broker URL Courier knows: use amqp://user:password@host:5672/vhost, "},
		{[]string{"relay", "--database-url", "postgres://u@127.0.0.1:1/x", "--broker-url", "amqp://u:secret@x:bad/"}, 1, "is not a RabbitMQ URL"},
		{[]string{"relay", "--database-url", "postgres://u@127.0.0.1:1/x", "--broker-url", "nats://x:1", "--batch-size", "0"}, 1, "--batch-size is 0"},
		{[]string{"relay", "--embedded-port", taken}, 1, "embedded nats: cannot listen on 127.0.0.1:" + taken},
		{[]string{"relay", "--embedded-port", taken}, 1, "join it as a client with --broker-url nats://127.0.0.1:" + taken},
		{[]string{"frobnicate"}, 2, "unexpected argument frobnicate"},
	}
	for _, c := range cases {
		code, _, stderr := runCLI(t, c.args...)
		if code != c.code || !strings.Contains(stderr, c.want) || strings.Count(strings.TrimSpace(stderr), "\n") != 0 || strings.Contains(stderr, "secret") {
			t.Errorf("courier %v: exit %d, stderr %q; want exit %d and one line containing %q", c.args, code, stderr, c.code, c.want)
		}
	}
	if code, out, _ := runCLI(t, "version"); code != 0 || !strings.HasPrefix(out, "courier ") {
		t.Errorf("version: %d %q", code, out)
	}
	if code, out, _ := runCLI(t, "--help"); code != 0 || !strings.Contains(out, "relay") {
		t.Errorf("--help: %d %q", code, out)
	}
}

func TestMigrateExport(t *testing.T) {
	code, out, _ := runCLI(t, "migrate", "--print", "--dialect", "postgres")
	if code != 0 || !strings.Contains(out, "CREATE TABLE courier_outbox") || !strings.Contains(out, "INSERT INTO courier_schema_migrations") {
		t.Fatalf("migrate --print: %d\n%s", code, out)
	}
	dir := t.TempDir()
	code, out, _ = runCLI(t, "migrate", "--dir", dir, "--dialect", "postgres")
	files, _ := filepath.Glob(filepath.Join(dir, "*.up.sql"))
	if code != 0 || len(files) != len(postgres.ExportSQL()) {
		t.Fatalf("migrate --dir: %d %q, files %v", code, out, files)
	}
}

// The CLI round trip: migrate (twice), status before and after, and a relay
// process that drains the outbox and stops cleanly on SIGTERM, on the
// embedded default (SQLite) and on PostgreSQL.
func TestMigrateRelayStatus(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "courier.db")
		migrateRelayStatus(t, "sqlite://"+path, len(sqlite.ExportSQL()), func(ctx context.Context, msgs []courier.Message) {
			db, err := sqlite.Open(path)
			testenv.Must(t, err, "open")
			defer db.Close()
			tx, err := db.BeginTx(ctx, nil)
			testenv.Must(t, err, "begin")
			testenv.Must(t, outbox.New(sqlite.DatabaseSQL(), outbox.Config{}).Write(ctx, tx, msgs...), "write")
			testenv.Must(t, tx.Commit(), "commit")
		})
	})
	t.Run("postgres", func(t *testing.T) {
		pg := testenv.Postgres(t, nil)
		migrateRelayStatus(t, pg.URL, len(postgres.ExportSQL()), func(ctx context.Context, msgs []courier.Message) {
			tx, err := pg.Pool.Begin(ctx)
			testenv.Must(t, err, "begin")
			testenv.Must(t, outbox.New(postgres.Pgx(), outbox.Config{}).Write(ctx, tx, msgs...), "write")
			testenv.Must(t, tx.Commit(ctx), "commit")
		})
	})
}

// migrateRelayStatus runs the round trip on the database at url, which has
// no schema yet; migrations is the number of migrations migrate applies, and
// write commits messages to the outbox.
func migrateRelayStatus(t *testing.T, url string, migrations int, write func(context.Context, []courier.Message)) {
	natsURL := testenv.NATSOrEmbedded(t)
	stream := testenv.Name("CLI")
	ctx := context.Background()

	code, out, errOut := runCLI(t, "migrate", "--database-url", url)
	if code != 0 || !strings.Contains(out, "applied "+fmt.Sprint(migrations)+" migration") {
		t.Fatalf("migrate: %d %q %q", code, out, errOut)
	}
	if code, out, _ = runCLI(t, "migrate", "--database-url", url); code != 0 || !strings.Contains(out, "up to date") {
		t.Fatalf("migrate again: %d %q", code, out)
	}

	msgs := make([]courier.Message, 100)
	for i := range msgs {
		msgs[i] = courier.NewMessage("orders", "k", "T", []byte{byte(i)})
	}
	write(ctx, msgs)

	status := func() map[string]float64 { return outboxStatus(t, url) }
	if s := status(); s["pending"] != 100 || s["oldest_pending_age_seconds"] <= 0 {
		t.Fatalf("status before relaying: %v", s)
	}
	if code, out, _ := runCLI(t, "status", "--database-url", url); code != 0 || !strings.Contains(out, "pending") {
		t.Fatalf("status table: %q", out)
	}

	cmd := exec.Command(os.Args[0], "relay", "--log-format", "json")
	cmd.Env = append(os.Environ(), "COURIER_TEST_BE_CLI=1", "COURIER_DATABASE_URL="+url, "COURIER_BROKER_URL="+natsURL,
		"COURIER_STREAM="+stream, "COURIER_SUBJECT_PREFIX="+strings.ToLower(stream)+".")
	var logs bytes.Buffer
	cmd.Stderr = &logs
	testenv.Must(t, cmd.Start(), "start relay")
	testenv.WhileProgressing(t, 30*time.Second, func() (bool, any) { n := status()["pending"]; return n == 0, n },
		"relay did not drain the outbox; logs:\n%s", testenv.Lazy(func() any { return logs.String() }))
	testenv.Must(t, cmd.Process.Signal(syscall.SIGTERM), "sigterm")
	if err := cmd.Wait(); err != nil {
		t.Fatalf("relay exit after SIGTERM: %v\n%s", err, logs.String())
	}
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line is not JSON: %q", line)
		}
	}
	if !strings.Contains(logs.String(), "relay stopped") {
		t.Fatalf("no clean stop in logs:\n%s", logs.String())
	}
}
