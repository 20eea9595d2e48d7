// Package node_test runs the tests of the Node.js client of the outbox
// (clients/node, `node --test`) against the contract's vectors and real
// databases: a PostgreSQL schema, a MySQL or MariaDB database and a SQLite
// file, each migrated by Courier's Go driver, so that the client writes
// into exactly the tables Courier's relays read.
package node_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/store/mysql"
	"github.com/courier-go/courier/store/postgres"
	"github.com/courier-go/courier/store/sqlite"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(testenv.M(m)) }

// The node --test suites pass against the contract's vectors, SQLite
// always, and PostgreSQL and MySQL/MariaDB when their COURIER_TEST_*
// variables are set; a test the suites skip for want of a database fails
// this one when services are required.
func TestNodeClient(t *testing.T) {
	node, modules := testenv.Node(t)
	env := append(testenv.NodeEnv(modules), "COURIER_NODE_SQLITE_PATH="+sqliteFile(t))
	if os.Getenv(testenv.EnvPostgres) != "" {
		env = append(env, "COURIER_NODE_POSTGRES_URL="+testenv.Postgres(t, testenv.Migrate(postgres.NewDriver)).LibpqURL())
	}
	if os.Getenv(testenv.EnvMySQL) != "" {
		env = append(env, "COURIER_NODE_MYSQL_URL="+testenv.MySQL(t, testenv.Migrate(mysql.NewDriver)).PlainURL())
	}
	tests, err := filepath.Glob(filepath.Join("test", "*.test.js"))
	if err != nil || len(tests) == 0 {
		t.Fatalf("no test/*.test.js: %v", err)
	}
	out := runNode(t, node, env, append([]string{"--test"}, tests...)...)
	skipped := regexp.MustCompile(`(?m)^.*# SKIP.*$`).FindAll(out, -1)
	if len(skipped) > 0 && os.Getenv(testenv.EnvRequire) == "1" {
		t.Errorf("with services required, node skipped tests:\n%s", bytes.Join(skipped, []byte("\n")))
	}
}

// TestExample runs examples/place_order.js on each database, as the
// README shows it: it places order-42 and its message once, and a second
// time fails (the order exists) and writes no second message.
func TestExample(t *testing.T) {
	node, modules := testenv.Node(t)
	env := testenv.NodeEnv(installed(t) + string(os.PathListSeparator) + modules)
	placeOrder := func(url string) ([]byte, error) {
		cmd := exec.Command(node, filepath.Join("examples", "place_order.js"), url, "order-42", "1999")
		cmd.Env = env
		return cmd.CombinedOutput()
	}
	run := func(t *testing.T, url string, count func(id string) int) {
		out, err := placeOrder(url)
		if err != nil {
			t.Fatalf("place_order.js: %v\n%s", err, out)
		}
		var id, topic string
		if _, err := fmt.Sscanf(string(out), "placed order-42: message %s on topic %s", &id, &topic); err != nil || topic != "orders" {
			t.Fatalf("place_order.js printed %q, want \"placed order-42: message ID on topic orders\"", out)
		}
		if n := count(id); n != 1 {
			t.Fatalf("message %s: %d rows in courier_outbox, want 1", id, n)
		}
		if out, err := placeOrder(url); err == nil {
			t.Fatalf("placing order-42 twice succeeded: %s", out)
		}
		if n := count(""); n != 1 {
			t.Fatalf("after a failed second order: %d rows in courier_outbox, want 1", n)
		}
	}
	t.Run("sqlite", func(t *testing.T) {
		path := sqliteFile(t)
		db, err := sqlite.Open(path)
		testenv.Must(t, err, "open")
		defer db.Close()
		run(t, "sqlite://"+path, func(id string) (n int) {
			testenv.Must(t, db.QueryRow("SELECT COUNT(*) FROM courier_outbox WHERE message_id = ? OR ? = ''", id, id).Scan(&n), "count")
			return n
		})
	})
	t.Run("postgres", func(t *testing.T) {
		pg := testenv.Postgres(t, testenv.Migrate(postgres.NewDriver))
		run(t, pg.LibpqURL(), func(id string) (n int) {
			testenv.Must(t, pg.Pool.QueryRow(context.Background(), "SELECT COUNT(*) FROM courier_outbox WHERE message_id::text = $1 OR $1 = ''", id).Scan(&n), "count")
			return n
		})
	})
	t.Run("mysql", func(t *testing.T) {
		my := testenv.MySQL(t, testenv.Migrate(mysql.NewDriver))
		run(t, my.PlainURL(), func(id string) (n int) {
			testenv.Must(t, my.DB.QueryRow("SELECT COUNT(*) FROM courier_outbox WHERE message_id = ? OR ? = ''", id, id).Scan(&n), "count")
			return n
		})
	})
}

// installed returns a node_modules directory in which
// @courier-go/outbox is this directory, as npm install clients/node
// makes one.
func installed(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(".")
	testenv.Must(t, err, "clients/node")
	modules := filepath.Join(t.TempDir(), "node_modules")
	testenv.Must(t, os.MkdirAll(filepath.Join(modules, "@courier-go"), 0o755), "node_modules")
	testenv.Must(t, os.Symlink(dir, filepath.Join(modules, "@courier-go", "outbox")), "link @courier-go/outbox")
	return modules
}

// runNode runs node with args in this directory, failing the test with
// its output when it fails, logging its summary otherwise, and returns
// its output.
func runNode(t *testing.T, node string, env []string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, args...)
	cmd.Env = env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	began := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("node %v: %v\n%s", args, err, out.String())
	}
	summary := regexp.MustCompile(`(?m)^# (tests|pass|fail|skipped) .*$`).FindAll(out.Bytes(), -1)
	t.Logf("node %v in %s: %s", args, time.Since(began).Round(time.Millisecond), bytes.Join(summary, []byte(", ")))
	return out.Bytes()
}

// sqliteFile returns the path of a new SQLite file with Courier's tables.
func sqliteFile(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "courier.db")
	db, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := sqlite.NewDriver(db).Migrate(context.Background()); err != nil {
		t.Fatalf("migrate %s: %v", path, err)
	}
	return path
}
