package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/relay"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/dburl"
)

// benchDialect is a store dialect whose Courier relay drain the dialects
// section measures.
type benchDialect struct {
	name  string // as store.Database.Dialect() says it; keys the results
	label string // as printed in tables
	// inProcess: the database runs inside the relay process (no server),
	// so there is no server CPU apart from the relay's.
	inProcess bool
	// fresh creates a fresh migrated database of the dialect, nil for
	// PostgreSQL, which runs on the drain section's environment.
	fresh func(b *Bench, ctx context.Context) (*freshDB, error)
}

// benchDialects are the measured dialects, in the order of their table.
var benchDialects = []benchDialect{
	{name: "postgres", label: "PostgreSQL"},
	{name: "sqlite", label: "SQLite", inProcess: true, fresh: (*Bench).newSQLiteFile},
	{name: "mysql", label: "MySQL/MariaDB", fresh: (*Bench).newMySQLDatabase},
}

// dialects are the names of benchDialects. They key the cells of
// dialectFigures.
var dialects = func() []string {
	names := make([]string, len(benchDialects))
	for i, d := range benchDialects {
		names[i] = d.name
	}
	return names
}()

// dialectByName returns the benchDialect named name.
func dialectByName(name string) (benchDialect, error) {
	i := slices.IndexFunc(benchDialects, func(d benchDialect) bool { return d.name == name })
	if i < 0 {
		return benchDialect{}, fmt.Errorf("unknown dialect %q", name)
	}
	return benchDialects[i], nil
}

// freshDB is a fresh migrated database of the dialects section.
type freshDB struct {
	// DB is the database, open in this process.
	*dburl.DB
	// url opens it in the drain child.
	url string
	// pid is the database server's process when it runs on this machine,
	// else 0.
	pid int
	// cleanup closes the database and removes it.
	cleanup func()
}

// dialectKeys is the number of keys the dialects section's messages are
// spread over.
const dialectKeys = 10000

// defaultMySQLDSN is the -mysql default when BENCH_MYSQL_URL is not set.
const defaultMySQLDSN = "root@tcp(127.0.0.1:3306)/test"

// dialectName is a dialect's name as printed in tables.
func dialectName(name string) string {
	if d, err := dialectByName(name); err == nil {
		return d.label
	}
	return name
}

// errNotMeasured marks a dialect that cannot be measured on this machine
// (its server is unreachable): the table says why instead of listing a
// failure.
type errNotMeasured struct{ why string }

func (e errNotMeasured) Error() string { return "not measured: " + e.why }

// runDialect measures one drain of Courier's relay on dialect: n messages
// over dialectKeys keys written beforehand into a fresh database of that
// dialect, relayed by a child process to a fresh stream.
func (b *Bench) runDialect(ctx context.Context, dialect string) error {
	d, err := dialectByName(dialect)
	if err == nil {
		if d.fresh == nil {
			err = b.runDialectPostgres(ctx)
		} else {
			err = b.runDialectFresh(ctx, d)
		}
	}
	var nm errNotMeasured
	if errors.As(err, &nm) {
		logf("  %s not measured: %s", dialectName(dialect), nm.why)
		for _, f := range dialectFigures {
			b.results.Skip(f.ID, dialect, nm.why)
		}
		return nil
	}
	return err
}

// runDialectPostgres is the drain section's Courier drain (same schema,
// fill, relay and notifier) recorded in the dialects table.
func (b *Bench) runDialectPostgres(ctx context.Context) error {
	sys := &courierSystem{}
	env, err := newEnv(ctx, b.admin, b.cfg.pgURL, b.cfg.natsURL, sys.Name())
	if err != nil {
		return err
	}
	defer env.Close()
	if err := sys.Prepare(ctx, env); err != nil {
		return fmt.Errorf("prepare: %w", err)
	}
	n := b.cfg.drainN
	if err := sys.Fill(ctx, env, n, dialectKeys); err != nil {
		return err
	}
	rd, err := b.drainInChild(ctx, drainSpec{Env: *env, N: n}, b.backendsProbe(env), nil)
	if err != nil {
		return err
	}
	var left int64
	err = env.Pool.QueryRow(ctx, "SELECT count(*) FROM courier_outbox").Scan(&left)
	b.recordDialect(ctx, "postgres", env, rd, left, err)
	return nil
}

