// Package testenv gives tests the real services they run against: a fresh
// PostgreSQL schema or MySQL/MariaDB database per test, the machine's NATS
// server, or an embedded one.
//
// A test that needs an external service reads its URL from an environment
// variable (COURIER_TEST_POSTGRES_URL, COURIER_TEST_MYSQL_URL,
// COURIER_TEST_NATS_URL, COURIER_TEST_AMQP_URL). When the variable is unset
// the test is skipped, so `go test ./...` passes on a laptop with nothing
// installed. When COURIER_TEST_REQUIRE_SERVICES=1 (CI sets it) a missing
// variable fails the test instead.
//
// A test that needs some NATS server, not the machine's in particular, calls
// [NATSOrEmbedded]: the machine's server when COURIER_TEST_NATS_URL is set,
// an embedded one otherwise. SQLite and the embedded server need nothing
// installed, so the tests built on them always run.
//
// Skips are counted per missing variable. A package's TestMain runs its
// tests through [M], which prints one line saying what was skipped and why
// when anything was:
//
//	func TestMain(m *testing.M) { goleak.VerifyTestMain(testenv.M(m)) }
//
// Only tests import testenv (TestHouse, at the module's root, fails
// otherwise): a package that other packages' tests build on, such as
// broker/brokertest, takes what it needs as parameters (Harness.Long) or
// from a package of its own (internal/tcpproxy).
package testenv

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgxpool"
	natsgo "github.com/nats-io/nats.go"

	"github.com/courier-go/courier/broker/nats/embedded"
	"github.com/courier-go/courier/internal/redact"
	"github.com/courier-go/courier/internal/testwait"
)

// Environment variables read by this package.
const (
	EnvPostgres = "COURIER_TEST_POSTGRES_URL"
	// EnvMySQL is a DSN of github.com/go-sql-driver/mysql for a user that
	// may create and drop databases, such as
	// root@tcp(127.0.0.1:3306)/test (the database named in it is only
	// connected to; parseTime and loc may be set or not).
	EnvMySQL   = "COURIER_TEST_MYSQL_URL"
	EnvNATS    = "COURIER_TEST_NATS_URL"
	EnvRequire = "COURIER_TEST_REQUIRE_SERVICES"
)

// EnvAMQP is the amqp:// URL of a RabbitMQ broker whose user may declare
// exchanges and queues, such as amqp://guest:guest@127.0.0.1:5672/.
const EnvAMQP = "COURIER_TEST_AMQP_URL"

// Need returns the value of the environment variable env, skipping the test
// when it is unset (failing it when services are required).
func Need(t testing.TB, env string) string {
	t.Helper()
	v := os.Getenv(env)
	if v != "" {
		return v
	}
	if os.Getenv(EnvRequire) == "1" {
		t.Fatalf("%s is not set and %s=1: this test needs the service", env, EnvRequire)
	}
	skipped.add(env)
	t.Skipf("needs a service: set %s", env)
	return ""
}

// skipped counts the tests skipped for each unset variable.
var skipped = skips{n: map[string]int{}}

type skips struct {
	mu sync.Mutex
	n  map[string]int
}

func (s *skips) add(env string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n[env]++
}

// Skipped returns how many tests were skipped so far for each unset
// environment variable.
func Skipped() map[string]int {
	skipped.mu.Lock()
	defer skipped.mu.Unlock()
	out := make(map[string]int, len(skipped.n))
	for env, n := range skipped.n {
		out[env] = n
	}
	return out
}

// SkipSummary returns one line saying how many tests were skipped for lack
// of a service and which variable each needed, such as
//
//	skipped 12 tests: COURIER_TEST_POSTGRES_URL unset (8), COURIER_TEST_MYSQL_URL unset (4)
//
// or "" when none was.
func SkipSummary() string {
	counts := Skipped()
	envs := make([]string, 0, len(counts))
	total := 0
	for env, n := range counts {
		envs = append(envs, env)
		total += n
	}
	if total == 0 {
		return ""
	}
	slices.SortFunc(envs, func(a, b string) int {
		if counts[a] != counts[b] {
			return counts[b] - counts[a]
		}
		return strings.Compare(a, b)
	})
	parts := make([]string, len(envs))
	for i, env := range envs {
		parts[i] = fmt.Sprintf("%s unset (%d)", env, counts[env])
	}
	noun := "tests"
	if total == 1 {
		noun = "test"
	}
	return fmt.Sprintf("skipped %d %s: %s", total, noun, strings.Join(parts, ", "))
}

// Main is what TestMain needs: Run runs the tests and then prints
// [SkipSummary] when it is not empty. goleak.VerifyTestMain accepts it in
// place of *testing.M.
type Main struct{ m *testing.M }

// M wraps m for TestMain:
//
//	func TestMain(m *testing.M) { goleak.VerifyTestMain(testenv.M(m)) }
//
// or, without goleak, os.Exit(testenv.M(m).Run()).
func M(m *testing.M) Main { return Main{m} }

