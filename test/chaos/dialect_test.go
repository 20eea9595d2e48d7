package chaos

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"net/url"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/dburl"
	"github.com/courier-go/courier/store/mysql"
	"github.com/courier-go/courier/store/postgres"
	"github.com/courier-go/courier/store/sqlite"
)

// A dialect is one SQL database the chaos run drives: how the test creates
// the producer's and the consumer's databases, writes messages and cuts the
// child processes' sessions; the child processes open the same databases by
// name (see openRelayStore and runConsumer).
type dialect struct {
	name string
	// setup creates the run's two databases, dropped when t ends.
	setup func(t *testing.T) *databases
}

var dialects = []dialect{
	{"postgres", setupPostgres},
	{"mysql", setupMySQL},
	{"sqlite", setupSQLite},
}

// databases are one run's producer and consumer databases as the test sees
// them.
type databases struct {
	// relayURL and consumerURL return the database URL (envDB) of relay
	// or consumer i.
	relayURL, consumerURL func(i int) string
	// producer and consumer are pools for the checker's plain queries.
	producer, consumer *sql.DB
	// producerDB is the producer's database as its Driver sees it.
	producerDB store.Database
	// producerAdmin and consumerAdmin are the operators' views.
	producerAdmin, consumerAdmin store.Admin
	// write commits msgs in one transaction of the producer's database.
	write func(ctx context.Context, msgs []courier.Message) error
	// terminate cuts the database sessions of every relay and consumer and
	// returns how many it cut; nil when the database has no server (then the
	// processes themselves are killed).
	terminate func(ctx context.Context) (int, error)
	// terminated names what terminate does, for the fault counts.
	terminated string
	// relayArgs are added to the arguments of the runs' `courier relay`
	// processes (TestHeldKeys), and ready, when set, tells when they are
	// ready for the messages.
	relayArgs []string
	ready     func() bool
}

