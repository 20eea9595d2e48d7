package mysql_test

import (
	"bytes"
	"context"
	"database/sql"
	"slices"
	"strings"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/google/uuid"

	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/mysql"
)

// At READ COMMITTED a group whose message a concurrent delivery marked and
// committed while the group waited for it cannot tell its markers from
// that one's: it fails rather than report a duplicate fresh, and its next
// try reports the duplicate.
func TestMarkGroupAtReadCommitted(t *testing.T) {
	my := testenv.MySQL(t, testenv.Migrate(mysql.NewDriver))
	rc := readCommitted(t, my.DSN)
	gi := mysql.NewDriver(rc).Inbox().(store.GroupInbox[*sql.Tx])
	ctx := context.Background()
	ids := []uuid.UUID{uuid.New(), uuid.New(), uuid.New()}
	slices.SortFunc(ids, func(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) })
	held := ids[1]

	marked, finish, first := make(chan error, 1), make(chan struct{}), make(chan error, 1)
	go func() {
		first <- gi.InTx(ctx, func(tx *sql.Tx) error {
			_, err := gi.Mark(ctx, tx, "c", held)
			marked <- err
			<-finish
			return err
		})
	}()
	t.Cleanup(func() {
		select {
		case <-finish:
		default:
			close(finish)
		}
	})
	testenv.Must(t, <-marked, "mark the held message")
	group := make(chan error, 1)
	var fresh []bool
	go func() {
		group <- gi.InTx(ctx, func(tx *sql.Tx) (err error) {
			fresh, err = gi.MarkGroup(ctx, tx, "c", ids)
			return err
		})
	}()
	waitForGroupInsert(t, my.Admin, group)
	close(finish)
	testenv.Must(t, <-first, "first delivery")
	if err := <-group; err == nil || !strings.Contains(err.Error(), "REPEATABLE READ") {
		t.Fatalf("at READ COMMITTED, a group whose message a concurrent delivery marked returned %v, %v; want the error that names REPEATABLE READ", fresh, err)
	}
	var again []bool
	testenv.Must(t, gi.InTx(ctx, func(tx *sql.Tx) (err error) {
		again, err = gi.MarkGroup(ctx, tx, "c", ids)
		return err
	}), "the group's next try")
	if want := []bool{true, false, true}; !slices.Equal(again, want) {
		t.Fatalf("the group's next try = %v, want %v", again, want)
	}
}

// readCommitted returns a pool on dsn whose transactions run at READ
// COMMITTED (MySQL's transaction_isolation, MariaDB's tx_isolation).
func readCommitted(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	for _, name := range []string{"transaction_isolation", "tx_isolation"} {
		cfg, err := gomysql.ParseDSN(dsn)
		testenv.Must(t, err, "parse DSN")
		cfg.Params = map[string]string{name: "'READ-COMMITTED'"}
		db, err := sql.Open("mysql", cfg.FormatDSN())
		testenv.Must(t, err, "open")
		if err := db.Ping(); err == nil {
			t.Cleanup(func() { db.Close() })
			return db
		}
		db.Close()
	}
	t.Fatal("the server takes neither transaction_isolation nor tx_isolation")
	return nil
}

// waitForGroupInsert returns once a session runs the INSERT of a group's
// markers (so the group read the existing markers before), each query the
// server answers being the poll's interval. (INNODB_TRX would say which
// transaction waits for a lock, but MariaDB refreshes it only when it was
// not read for 0.1 s.)
func waitForGroupInsert(t *testing.T, db *sql.DB, group <-chan error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		var n int
		err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE 'INSERT IGNORE INTO courier_inbox %'`).Scan(&n)
		if err != nil {
			t.Fatalf("read the sessions' statements: %v", err)
		}
		if n > 0 {
			return
		}
		select {
		case err := <-group:
			t.Fatalf("the group returned (%v) before its INSERT was seen", err)
		default:
		}
	}
}
