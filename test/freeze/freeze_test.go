// Package freeze stops a relay's process (SIGSTOP) at chosen points inside
// its claim, on every store dialect, and checks that the other relays go on
// claiming and the application goes on writing while it stays frozen: a
// frozen relay may keep its own leased rows until its lease ends, never
// everyone's.
package freeze

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgxpool"
	sqlitedrv "modernc.org/sqlite"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/mysql"
	"github.com/courier-go/courier/store/postgres"
	"github.com/courier-go/courier/store/sqlite"
)

// Environment of the frozen claimer's process.
const (
	envDialect = "COURIER_FREEZE_DIALECT"
	envTarget  = "COURIER_FREEZE_TARGET"
	envStop    = "COURIER_FREEZE_STOP"
)

func TestMain(m *testing.M) {
	if d := os.Getenv(envDialect); d != "" {
		if err := runClaimer(d, os.Getenv(envTarget), os.Getenv(envStop)); err != nil {
			fmt.Fprintln(os.Stderr, "claimer:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(testenv.M(m).Run())
}

// runClaimer is the process that freezes: it claims once through a
// connection that stops the process at stop, then completes its batch.
func runClaimer(name, target, stop string) error {
	ctx := context.Background()
	i := slices.IndexFunc(dialects, func(d dialect) bool { return d.name == name })
	if i < 0 {
		return fmt.Errorf("unknown dialect %q", name)
	}
	db, closeDB, err := dialects[i].hooked(target, &stopOnce{pattern: stop})
	if err != nil {
		return err
	}
	defer closeDB()
	st, err := db.RelayStore(ctx, store.RelayConfig{})
	if err != nil {
		return err
	}
	b, err := st.Claim(ctx, "frozen", 1000, time.Minute)
	if err != nil {
		// A MySQL claim that outlived its turn records nothing: fine.
		fmt.Fprintln(os.Stderr, "claimer: claim after the pause:", err)
		return nil
	}
	seqs := make([]int64, len(b.Records))
	for i, r := range b.Records {
		seqs[i] = r.Seq
	}
	if len(seqs) > 0 {
		return st.Complete(ctx, "frozen", b.Lease, store.Outcome{Published: seqs})
	}
	return nil
}

// target is one test's database, seen from the test process.
type target struct {
	addr  string // for the claimer: URL, DSN or file
	store store.RelayStore
	write func(ctx context.Context, msgs ...courier.Message) error
}

// driverTarget is the target at addr that d's stores work on.
func driverTarget[TTx any](t *testing.T, addr string, d store.Driver[TTx]) target {
	st, err := d.RelayStore(context.Background(), store.RelayConfig{})
	testenv.Must(t, err, "store")
	w := outbox.New(d.Inserter(), outbox.Config{})
	return target{addr: addr, store: st, write: func(ctx context.Context, msgs ...courier.Message) error {
		return d.InTx(ctx, func(tx TTx) error { return w.Write(ctx, tx, msgs...) })
	}}
}

type dialect struct {
	name  string
	stops []string // statements the claimer freezes at (see runClaimer)
	open  func(t *testing.T) target
	// hooked opens, in the claimer's process, the database at a target's
	// addr through connections that call hook before each statement.
	hooked func(addr string, hook *stopOnce) (db store.Database, closeDB func(), err error)
}

var dialects = []dialect{
	{
		name: "postgres",
		stops: []string{
			"courier_claim",  // the claim's answer is read (the lease is recorded)
			"WHERE id = ANY", // the rows' contents are about to be read
		},
		open: func(t *testing.T) target {
			pg := testenv.Postgres(t, testenv.Migrate(postgres.NewDriver))
			return driverTarget(t, pg.URL, postgres.NewDriver(pg.Pool))
		},
		hooked: func(addr string, hook *stopOnce) (store.Database, func(), error) {
			cfg, err := pgxpool.ParseConfig(addr)
			if err != nil {
				return nil, nil, err
			}
			cfg.ConnConfig.Tracer = hook
			pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
			if err != nil {
				return nil, nil, err
			}
			return postgres.NewDriver(pool), pool.Close, nil
		},
	},
	{
		name: "mysql",
		stops: []string{
			"FROM courier_outbox FORCE INDEX",   // scanning, during the claim's turn
			"INSERT INTO courier_outbox_leases", // about to record the lease
			"INSERT INTO courier_outbox_held",   // moving a held key's rows, the turn's row locked
			"SELECT id, attempts",               // the rows' contents are about to be read
		},
		open: func(t *testing.T) target {
			my := testenv.MySQL(t, testenv.Migrate(mysql.NewDriver))
			return driverTarget(t, my.DSN, mysql.NewDriver(my.DB))
		},
		hooked: func(addr string, hook *stopOnce) (store.Database, func(), error) {
			cfg, err := gomysql.ParseDSN(addr)
			if err != nil {
				return nil, nil, err
			}
			conn, err := gomysql.NewConnector(cfg)
			if err != nil {
				return nil, nil, err
			}
			db := sql.OpenDB(hookConnector{base: conn, stop: hook})
			return mysql.NewDriver(db), func() { db.Close() }, nil
		},
	},
	{
		name: "sqlite",
		stops: []string{
			"WHERE retry_at IS NULL OR retry_at <= ?1", // scanning, without the write lock
			"SELECT id, attempts",                      // the rows' contents are about to be read
		},
		open: func(t *testing.T) target {
			path := filepath.Join(t.TempDir(), "outbox.db")
			db, err := sqlite.Open(path)
			testenv.Must(t, err, "open")
			t.Cleanup(func() { db.Close() })
			d := sqlite.NewDriver(db)
			_, err = d.Migrate(context.Background())
			testenv.Must(t, err, "migrate")
			return driverTarget(t, path, d)
		},
		hooked: func(addr string, hook *stopOnce) (store.Database, func(), error) {
			dsn := fmt.Sprintf("%s?_pragma=busy_timeout(%d)&_journal_mode=WAL&_txlock=immediate", addr, sqlite.DefaultBusyTimeout.Milliseconds())
			db := sql.OpenDB(hookConnector{base: dsnConnector{dsn: dsn, drv: &sqlitedrv.Driver{}}, stop: hook})
			return sqlite.NewDriver(db), func() { db.Close() }, nil
		},
	},
}

func TestOthersGoOnWhileARelayIsFrozenMidClaim(t *testing.T) {
	for _, d := range dialects {
		for _, stop := range d.stops {
			t.Run(d.name+"/"+strings.Fields(stop)[0]+"…"+lastWord(stop), func(t *testing.T) {
				frozenMidClaim(t, d, stop)
			})
		}
	}
}

func lastWord(s string) string {
	f := strings.Fields(s)
	return f[len(f)-1]
}

func frozenMidClaim(t *testing.T, d dialect, stop string) {
	ctx := context.Background()
	tg := d.open(t)
	payload := []byte(strings.Repeat("p", 4096))
	var early []courier.Message
	for i := range 300 {
		early = append(early, courier.NewMessage("events", fmt.Sprintf("early-%d", i%10), "T", payload))
	}
	testenv.Must(t, tg.write(ctx, early...), "write the claimer's rows")
	holdKey(t, tg)

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envDialect+"="+d.name, envTarget+"="+tg.addr, envStop+"="+stop)
	cmd.Stderr = os.Stderr
	testenv.Must(t, cmd.Start(), "start the claimer")
	exited := make(chan error, 1)
	waited := make(chan struct{})
	go func() {
		defer close(waited)
		exited <- cmd.Wait()
	}()
	defer func() {
		_ = cmd.Process.Kill() // a no-op once it has exited
		<-waited
	}()
	deadline := time.Now().Add(30 * time.Second)
	for !stopped(cmd.Process.Pid) {
		select {
		case err := <-exited:
			t.Fatalf("the claimer ended (%v) without meeting %q", err, stop)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the claimer did not reach %q in 30 s", stop)
		}
		time.Sleep(time.Millisecond)
	}

	// Frozen: the application writes and the other relays claim.
	start := time.Now()
	var late []courier.Message
	for range 5 {
		late = append(late, courier.NewMessage("events", "late", "T", []byte("late")))
	}
	wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	testenv.Must(t, tg.write(wctx, late...), "write while a relay is frozen mid-claim")
	wrote := time.Since(start)
	got := map[string]bool{}
	for len(got) < len(late) {
		if time.Since(start) > 15*time.Second {
			t.Fatalf("while a relay was frozen at %q the others claimed %d of the 5 new rows in 15 s", stop, len(got))
		}
		b, err := tg.store.Claim(wctx, "alive", 1000, time.Minute)
		if err != nil {
			t.Logf("claim: %v (retrying)", err)
			time.Sleep(50 * time.Millisecond)
			continue
		}
		seqs := make([]int64, 0, len(b.Records))
		for _, r := range b.Records {
			seqs = append(seqs, r.Seq)
			if r.Message.Key == "late" {
				got[r.Message.ID.String()] = true
			}
		}
		if len(seqs) > 0 {
			testenv.Must(t, tg.store.Complete(ctx, "alive", b.Lease, store.Outcome{Published: seqs}), "complete")
		} else {
			time.Sleep(10 * time.Millisecond)
		}
	}
	if !stopped(cmd.Process.Pid) {
		t.Fatal("the claimer was resumed before the others were done: the test proved nothing")
	}
	t.Logf("frozen at %q: a write took %s, the new rows were claimed %s after the freeze", stop, wrote.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))

	testenv.Must(t, cmd.Process.Signal(syscall.SIGCONT), "resume the claimer")
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("the claimer failed after it was resumed: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the claimer did not finish in 30 s after it was resumed")
	}
}

// holdKey makes the oldest row a dead letter that holds its key, so that
// the claimer also moves that key's later rows behind it (see store, Held
// keys).
func holdKey(t *testing.T, tg target) {
	ctx := context.Background()
	b, err := tg.store.Claim(ctx, "setup", 1, time.Minute)
	testenv.Must(t, err, "claim the oldest row")
	if len(b.Records) != 1 {
		t.Fatalf("claimed %d rows, want 1", len(b.Records))
	}
	dead := store.Failure{Seq: b.Records[0].Seq, Error: "rejected", Counted: true, Hold: true}
	testenv.Must(t, tg.store.Complete(ctx, "setup", b.Lease, store.Outcome{Dead: []store.Failure{dead}}), "make it a dead letter that holds its key")
}

// stopped reports whether the process is stopped by a signal.
func stopped(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && i+2 < len(s) && s[i+2] == 'T'
}