func setupPostgres(t *testing.T) *databases {
	producer := testenv.Postgres(t, testenv.Migrate(postgres.NewDriver))
	consumer := testenv.Postgres(t, testenv.Migrate(postgres.NewDriver))
	ctx := context.Background()
	_, err := consumer.Pool.Exec(ctx, `CREATE TABLE effects (n bigint GENERATED ALWAYS AS IDENTITY, message_id text NOT NULL, k text NOT NULL, seq int NOT NULL)`)
	testenv.Must(t, err, "effects table")
	pd := postgres.NewDriver(producer.Pool)
	view := func(pool *pgxpool.Pool) *sql.DB {
		db := stdlib.OpenDBFromPool(pool)
		t.Cleanup(func() { db.Close() })
		return db
	}
	return &databases{
		relayURL: func(i int) string {
			return producer.URL + "&application_name=" + fmt.Sprintf("chaos_relay_%s_%d", producer.Schema, i)
		},
		consumerURL: func(i int) string {
			return consumer.URL + "&application_name=" + fmt.Sprintf("chaos_consumer_%s_%d", consumer.Schema, i)
		},
		producer: view(producer.Pool), consumer: view(consumer.Pool), producerDB: pd,
		producerAdmin: pd.Admin(), consumerAdmin: postgres.NewDriver(consumer.Pool).Admin(),
		write: writer(pd),
		terminate: func(ctx context.Context) (int, error) {
			var n int
			err := producer.Admin.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
WHERE application_name LIKE 'chaos_%' AND (application_name LIKE '%'||$1||'%' OR application_name LIKE '%'||$2||'%')`,
				producer.Schema, consumer.Schema).Scan(&n)
			return n, err
		},
		terminated: "PostgreSQL backends terminated",
	}
}

// setupMySQL gives the child processes a user of their own, so that KILL
// CONNECTION can pick their sessions out of the server's process list and
// leave the producer's alone (a producer whose commit is cut cannot tell
// whether it happened).
func setupMySQL(t *testing.T) *databases {
	producer := testenv.MySQL(t, testenv.Migrate(mysql.NewDriver))
	consumer := testenv.MySQL(t, testenv.Migrate(mysql.NewDriver))
	ctx := context.Background()
	_, err := consumer.DB.ExecContext(ctx, `CREATE TABLE effects (n BIGINT AUTO_INCREMENT PRIMARY KEY, message_id VARCHAR(36) NOT NULL, k VARCHAR(255) NOT NULL, seq INT NOT NULL)`)
	testenv.Must(t, err, "effects table")
	user := testenv.Name("chaos_")
	_, err = producer.Admin.ExecContext(ctx, "CREATE USER '"+user+"'@'%'")
	testenv.Must(t, err, "create the child processes' user")
	t.Cleanup(func() {
		if _, err := producer.Admin.ExecContext(context.Background(), "DROP USER '"+user+"'@'%'"); err != nil {
			t.Logf("drop user %s: %v", user, err)
		}
	})
	for _, db := range []string{producer.Name, consumer.Name} {
		_, err = producer.Admin.ExecContext(ctx, "GRANT ALL PRIVILEGES ON "+db+".* TO '"+user+"'@'%'")
		testenv.Must(t, err, "grant")
	}
	asUser := func(raw string) string {
		u, err := url.Parse(raw)
		testenv.Must(t, err, "parse url")
		u.User = url.User(user)
		return u.String()
	}
	relayURL, consumerURL := asUser(producer.URL), asUser(consumer.URL)
	pd := mysql.NewDriver(producer.DB)
	return &databases{
		relayURL:    func(int) string { return relayURL },
		consumerURL: func(int) string { return consumerURL },
		producer:    producer.DB, consumer: consumer.DB, producerDB: pd,
		producerAdmin: pd.Admin(), consumerAdmin: mysql.NewDriver(consumer.DB).Admin(),
		write: writer(pd),
		terminate: func(ctx context.Context) (int, error) {
			rows, err := producer.Admin.QueryContext(ctx, `SELECT id FROM information_schema.processlist WHERE user = ?`, user)
			if err != nil {
				return 0, err
			}
			var ids []int64
			for rows.Next() {
				var id int64
				if err := rows.Scan(&id); err != nil {
					rows.Close()
					return 0, err
				}
				ids = append(ids, id)
			}
			rows.Close()
			n := 0
			for _, id := range ids {
				// A session may end by itself meanwhile: not an error.
				if _, err := producer.Admin.ExecContext(ctx, "KILL CONNECTION "+strconv.FormatInt(id, 10)); err == nil {
					n++
				}
			}
			return n, rows.Err()
		},
		terminated: "MariaDB connections killed",
	}
}

// setupSQLite puts each database in a file of its own that the test and
// the child processes all open.
func setupSQLite(t *testing.T) *databases {
	dir := t.TempDir()
	ctx := context.Background()
	open := func(name string) (string, *sql.DB, sqlite.Driver) {
		path := filepath.Join(dir, name)
		db, err := sqlite.Open(path)
		testenv.Must(t, err, "open "+name)
		t.Cleanup(func() { db.Close() })
		d := sqlite.NewDriver(db)
		_, err = d.Migrate(ctx)
		testenv.Must(t, err, "migrate "+name)
		return "sqlite://" + path, db, d
	}
	producerURL, producer, pd := open("producer.db")
	consumerURL, consumer, cd := open("consumer.db")
	_, err := consumer.ExecContext(ctx, `CREATE TABLE effects (n INTEGER PRIMARY KEY AUTOINCREMENT, message_id TEXT NOT NULL, k TEXT NOT NULL, seq INTEGER NOT NULL)`)
	testenv.Must(t, err, "effects table")
	return &databases{
		relayURL:    func(int) string { return producerURL },
		consumerURL: func(int) string { return consumerURL },
		producer:    producer, consumer: consumer, producerDB: pd,
		producerAdmin: pd.Admin(), consumerAdmin: cd.Admin(),
		write: writer(pd),
	}
}

// writer returns the databases' write on d: one transaction per batch.
func writer[TTx any](d store.Driver[TTx]) func(ctx context.Context, msgs []courier.Message) error {
	w := outbox.New(d.Inserter(), outbox.Config{})
	return func(ctx context.Context, msgs []courier.Message) error {
		return d.InTx(ctx, func(tx TTx) error { return w.Write(ctx, tx, msgs...) })
	}
}

// openDatabase opens, in a relay or consumer process, the database its
// URL names (every dialect through database/sql, as the courier command
// does), with at most 10 connections: every process of the run shares the
// server's connection limit.
func openDatabase(ctx context.Context, raw string) (*dburl.DB, error) {
	db, err := dburl.Open(ctx, raw, dburl.Options{})
	if err != nil {
		return nil, err
	}
	db.SQL().SetMaxOpenConns(10)
	db.SQL().SetConnMaxIdleTime(time.Minute)
	return db, nil
}

// openRelayStore opens, in a relay process, the relay's store on the
// database its URL names, and its wake-up notifier where the dialect has
// one.
func openRelayStore(ctx context.Context, raw string, log *slog.Logger) (store.RelayStore, store.Notifier, func(), error) {
	db, err := openDatabase(ctx, raw)
	if err != nil {
		return nil, nil, nil, err
	}
	st, err := db.RelayStore(ctx, store.RelayConfig{})
	if err != nil {
		db.Close()
		return nil, nil, nil, err
	}
	n, err := db.Notifier(log)
	if err != nil {
		db.Close()
		return nil, nil, nil, err
	}
	return st, n, db.Close, nil
}