// runDialectFresh drains a fresh database of dialect d, written in this
// process and relayed by a child that opens it by its URL. An unreachable
// server is errNotMeasured.
func (b *Bench) runDialectFresh(ctx context.Context, d benchDialect) error {
	db, err := d.fresh(b, ctx)
	if err != nil {
		return err
	}
	defer db.cleanup()
	n := b.cfg.drainN
	if err := fillSQL(ctx, db, n, dialectKeys); err != nil {
		return fmt.Errorf("%s fill: %w", d.name, err)
	}
	env, err := newStreamEnv(ctx, b.cfg.natsURL, "courier_"+d.name)
	if err != nil {
		return err
	}
	defer env.Close()
	// Without a server (SQLite runs inside the relay process) there is no
	// server CPU to read (db.pid is 0).
	rd, err := b.drainInChild(ctx, drainSpec{Env: *env, N: n, DatabaseURL: db.url}, pidProbe(db.pid), nil)
	if err != nil {
		return err
	}
	var left int64
	err = db.SQL().QueryRowContext(ctx, "SELECT count(*) FROM courier_outbox").Scan(&left)
	b.recordDialect(ctx, d.name, env, rd, left, err)
	return nil
}

// newSQLiteFile creates a migrated SQLite file in a temporary directory,
// opened with sqlite.Open (through store/dburl); cleanup closes it and
// removes the directory.
func (*Bench) newSQLiteFile(ctx context.Context) (*freshDB, error) {
	dir, err := os.MkdirTemp("", "bench-sqlite-")
	if err != nil {
		return nil, err
	}
	u := "sqlite://" + filepath.Join(dir, "outbox.db")
	db, err := dburl.Open(ctx, u, dburl.Options{Create: true})
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	f := &freshDB{DB: db, url: u, cleanup: func() {
		db.Close()
		_ = os.RemoveAll(dir)
	}}
	if _, err := db.Migrate(ctx); err != nil {
		f.cleanup()
		return nil, err
	}
	return f, nil
}

// newMySQLDatabase creates and migrates a fresh database on the -mysql
// server; cleanup closes it and drops the database. An unreachable server
// is errNotMeasured.
func (b *Bench) newMySQLDatabase(ctx context.Context) (*freshDB, error) {
	if b.cfg.mysqlDSN == "" {
		return nil, errNotMeasured{"no MySQL DSN (-mysql is empty)"}
	}
	cfg, err := gomysql.ParseDSN(b.cfg.mysqlDSN)
	if err != nil {
		return nil, errNotMeasured{fmt.Sprintf("-mysql is not a go-sql-driver DSN: %v", err)}
	}
	if cfg.Net != "tcp" {
		return nil, errNotMeasured{fmt.Sprintf("-mysql connects over %s: give a tcp DSN such as %s", cfg.Net, defaultMySQLDSN)}
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Second // dial timeout: a silent host fails fast
	}
	admin, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		return nil, errNotMeasured{err.Error()}
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err = admin.PingContext(pctx)
	cancel()
	if err != nil {
		_ = admin.Close()
		return nil, errNotMeasured{fmt.Sprintf("MySQL/MariaDB at %s unreachable: %v", cfg.Addr, err)}
	}
	name := "bench_courier_" + randomToken(4)
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		_ = admin.Close()
		return nil, fmt.Errorf("create database: %w", err)
	}
	drop := func() {
		dctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if _, err := admin.ExecContext(dctx, "DROP DATABASE IF EXISTS "+name); err != nil {
			logf("warning: drop database %s: %v", name, err)
		}
		_ = admin.Close()
	}
	u := mysqlURL(cfg, name)
	db, err := dburl.Open(ctx, u, dburl.Options{})
	if err != nil {
		drop()
		return nil, err
	}
	f := &freshDB{DB: db, url: u, pid: localMySQLServer(cfg), cleanup: func() {
		db.Close()
		drop()
	}}
	if _, err := db.Migrate(ctx); err != nil {
		f.cleanup()
		return nil, err
	}
	return f, nil
}