// Run runs the tests, prints the skip summary on standard output and
// returns the exit code. `go test` shows it with -v, when it runs in the
// package's directory (no package arguments), and when the package fails;
// a passing package listed with others is summarised by its "ok" line
// alone.
func (m Main) Run() int {
	code := m.m.Run()
	if line := SkipSummary(); line != "" {
		fmt.Println(line)
	}
	return code
}

// Name returns a short random identifier usable as a schema, stream or
// subject token.
func Name(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// PG is a PostgreSQL schema of its own for one test.
type PG struct {
	// URL connects with search_path set to the test's schema.
	URL string
	// Schema is the schema's name.
	Schema string
	// Pool is a pool on URL.
	Pool *pgxpool.Pool
	// Admin is a pool on the base URL, for things like pg_terminate_backend.
	Admin *pgxpool.Pool
}

// Postgres creates a fresh schema, dropped when the test ends, and returns
// pools on it. Unless migrate is nil it is applied to the pool, typically
// Courier's migrations: testenv.Postgres(t, testenv.Migrate(postgres.NewDriver)).
func Postgres(t testing.TB, migrate func(context.Context, *pgxpool.Pool) error) *PG {
	t.Helper()
	return PostgresAt(t, Need(t, EnvPostgres), migrate)
}

// PostgresOwn is Postgres on a server of the test's own (EnvPostgresBin),
// with wal_level logical: for a test that must not wait on other tests'
// transactions, as making a logical replication slot does (it waits until
// every transaction open when it began has ended).
func PostgresOwn(t testing.TB, migrate func(context.Context, *pgxpool.Pool) error) *PG {
	t.Helper()
	srv := StartPostgres(t, "wal_level=logical", "max_connections=200")
	return PostgresAt(t, srv.URL, migrate)
}

// PostgresAt is Postgres on the server at base, a URL.
func PostgresAt(t testing.TB, base string, migrate func(context.Context, *pgxpool.Pool) error) *PG {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pgxpool.New(ctx, base)
	if err != nil {
		t.Fatalf("connect to %s: %v", redact.URL(base), err)
	}
	t.Cleanup(admin.Close)
	schema := Name("t_")
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatalf("create schema: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := admin.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Logf("drop schema %s: %v", schema, err)
		}
	})
	u := WithSearchPath(t, base, schema)
	cfg, err := pgxpool.ParseConfig(u)
	if err != nil {
		t.Fatalf("parse url: %v", err)
	}
	cfg.MaxConns = 20
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(pool.Close)
	if migrate != nil {
		if err := migrate(ctx, pool); err != nil {
			t.Fatalf("migrate: %v", err)
		}
	}
	return &PG{URL: u, Schema: schema, Pool: pool, Admin: admin}
}

// Migrate returns the migrate argument of [Postgres] and [MySQL] that
// applies Courier's migrations through the driver a dialect's constructor
// returns on the test's handle, such as postgres.NewDriver or
// mysql.NewDriver.
func Migrate[H any, D interface {
	Migrate(ctx context.Context) ([]int, error)
}](driver func(H) D) func(context.Context, H) error {
	return func(ctx context.Context, h H) error {
		_, err := driver(h).Migrate(ctx)
		return err
	}
}

