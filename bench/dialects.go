package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/relay"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/mysql"
	"github.com/courier-go/courier/store/sqlite"
)

// dialects are the store dialects whose Courier relay drain the dialects
// section measures, in the order of their table. They key the cells of
// dialectFigures.
var dialects = []string{"postgres", "sqlite", "mysql"}

// dialectKeys is the number of keys the dialects section's messages are
// spread over.
const dialectKeys = 10000

// defaultMySQLDSN is the -mysql default when BENCH_MYSQL_URL is not set.
const defaultMySQLDSN = "root@tcp(127.0.0.1:3306)/test"

// dialectName is a dialect's name as printed in tables.
func dialectName(d string) string {
	switch d {
	case "postgres":
		return "PostgreSQL"
	case "sqlite":
		return "SQLite"
	case "mysql":
		return "MySQL/MariaDB"
	}
	return d
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
	var err error
	switch dialect {
	case "postgres":
		err = b.runDialectPostgres(ctx)
	case "sqlite":
		err = b.runDialectSQLite(ctx)
	case "mysql":
		err = b.runDialectMySQL(ctx)
	default:
		err = fmt.Errorf("unknown dialect %q", dialect)
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
	rd, err := b.drainInChild(ctx, drainSpec{Env: *env, N: n}, func(ctx context.Context) (cpuSnapshot, error) {
		return backendsCPU(ctx, b.admin, env.AppName)
	})
	if err != nil {
		return err
	}
	var left int64
	err = env.Pool.QueryRow(ctx, "SELECT count(*) FROM courier_outbox").Scan(&left)
	b.recordDialect(ctx, "postgres", env, rd, left, err)
	return nil
}

// runDialectSQLite drains a SQLite file in a temporary directory, opened
// with sqlite.Open in both processes.
func (b *Bench) runDialectSQLite(ctx context.Context) error {
	db, path, cleanup, err := newSQLiteFile(ctx)
	if err != nil {
		return err
	}
	defer cleanup()
	n := b.cfg.drainN
	if err := fillSQL(ctx, db, sqlite.DatabaseSQL(), n, dialectKeys); err != nil {
		return fmt.Errorf("sqlite fill: %w", err)
	}
	env, err := newStreamEnv(ctx, b.cfg.natsURL, "courier_sqlite")
	if err != nil {
		return err
	}
	defer env.Close()
	// SQLite runs inside the relay process: there is no server to read.
	rd, err := b.drainInChild(ctx, drainSpec{Env: *env, N: n, Dialect: "sqlite", DSN: path}, nil)
	if err != nil {
		return err
	}
	var left int64
	err = db.QueryRowContext(ctx, "SELECT count(*) FROM courier_outbox").Scan(&left)
	b.recordDialect(ctx, "sqlite", env, rd, left, err)
	return nil
}

// newSQLiteFile creates a migrated SQLite file in a temporary directory,
// opened with sqlite.Open; cleanup closes it and removes the directory.
func newSQLiteFile(ctx context.Context) (db *sql.DB, path string, cleanup func(), err error) {
	dir, err := os.MkdirTemp("", "bench-sqlite-")
	if err != nil {
		return nil, "", nil, err
	}
	path = filepath.Join(dir, "outbox.db")
	if db, err = sqlite.Open(path); err != nil {
		_ = os.RemoveAll(dir)
		return nil, "", nil, err
	}
	cleanup = func() {
		_ = db.Close()
		_ = os.RemoveAll(dir)
	}
	if _, err := sqlite.Migrate(ctx, db); err != nil {
		cleanup()
		return nil, "", nil, err
	}
	return db, path, cleanup, nil
}

// runDialectMySQL drains a fresh database created on the -mysql server and
// dropped afterwards. An unreachable server is errNotMeasured.
func (b *Bench) runDialectMySQL(ctx context.Context) error {
	db, dsn, pid, cleanup, err := b.newMySQLDatabase(ctx)
	if err != nil {
		return err
	}
	defer cleanup()
	n := b.cfg.drainN
	if err := fillSQL(ctx, db, mysql.DatabaseSQL(), n, dialectKeys); err != nil {
		return fmt.Errorf("mysql fill: %w", err)
	}
	env, err := newStreamEnv(ctx, b.cfg.natsURL, "courier_mysql")
	if err != nil {
		return err
	}
	defer env.Close()
	var serverCPU func(context.Context) (cpuSnapshot, error)
	if pid != 0 {
		serverCPU = func(context.Context) (cpuSnapshot, error) {
			d, err := procCPU(pid)
			return cpuSnapshot{pid: d}, err
		}
	}
	rd, err := b.drainInChild(ctx, drainSpec{Env: *env, N: n, Dialect: "mysql", DSN: dsn}, serverCPU)
	if err != nil {
		return err
	}
	var left int64
	err = db.QueryRowContext(ctx, "SELECT count(*) FROM courier_outbox").Scan(&left)
	b.recordDialect(ctx, "mysql", env, rd, left, err)
	return nil
}

// newMySQLDatabase creates and migrates a fresh database on the -mysql
// server and returns it, its DSN and the server's pid (0 when it does not
// run on this machine); cleanup closes it and drops the database. An
// unreachable server is errNotMeasured.
func (b *Bench) newMySQLDatabase(ctx context.Context) (db *sql.DB, dsn string, pid int, cleanup func(), err error) {
	if b.cfg.mysqlDSN == "" {
		return nil, "", 0, nil, errNotMeasured{"no MySQL DSN (-mysql is empty)"}
	}
	cfg, err := gomysql.ParseDSN(b.cfg.mysqlDSN)
	if err != nil {
		return nil, "", 0, nil, errNotMeasured{fmt.Sprintf("-mysql is not a go-sql-driver DSN: %v", err)}
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Second // dial timeout: a silent host fails fast
	}
	admin, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		return nil, "", 0, nil, errNotMeasured{err.Error()}
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err = admin.PingContext(pctx)
	cancel()
	if err != nil {
		_ = admin.Close()
		return nil, "", 0, nil, errNotMeasured{fmt.Sprintf("MySQL/MariaDB at %s unreachable: %v", cfg.Addr, err)}
	}
	name := "bench_courier_" + randomToken(4)
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		_ = admin.Close()
		return nil, "", 0, nil, fmt.Errorf("create database: %w", err)
	}
	drop := func() {
		dctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if _, err := admin.ExecContext(dctx, "DROP DATABASE IF EXISTS "+name); err != nil {
			logf("warning: drop database %s: %v", name, err)
		}
		_ = admin.Close()
	}
	cfg.DBName = name
	dsn = cfg.FormatDSN()
	if db, err = sql.Open("mysql", dsn); err != nil {
		drop()
		return nil, "", 0, nil, err
	}
	cleanup = func() {
		_ = db.Close()
		drop()
	}
	if _, err := mysql.Migrate(ctx, db); err != nil {
		cleanup()
		return nil, "", 0, nil, err
	}
	return db, dsn, localMySQLServer(cfg), cleanup, nil
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
// writer on inserter ins, in transactions of 1000, as courierSystem.Fill
// does on PostgreSQL.
func fillSQL(ctx context.Context, db *sql.DB, ins store.Inserter[*sql.Tx], n, keys int) error {
	w := outbox.New(ins, outbox.Config{})
	for done := 0; done < n; {
		k := min(1000, n-done)
		msgs := make([]courier.Message, k)
		for i := range msgs {
			msgs[i] = courierMessage(keyFor(done+i, keys), payloadFor(done+i))
		}
		if err := writeSQL(ctx, db, w, msgs...); err != nil {
			return err
		}
		done += k
	}
	return nil
}

// writeSQL commits msgs in one transaction on db with w.
func writeSQL(ctx context.Context, db *sql.DB, w *outbox.Writer[*sql.Tx], msgs ...courier.Message) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := w.Write(ctx, tx, msgs...); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// dialectRelayStarter returns what starts a drain child's Courier relay on
// a SQLite or MySQL store: default relay settings, no notifier (polling,
// as relays in another process than the writers run on these dialects),
// at most 10 connections like every other relay.
func dialectRelayStarter(s *drainSpec) (func(context.Context) (Relay, error), error) {
	var openDB func() (*sql.DB, error)
	var newStore func(context.Context, *sql.DB) (store.RelayStore, error)
	switch s.Dialect {
	case "sqlite":
		openDB = func() (*sql.DB, error) { return sqlite.Open(s.DSN) }
		newStore = func(ctx context.Context, db *sql.DB) (store.RelayStore, error) {
			return sqlite.NewStore(ctx, db, sqlite.StoreConfig{})
		}
	case "mysql":
		openDB = func() (*sql.DB, error) { return sql.Open("mysql", s.DSN) }
		newStore = func(ctx context.Context, db *sql.DB) (store.RelayStore, error) {
			return mysql.NewStore(ctx, db, mysql.StoreConfig{})
		}
	default:
		return nil, fmt.Errorf("unknown dialect %q", s.Dialect)
	}
	return func(ctx context.Context) (Relay, error) {
		db, err := openDB()
		if err != nil {
			return nil, err
		}
		db.SetMaxOpenConns(10)
		st, err := newStore(ctx, db)
		if err != nil {
			_ = db.Close()
			return nil, err
		}
		return startCourierRelay(&s.Env, st, relay.Config{}, func() { _ = db.Close() })
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