// mysqlURL is the mysql:// URL of database name on the server of cfg, a
// tcp DSN, with its timeouts and parameters.
func mysqlURL(cfg *gomysql.Config, name string) string {
	u := url.URL{Scheme: "mysql", Host: cfg.Addr, Path: "/" + name, User: url.User(cfg.User)}
	if cfg.Passwd != "" {
		u.User = url.UserPassword(cfg.User, cfg.Passwd)
	}
	q := url.Values{}
	for k, v := range cfg.Params {
		q.Set(k, v)
	}
	if cfg.Timeout != 0 {
		q.Set("timeout", cfg.Timeout.String())
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// localMySQLServer returns the pid of the MariaDB or MySQL server process
// when cfg points at this machine, or 0.
func localMySQLServer(cfg *gomysql.Config) int {
	if cfg.Net != "unix" {
		host, _, err := net.SplitHostPort(cfg.Addr)
		if err != nil {
			return 0
		}
		if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			return 0
		}
	}
	for _, comm := range []string{"mariadbd", "mysqld"} {
		if pid := findProcess(comm); pid != 0 {
			return pid
		}
	}
	return 0
}

// recordDialect records one dialect drain: throughput and CPU per 100,000
// messages, flagged when the stream does not hold exactly the messages
// written or the outbox is not empty (left rows remain; errLeft: they could
// not be counted).
func (b *Bench) recordDialect(ctx context.Context, dialect string, env *Env, rd drainReading, left int64, errLeft error) {
	n := b.cfg.drainN
	if err := b.checkStream(ctx, env, n); err != nil {
		b.results.Flag("dialect_drain", dialect, err.Error())
	}
	switch {
	case errLeft != nil:
		b.results.Flag("dialect_drain", dialect, "outbox not counted after the drain: "+errLeft.Error())
	case left != 0:
		b.results.Flag("dialect_drain", dialect, fmt.Sprintf("%d messages left in the outbox after the drain", left))
	}
	b.results.Add("dialect_drain", dialect, float64(n)/rd.Elapsed.Seconds())
	per := 100000 / float64(n)
	b.results.Add("dialect_cpu_relay", dialect, rd.CPU.Seconds()*per)
	if rd.dbOK {
		b.results.Add("dialect_cpu_db", dialect, rd.dbCPU.Seconds()*per)
	}
}

// fillSQL writes n benchmark messages over keys keys with Courier's outbox
// writer on d, in transactions of 1000, as courierSystem.Fill does on
// PostgreSQL.
func fillSQL(ctx context.Context, d store.Driver[*sql.Tx], n, keys int) error {
	w := outbox.New(d.Inserter(), outbox.Config{})
	for done := 0; done < n; {
		k := min(1000, n-done)
		msgs := make([]courier.Message, k)
		for i := range msgs {
			msgs[i] = courierMessage(keyFor(done+i, keys), payloadFor(done+i))
		}
		if err := d.InTx(ctx, func(tx *sql.Tx) error { return w.Write(ctx, tx, msgs...) }); err != nil {
			return err
		}
		done += k
	}
	return nil
}

// dialectRelayStarter returns what starts a drain child's Courier relay on
// the store at s.DatabaseURL: default relay settings, no notifier (polling,
// as relays in another process than the writers run on these dialects),
// at most 10 connections like every other relay.
func dialectRelayStarter(s *drainSpec) (func(context.Context) (Relay, error), error) {
	return func(ctx context.Context) (Relay, error) {
		db, err := dburl.Open(ctx, s.DatabaseURL, dburl.Options{})
		if err != nil {
			return nil, err
		}
		db.SQL().SetMaxOpenConns(10)
		st, err := db.RelayStore(ctx, store.RelayConfig{})
		if err != nil {
			db.Close()
			return nil, err
		}
		return startCourierRelay(&s.Env, st, relay.Config{}, db.Close)
	}, nil
}

// sqliteVersion describes the SQLite library the dialects section runs
// on, for the report.
func sqliteVersion(ctx context.Context) string {
	db, err := sql.Open("sqlite", ":memory:")
	if err != nil {
		return "unknown: " + err.Error()
	}
	defer db.Close()
	var v string
	if err := db.QueryRowContext(ctx, "SELECT sqlite_version()").Scan(&v); err != nil {
		return "unknown: " + err.Error()
	}
	return v + " (modernc.org/sqlite, pure Go, in the relay process; opened with sqlite.Open: WAL, synchronous=FULL, busy_timeout 10 s)"
}

// mysqlServerInfo describes the server of dsn and the settings that matter
// most for the dialects section, for the report.
func mysqlServerInfo(ctx context.Context, dsn string) string {
	if dsn == "" {
		return "not configured (-mysql is empty)"
	}
	cfg, err := gomysql.ParseDSN(dsn)
	if err != nil {
		return "bad DSN: " + err.Error()
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Second
	}
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		return "unreachable: " + err.Error()
	}
	defer db.Close()
	qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var version, flush, syncBinlog, logBin, pool string
	err = db.QueryRowContext(qctx, "SELECT VERSION(), @@innodb_flush_log_at_trx_commit, @@sync_binlog, @@log_bin, @@innodb_buffer_pool_size").
		Scan(&version, &flush, &syncBinlog, &logBin, &pool)
	if err != nil {
		return fmt.Sprintf("%s unreachable: %v", cfg.Addr, err)
	}
	return fmt.Sprintf("%s at %s (innodb_flush_log_at_trx_commit=%s, sync_binlog=%s, log_bin=%s, innodb_buffer_pool_size=%s)",
		version, cfg.Addr, flush, syncBinlog, logBin, pool)
}