// WithSearchPath returns the connection URL base with search_path set.
func WithSearchPath(t testing.TB, base, schema string) string {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil || !strings.HasPrefix(u.Scheme, "postgres") {
		t.Fatalf("%s must be a postgres:// URL, got %q", EnvPostgres, base)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// MySQLDB is a MySQL or MariaDB database of its own for one test.
type MySQLDB struct {
	// DSN connects to the test's database (the base DSN with its database
	// name replaced).
	DSN string
	// URL is the same database as a mysql:// URL, the form store/dburl
	// opens.
	URL string
	// Name is the database's name.
	Name string
	// DB is a pool on DSN.
	DB *sql.DB
	// Admin is a pool on the base DSN.
	Admin *sql.DB
}

// MySQL creates a fresh database, dropped when the test ends, and returns
// pools on it. Unless migrate is nil it is applied to the database,
// typically Courier's migrations: testenv.MySQL(t, testenv.Migrate(mysql.NewDriver)).
func MySQL(t testing.TB, migrate func(context.Context, *sql.DB) error) *MySQLDB {
	t.Helper()
	base := Need(t, EnvMySQL)
	cfg, err := gomysql.ParseDSN(base)
	if err != nil {
		t.Fatalf("%s must be a go-sql-driver DSN such as root@tcp(127.0.0.1:3306)/test: %v", EnvMySQL, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := sql.Open("mysql", base)
	if err != nil {
		t.Fatalf("open %s: %v", EnvMySQL, err)
	}
	t.Cleanup(func() { admin.Close() })
	name := Name("courier_t_")
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create database (is the server at %s up?): %v", cfg.Addr, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := admin.ExecContext(ctx, "DROP DATABASE "+name); err != nil {
			t.Logf("drop database %s: %v", name, err)
		}
	})
	cfg.DBName = name
	dsn := cfg.FormatDSN()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	db.SetMaxOpenConns(20)
	t.Cleanup(func() { db.Close() })
	if migrate != nil {
		if err := migrate(ctx, db); err != nil {
			t.Fatalf("migrate: %v", err)
		}
	}
	return &MySQLDB{DSN: dsn, URL: mysqlURL(cfg), Name: name, DB: db, Admin: admin}
}

// mysqlURL returns the mysql:// URL of the DSN cfg formats, with the same
// parameters.
func mysqlURL(cfg *gomysql.Config) string {
	u := url.URL{Scheme: "mysql", User: url.User(cfg.User), Host: cfg.Addr, Path: "/" + cfg.DBName}
	if cfg.Passwd != "" {
		u.User = url.UserPassword(cfg.User, cfg.Passwd)
	}
	// The parameters follow the last @ (a password may hold one; the
	// parameters are query-escaped).
	dsn := cfg.FormatDSN()
	_, u.RawQuery, _ = strings.Cut(dsn[strings.LastIndex(dsn, "@")+1:], "?")
	return u.String()
}

// NATS returns the URL of the machine's NATS server (COURIER_TEST_NATS_URL),
// skipping the test when it is unset. Use it for tests about that server;
// a test that needs some NATS server calls [NATSOrEmbedded].
func NATS(t testing.TB) string {
	t.Helper()
	return Need(t, EnvNATS)
}

// AMQP returns the URL of the machine's RabbitMQ (COURIER_TEST_AMQP_URL),
// skipping the test when it is unset.
func AMQP(t testing.TB) string {
	t.Helper()
	return Need(t, EnvAMQP)
}

// NATSOrEmbedded returns the URL of a NATS server with JetStream for the
// test: the machine's when COURIER_TEST_NATS_URL is set, else an embedded
// one started for the test (see [EmbeddedNATS]). It never skips; with
// COURIER_TEST_REQUIRE_SERVICES=1 an unset variable fails the test, so CI
// keeps testing the machine's server.
func NATSOrEmbedded(t testing.TB) string {
	t.Helper()
	if u := os.Getenv(EnvNATS); u != "" {
		return u
	}
	if os.Getenv(EnvRequire) == "1" {
		t.Fatalf("%s is not set and %s=1: this test runs on the machine's NATS server when services are required", EnvNATS, EnvRequire)
	}
	return EmbeddedNATS(t).ClientURL()
}

// EmbeddedNATS starts an in-process NATS server with JetStream in a
// temporary directory, stopped when the test ends. Fsync is off: tests do not
// pull the power.
func EmbeddedNATS(t testing.TB) *embedded.Server {
	t.Helper()
	return EmbeddedNATSAt(t, t.TempDir(), 0)
}

// EmbeddedNATSAt starts an embedded server on dir and port (0: any), for
// tests that stop a server and start it again where it was.
func EmbeddedNATSAt(t testing.TB, dir string, port int) *embedded.Server {
	t.Helper()
	srv, err := embedded.Start(embedded.Config{Dir: dir, Port: port, NoSync: true})
	if err != nil {
		t.Fatalf("start embedded nats: %v", err)
	}
	t.Cleanup(srv.Shutdown)
	return srv
}

// Connect connects to a NATS server for the test's duration.
func Connect(t testing.TB, url string, opts ...natsgo.Option) *natsgo.Conn {
	t.Helper()
	nc, err := natsgo.Connect(url, opts...)
	if err != nil {
		t.Fatalf("connect to nats %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// Eventually polls cond every 10ms until it is true or timeout passes, then
// fails the test with msg (testwait.Eventually).
func Eventually(t testing.TB, timeout time.Duration, cond func() bool, msg string, args ...any) {
	t.Helper()
	testwait.Eventually(t, timeout, cond, msg, args...)
}

// WhileProgressing polls check every 10ms until it reports done, and fails
// the test with msg once the state check reports has stayed the same for
// stall (testwait.WhileProgressing). msg's own arguments are best
// testenv.Lazy, so that they too show what was true then.
func WhileProgressing(t testing.TB, stall time.Duration, check func() (done bool, state any), msg string, args ...any) {
	t.Helper()
	testwait.WhileProgressing(t, stall, check, msg, args...)
}

// Must fails the test on a non-nil error (testwait.Must).
func Must(t testing.TB, err error, what string) {
	t.Helper()
	testwait.Must(t, err, what)
}

// Lazy formats the value fn returns when it is printed, so a failure message
// shows the state at the time of failure, not when the check began
// (testwait.Lazy).
type Lazy = testwait.Lazy
