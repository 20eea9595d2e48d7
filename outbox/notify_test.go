package outbox_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/store/sqlite"
)

// Notify fires once per Write that inserted messages, after the insert and
// before the commit; never for invalid messages, failed inserts or empty
// writes.
func TestNotifyAfterInsert(t *testing.T) {
	ctx := context.Background()
	db, err := sqlite.Open(filepath.Join(t.TempDir(), "outbox.db"))
	testenv.Must(t, err, "open")
	defer db.Close()
	_, err = sqlite.Migrate(ctx, db)
	testenv.Must(t, err, "migrate")
	count := func() (n int) {
		testenv.Must(t, db.QueryRow("SELECT count(*) FROM courier_outbox").Scan(&n), "count")
		return n
	}
	tx, err := db.BeginTx(ctx, nil)
	testenv.Must(t, err, "begin")
	defer tx.Rollback()
	notified, rowsSeen := 0, 0
	w := outbox.New(sqlite.DatabaseSQL(), outbox.Config{Notify: func() {
		notified++
		testenv.Must(t, tx.QueryRow("SELECT count(*) FROM courier_outbox").Scan(&rowsSeen), "count in tx")
	}})

	testenv.Must(t, w.Write(ctx, tx), "empty write")
	if err := w.Write(ctx, tx, courier.NewMessage("t", "", "T", nil)); !errors.Is(err, courier.ErrInvalidMessage) {
		t.Fatalf("Write of an invalid message = %v", err)
	}
	if notified != 0 {
		t.Fatalf("Notify called %d times for writes that inserted nothing", notified)
	}
	testenv.Must(t, w.Write(ctx, tx, courier.NewMessage("t", "k", "T", nil), courier.NewMessage("t", "k", "T", nil)), "write")
	if notified != 1 || rowsSeen != 2 {
		t.Fatalf("Notify called %d times seeing %d rows, want once, after the insert of both", notified, rowsSeen)
	}
	if n := count(); n != 0 {
		t.Fatalf("%d rows visible outside the transaction before its commit", n)
	}
	testenv.Must(t, tx.Commit(), "commit")

	if err := w.Write(ctx, tx, courier.NewMessage("t", "k", "T", nil)); err == nil {
		t.Fatal("Write on a committed transaction succeeded")
	}
	if notified != 1 {
		t.Fatalf("Notify called after a failed insert")
	}
}
