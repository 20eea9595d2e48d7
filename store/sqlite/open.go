package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"strings"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver
	sqlite3 "modernc.org/sqlite/lib"
)

// DefaultBusyTimeout is how long Open's connections wait for another
// connection's write lock before failing with SQLITE_BUSY.
const DefaultBusyTimeout = 10 * time.Second

// Open opens the SQLite database file at path (created if missing) with the
// pure-Go driver modernc.org/sqlite, set up the way Courier needs it. Every
// connection of the returned pool runs with
//
//   - busy_timeout 10s ([DefaultBusyTimeout]): SQLite has a single writer,
//     and a connection that finds the write lock taken waits for it instead
//     of failing at once;
//   - journal_mode WAL: readers never block the writer nor the writer the
//     readers, so relays claiming and applications writing only queue for
//     the write lock itself (WAL is a property of the file: it stays on for
//     every later connection);
//   - _txlock=immediate: BeginTx starts read-write transactions with BEGIN
//     IMMEDIATE, taking the write lock up front. A deferred transaction that
//     reads first and writes later can fail with SQLITE_BUSY, without
//     waiting, when another connection wrote in between; read-only
//     transactions (sql.TxOptions.ReadOnly) still begin deferred.
//
// synchronous stays at SQLite's default, FULL: a commit is on disk when it
// returns, the promise an outbox makes. NORMAL (_pragma=synchronous(NORMAL)
// in a DSN of your own) saves an fsync per commit in WAL mode and can lose
// the latest commits, business change and message together, on power loss.
//
// With a DSN of your own (sql.Open("sqlite", dsn)), add
// _pragma=busy_timeout(10000)&_journal_mode=WAL&_txlock=immediate to it;
// [NewStore] refuses connections without a busy timeout. WAL needs a local
// file system: it does not work on network file systems.
func Open(path string) (*sql.DB, error) {
	if path == "" || strings.ContainsAny(path, "?#") {
		return nil, fmt.Errorf("sqlite: open %q: give a plain file path without '?' or '#'", path)
	}
	dsn := fmt.Sprintf("%s?_pragma=busy_timeout(%d)&_journal_mode=WAL&_txlock=immediate",
		path, DefaultBusyTimeout.Milliseconds())
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	// One connection now, so that a new file is switched to WAL before the
	// pool opens several at once: connections that meet a switch under way
	// get SQLITE_BUSY at once, without waiting for the busy timeout (SQLite
	// calls no busy handler there). Another process may be switching the
	// same new file: a busy answer is asked again, for up to the busy
	// timeout, as the busy handler would.
	deadline := time.Now().Add(DefaultBusyTimeout)
	for {
		err := db.Ping()
		if err == nil {
			return db, nil
		}
		if errorCode(err)&0xff != sqlite3.SQLITE_BUSY || time.Now().After(deadline) {
			db.Close()
			return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// immediate runs fn in a transaction begun with BEGIN IMMEDIATE on a
// connection of its own, and commits it when fn succeeds. BEGIN IMMEDIATE
// takes the database's write lock at once (waiting up to the busy timeout),
// so the transactions of all connections, in every process that opened the
// file, run one after another and each sees everything committed before it.
// database/sql's BeginTx cannot ask for that whatever the DSN says, hence
// the explicit statements on a pinned connection.
func immediate(ctx context.Context, db *sql.DB, fn func(conn *sql.Conn) error) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		rollback(ctx, conn) // the BEGIN may have taken effect as ctx ended
		return fmt.Errorf("begin: %w", err)
	}
	if err := fn(conn); err != nil {
		rollback(ctx, conn)
		return err
	}
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		rollback(ctx, conn)
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// rollback ends the transaction on conn, if one is open. When that fails
// the connection's state is unknown, and it is closed instead of going back
// to the pool with a transaction (and the write lock) still open.
func rollback(ctx context.Context, conn *sql.Conn) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_, err := conn.ExecContext(rctx, "ROLLBACK")
	// ROLLBACK fails with plain SQLITE_ERROR when no transaction is open
	// (nothing to end); any other failure leaves the connection in doubt.
	if err != nil && errorCode(err) != sqlite3.SQLITE_ERROR {
		_ = conn.Raw(func(any) error { return driver.ErrBadConn }) // closes the connection
	}
}
