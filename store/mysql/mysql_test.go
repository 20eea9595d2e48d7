package mysql_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/mysql"
)

// Courier reads and writes its times as UTC text, so the DSN's parseTime,
// loc and the session's time_zone change nothing: occurred_at comes back as
// written, and the stats clock is UTC now.
func TestTimesIgnoreDSNAndSessionZone(t *testing.T) {
	my := testenv.MySQL(t, testenv.Migrate(mysql.NewDriver))
	ctx := context.Background()
	occurred := time.Date(2024, 3, 31, 1, 30, 0, 123456000, time.UTC) // inside a DST change in Europe
	for _, params := range []map[string]string{
		{"parseTime": "false"},
		{"parseTime": "true"},
		{"parseTime": "true", "loc": "Asia/Tokyo", "time_zone": "'-07:00'"},
		{"parseTime": "false", "time_zone": "'Europe/Berlin'"},
		{"interpolateParams": "true", "parseTime": "true", "loc": "Local"},
	} {
		cfg, err := gomysql.ParseDSN(my.DSN)
		testenv.Must(t, err, "parse dsn")
		cfg.Params = map[string]string{}
		for k, v := range params {
			switch k {
			case "parseTime":
				cfg.ParseTime = v == "true"
			case "interpolateParams":
				cfg.InterpolateParams = v == "true"
			case "loc":
				cfg.Loc, err = time.LoadLocation(v)
				testenv.Must(t, err, "location")
			default:
				cfg.Params[k] = v
			}
		}
		db, err := sql.Open("mysql", cfg.FormatDSN())
		testenv.Must(t, err, "open")
		st, err := mysql.NewDriver(db).RelayStore(ctx, store.RelayConfig{})
		if err != nil {
			db.Close()
			if strings.Contains(err.Error(), "Unknown or incorrect time zone") {
				t.Logf("%v: the server has no time zone tables; skipped", params)
				continue
			}
			t.Fatalf("%v: new store: %v", params, err)
		}
		msg := courier.NewMessage("t", "k", "T", nil, courier.WithOccurredAt(occurred))
		tx, err := db.BeginTx(ctx, nil)
		testenv.Must(t, err, "begin")
		testenv.Must(t, outbox.New(mysql.DatabaseSQL(), outbox.Config{}).Write(ctx, tx, msg), "write")
		testenv.Must(t, tx.Commit(), "commit")
		s, err := st.Stats(ctx)
		testenv.Must(t, err, "stats")
		if d := time.Since(s.Now); d < -5*time.Second || d > 5*time.Second || s.Now.Location() != time.UTC {
			t.Errorf("%v: stats clock %s, %s away from now", params, s.Now, d)
		}
		if age := s.OldestPendingAge(); age < 0 || age > 5*time.Second {
			t.Errorf("%v: oldest pending %s, age %s", params, s.OldestPending, age)
		}
		b, err := st.Claim(ctx, "r", 10, time.Minute)
		testenv.Must(t, err, "claim")
		if len(b.Records) != 1 || !b.Records[0].Message.OccurredAt.Equal(occurred) || b.Records[0].Message.OccurredAt.Location() != time.UTC {
			t.Errorf("%v: claimed %+v, want occurred at %s", params, b.Records, occurred)
		}
		testenv.Must(t, st.Complete(ctx, "r", b.Lease, store.Outcome{Published: []int64{b.Records[0].Seq}}), "complete")
		db.Close()
	}
}

// Without a database in the DSN, Migrate says where to put one.
func TestMigrateNeedsDatabase(t *testing.T) {
	my := testenv.MySQL(t, nil)
	cfg, err := gomysql.ParseDSN(my.DSN)
	testenv.Must(t, err, "parse dsn")
	cfg.DBName = ""
	db, err := sql.Open("mysql", cfg.FormatDSN())
	testenv.Must(t, err, "open")
	defer db.Close()
	if _, err := mysql.NewDriver(db).Migrate(context.Background()); err == nil || !strings.Contains(err.Error(), "name it in the DSN") {
		t.Fatalf("Migrate without a database = %v, want an error asking for one in the DSN", err)
	}
}

// A lost claim turn row (someone emptied the table) is named, with the fix.
func TestClaimLockRowMissing(t *testing.T) {
	my := testenv.MySQL(t, testenv.Migrate(mysql.NewDriver))
	ctx := context.Background()
	st, err := mysql.NewDriver(my.DB).RelayStore(ctx, store.RelayConfig{})
	testenv.Must(t, err, "store")
	_, err = my.DB.ExecContext(ctx, "DELETE FROM courier_outbox_claimer")
	testenv.Must(t, err, "delete turn row")
	tx, err := my.DB.BeginTx(ctx, nil)
	testenv.Must(t, err, "begin")
	testenv.Must(t, outbox.New(mysql.DatabaseSQL(), outbox.Config{}).Write(ctx, tx, courier.NewMessage("events", "k", "T", []byte("x"))), "write")
	testenv.Must(t, tx.Commit(), "commit")
	if _, err := st.Claim(ctx, "r", 10, time.Minute); err == nil || !strings.Contains(err.Error(), "run Migrate") {
		t.Fatalf("Claim without the turn row = %v, want an error saying to run Migrate", err)
	}
	_, err = my.DB.ExecContext(ctx, "DELETE FROM courier_schema_migrations")
	testenv.Must(t, err, "forget migrations")
	_, err = mysql.NewDriver(my.DB).Migrate(ctx)
	testenv.Must(t, err, "migrate again over the existing tables")
	_, err = st.Claim(ctx, "r", 10, time.Minute)
	testenv.Must(t, err, "claim after the repair")
}

// A migration that adds indexes runs again after it failed halfway: the
// indexes it added already are skipped (MySQL commits DDL at once).
func TestMigrateRerunsIndexMigration(t *testing.T) {
	my := testenv.MySQL(t, testenv.Migrate(mysql.NewDriver))
	ctx := context.Background()
	// As if 0007 stopped after its first statements: the first index is
	// there, the others not, and neither its version nor a later one is
	// recorded.
	for _, q := range []string{
		`ALTER TABLE courier_sagas DROP KEY courier_sagas_finished`,
		`ALTER TABLE courier_idempotency_keys DROP KEY courier_idempotency_keys_in_flight`,
		`DELETE FROM courier_schema_migrations WHERE version >= 7`,
	} {
		if _, err := my.DB.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	applied, err := mysql.NewDriver(my.DB).Migrate(ctx)
	if err != nil || len(applied) == 0 || applied[0] != 7 {
		t.Fatalf("migrate again: %v, %v; want 0007 applied, and those after it", applied, err)
	}
	var n int
	if err := my.DB.QueryRowContext(ctx, `SELECT COUNT(DISTINCT INDEX_NAME) FROM information_schema.STATISTICS
WHERE TABLE_SCHEMA = DATABASE() AND INDEX_NAME IN ('courier_sagas_finished', 'courier_idempotency_keys_in_flight', 'courier_sagas_phase')`).Scan(&n); err != nil || n != 3 {
		t.Fatalf("indexes after the rerun: %d, %v; want 3", n, err)
	}
}
