// Package python_test runs the tests of the Python client,
// clients/python/courier_outbox, with Python's unittest: against the
// contract's vectors, and against real PostgreSQL, MariaDB (or MySQL) and
// SQLite databases that Courier migrated, one of each for the run.
package python_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/store/mysql"
	"github.com/courier-go/courier/store/postgres"
	"github.com/courier-go/courier/store/sqlite"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(testenv.M(m)) }

// The unittest suite passes on every database whose COURIER_TEST_*
// variable is set, and on SQLite always; each test it runs shows in the
// output, and a database's tests skipped for want of the database fail
// this test when services are required.
func TestUnittest(t *testing.T) {
	py := testenv.Python(t)
	env := append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1", "COURIER_PY_SQLITE_PATH="+sqliteDB(t))
	if os.Getenv(testenv.EnvPostgres) != "" {
		pg := testenv.Postgres(t, testenv.Migrate(postgres.NewDriver))
		env = append(env, "COURIER_PY_POSTGRES_URL="+os.Getenv(testenv.EnvPostgres), "COURIER_PY_POSTGRES_SCHEMA="+pg.Schema)
	}
	if os.Getenv(testenv.EnvMySQL) != "" {
		my := testenv.MySQL(t, testenv.Migrate(mysql.NewDriver))
		env = append(env, "COURIER_PY_MYSQL_URL="+my.PlainURL())
	}
	cmd := exec.Command(py, "-m", "unittest", "discover", "-v", "-s", "tests", "-t", ".")
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	t.Logf("python -m unittest:\n%s", out)
	if err != nil {
		t.Fatalf("python -m unittest: %v", err)
	}
	if os.Getenv(testenv.EnvRequire) == "1" {
		for _, line := range strings.Split(string(out), "\n") {
			if strings.Contains(line, "skipped") && strings.Contains(line, "is not set") {
				t.Errorf("with services required, a Python test was skipped: %s", line)
			}
		}
	}
}

// sqliteDB returns the path of a migrated SQLite database of the test's.
func sqliteDB(t *testing.T) string {
	path := filepath.Join(t.TempDir(), "outbox.db")
	db, err := sqlite.Open(path)
	testenv.Must(t, err, "open")
	defer db.Close()
	_, err = sqlite.NewDriver(db).Migrate(context.Background())
	testenv.Must(t, err, "migrate")
	return path
}

// The README's example places an order and its message on each database:
// it prints the message's id, and the row is there.
func TestExample(t *testing.T) {
	py := testenv.Python(t)
	run := func(t *testing.T, url string, count func(id string) int) {
		cmd := exec.Command(py, filepath.Join("examples", "place_order.py"), url, "order-42", "1999")
		cmd.Env = append(os.Environ(), "PYTHONPATH=.", "PYTHONDONTWRITEBYTECODE=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("place_order.py: %v\n%s", err, out)
		}
		var id, topic string
		if _, err := fmt.Sscanf(string(out), "placed order-42: message %s on topic %s", &id, &topic); err != nil || topic != "orders" {
			t.Fatalf("place_order.py printed %q, want \"placed order-42: message ID on topic orders\"", out)
		}
		if n := count(id); n != 1 {
			t.Fatalf("message %s: %d rows in courier_outbox, want 1", id, n)
		}
		cmd = exec.Command(py, filepath.Join("examples", "place_order.py"), url, "order-42", "1999")
		cmd.Env = append(os.Environ(), "PYTHONPATH=.", "PYTHONDONTWRITEBYTECODE=1")
		if out, err := cmd.CombinedOutput(); err == nil {
			t.Fatalf("placing order-42 twice succeeded: %s", out)
		}
		if n := count(id); n != 1 {
			t.Fatalf("after a failed second order: %d rows of message %s, want 1", n, id)
		}
	}
	t.Run("sqlite", func(t *testing.T) {
		path := sqliteDB(t)
		db, err := sqlite.Open(path)
		testenv.Must(t, err, "open")
		defer db.Close()
		run(t, "sqlite://"+path, func(id string) (n int) {
			testenv.Must(t, db.QueryRow("SELECT COUNT(*) FROM courier_outbox WHERE message_id = ?", id).Scan(&n), "count")
			return n
		})
	})
	t.Run("postgres", func(t *testing.T) {
		pg := testenv.Postgres(t, testenv.Migrate(postgres.NewDriver))
		run(t, pg.LibpqURL(), func(id string) (n int) {
			testenv.Must(t, pg.Pool.QueryRow(context.Background(), "SELECT COUNT(*) FROM courier_outbox WHERE message_id = $1", id).Scan(&n), "count")
			return n
		})
	})
	t.Run("mysql", func(t *testing.T) {
		my := testenv.MySQL(t, testenv.Migrate(mysql.NewDriver))
		run(t, my.PlainURL(), func(id string) (n int) {
			testenv.Must(t, my.DB.QueryRow("SELECT COUNT(*) FROM courier_outbox WHERE message_id = ?", id).Scan(&n), "count")
			return n
		})
	})
}
