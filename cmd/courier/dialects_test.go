package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	natsgo "github.com/nats-io/nats.go"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/store/mysql"
	"github.com/courier-go/courier/store/sqlite"
)

// The embedded default: no database URL, no broker URL. The relay creates
// ./courier.db and an in-process NATS server, says where they are, and an
// application in another process writes to the file and is relayed.
func TestEmbeddedDefault(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	cmd := exec.Command(os.Args[0], "relay", "--log-format", "json", "--embedded-port", "0")
	cmd.Env = append(os.Environ(), "COURIER_TEST_BE_CLI=1", "COURIER_DATABASE_URL=", "COURIER_BROKER_URL=")
	stderr, err := cmd.StderrPipe()
	testenv.Must(t, err, "pipe")
	testenv.Must(t, cmd.Start(), "start relay")
	t.Cleanup(func() { _ = cmd.Process.Kill() })

	var brokerURL, dbPath, dataDir string
	lines := bufio.NewScanner(stderr)
	for brokerURL == "" || dbPath == "" {
		if !lines.Scan() {
			t.Fatalf("relay exited before announcing where things are")
		}
		var rec map[string]any
		if err := json.Unmarshal(lines.Bytes(), &rec); err != nil {
			t.Fatalf("log line is not JSON: %s", lines.Text())
		}
		switch msg := fmt.Sprint(rec["msg"]); {
		case strings.HasPrefix(msg, "broker: embedded NATS"):
			brokerURL, dataDir = fmt.Sprint(rec["url"]), fmt.Sprint(rec["data"])
		case strings.HasPrefix(msg, "database: embedded SQLite"):
			dbPath = fmt.Sprint(rec["path"])
		}
	}
	go func() { // keep draining the logs
		for lines.Scan() {
		}
	}()
	if dbPath != dir+"/courier.db" || dataDir != dir+"/courier-data" {
		t.Fatalf("database at %s, broker data at %s; want them in the working directory %s", dbPath, dataDir, dir)
	}

	nc := testenv.Connect(t, brokerURL)
	got := make(chan *natsgo.Msg, 10)
	sub, err := nc.ChanSubscribe("courier.orders", got)
	testenv.Must(t, err, "subscribe")
	defer sub.Unsubscribe()

	db, err := sqlite.Open(dbPath)
	testenv.Must(t, err, "open courier.db")
	defer db.Close()
	w := outbox.New(sqlite.DatabaseSQL(), outbox.Config{})
	msg := courier.NewMessage("orders", "order-1", "OrderPlaced", []byte("hello"))
	tx, err := db.BeginTx(context.Background(), nil)
	testenv.Must(t, err, "begin")
	testenv.Must(t, w.Write(context.Background(), tx, msg), "write")
	testenv.Must(t, tx.Commit(), "commit")
	select {
	case m := <-got:
		if string(m.Data) != "hello" || m.Header.Get("Nats-Msg-Id") != msg.ID.String() {
			t.Fatalf("received %q %v", m.Data, m.Header)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("message not relayed from ./courier.db to the embedded broker")
	}
	testenv.Must(t, cmd.Process.Signal(syscall.SIGTERM), "sigterm")
	if err := cmd.Wait(); err != nil {
		t.Fatalf("relay exit: %v", err)
	}
	if code, out, _ := runCLI(t, "status", "--json"); code != 0 || !strings.Contains(out, `"pending": 0`) {
		t.Fatalf("status on the default database: %d %s", code, out)
	}
}

// The database URL picks the dialect: the same commands on MySQL/MariaDB.
func TestMySQLURL(t *testing.T) {
	my := testenv.MySQL(t, nil)
	u := mysqlURL(t, my.DSN)
	code, out, errOut := runCLI(t, "migrate", "--database-url", u)
	if code != 0 || !strings.Contains(out, "applied") {
		t.Fatalf("migrate: %d %s %s", code, out, errOut)
	}
	var n int
	testenv.Must(t, my.DB.QueryRow("SELECT count(*) FROM courier_outbox").Scan(&n), "outbox exists")
	if code, out, errOut = runCLI(t, "status", "--database-url", u); code != 0 || !strings.Contains(out, "pending") {
		t.Fatalf("status: %d %s %s", code, out, errOut)
	}
}

// mysqlURL turns a go-sql-driver DSN into the mysql:// URL the CLI takes.
func mysqlURL(t testing.TB, dsn string) string {
	cfg, err := gomysql.ParseDSN(dsn)
	testenv.Must(t, err, "parse dsn")
	u := url.URL{Scheme: "mysql", User: url.User(cfg.User), Host: cfg.Addr, Path: "/" + cfg.DBName}
	if cfg.Passwd != "" {
		u.User = url.UserPassword(cfg.User, cfg.Passwd)
	}
	return u.String()
}

func TestSQLiteURLForms(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	for _, u := range []string{"sqlite:///" + strings.TrimPrefix(dir, "/") + "/abs.db", "sqlite:rel.db", "file:other.db"} {
		code, out, errOut := runCLI(t, "migrate", "--database-url", u)
		if code != 0 || !strings.Contains(out, "applied") {
			t.Fatalf("migrate %s: %d %s %s", u, code, out, errOut)
		}
	}
	for _, f := range []string{"abs.db", "rel.db", "other.db"} {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("%s not created: %v", f, err)
		}
	}
	if code, out, _ := runCLI(t, "migrate", "--print", "--dialect", "sqlite"); code != 0 || !strings.Contains(out, "CREATE TABLE") {
		t.Fatalf("print sqlite: %d", code)
	}
}

// A mysql:// URL's user and password are percent-decoded: a password with
// '@', ':' or '/' in it is written %40, %3A, %2F as in any URL.
func TestMySQLURLPercentEncodedPassword(t *testing.T) {
	my := testenv.MySQL(t, testenv.Migrate(mysql.NewDriver))
	cfg, err := gomysql.ParseDSN(my.DSN)
	testenv.Must(t, err, "parse dsn")
	user, password := testenv.Name("courier_u_"), "a@b:c/d%e?f"
	ctx := context.Background()
	_, err = my.Admin.ExecContext(ctx, "CREATE USER '"+user+"'@'%' IDENTIFIED BY '"+password+"'")
	testenv.Must(t, err, "create user")
	t.Cleanup(func() { _, _ = my.Admin.ExecContext(context.Background(), "DROP USER '"+user+"'@'%'") })
	_, err = my.Admin.ExecContext(ctx, "GRANT ALL ON "+my.Name+".* TO '"+user+"'@'%'")
	testenv.Must(t, err, "grant")

	u := fmt.Sprintf("mysql://%s:%s@%s/%s?timeout=5s", user, url.QueryEscape(password), cfg.Addr, my.Name)
	if code, out, errOut := runCLI(t, "status", "--database-url", u); code != 0 || !strings.Contains(out, "pending") {
		t.Fatalf("status with a percent-encoded password: %d %s %s", code, out, errOut)
	}
	if code, _, errOut := runCLI(t, "status", "--database-url", strings.Replace(u, "%40", "%41", 1)); code != 1 || strings.Contains(errOut, "b%3Ac") {
		t.Fatalf("wrong password: %d %q; want exit 1 and the password hidden", code, errOut)
	}
}
