package cleanup_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/cleanup"
	"github.com/courier-go/courier/store/postgres"
)

// envLoadRows turns TestWritersDuringCleanup on: the number of old
// published rows to delete.
const envLoadRows = "COURIER_CLEANUP_LOAD_ROWS"

// envLoadPause sets the Cleaner's Pause in TestWritersDuringCleanup.
const envLoadPause = "COURIER_CLEANUP_LOAD_PAUSE"

// TestWritersDuringCleanup measures what a cleanup costs the application's
// writers on PostgreSQL. It is a measurement, not a check, and runs only
// when asked:
//
//	COURIER_TEST_POSTGRES_URL=postgres://… COURIER_CLEANUP_LOAD_ROWS=5000000 \
//	  go test -run TestWritersDuringCleanup -v -timeout 30m ./store/cleanup/
//
// It fills courier_outbox_published with that many rows published ten days
// ago, then runs 8 writers (one outbox message per transaction, the write
// path of outbox.Writer) for 15 s alone, then again while a Cleaner deletes
// every old row in batches of 1,000 (until it is done), then alone again,
// and logs each phase's transactions per second and latencies, and the
// cleanup's rows per second. COURIER_CLEANUP_LOAD_PAUSE (e.g. 10ms) sets the
// pause between batches. docs/operations.md records results.
func TestWritersDuringCleanup(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv(envLoadRows))
	if n <= 0 {
		t.Skipf("%s unset: this measurement runs only when asked", envLoadRows)
	}
	pg := testenv.Postgres(t, testenv.Migrate(postgres.NewDriver))
	ctx := context.Background()
	start := time.Now()
	for done := 0; done < n; done += 500_000 {
		_, err := pg.Pool.Exec(ctx, `INSERT INTO courier_outbox_published
    (id, message_id, topic, ordering_key, type, version, content_type, payload, headers, occurred_at, created_at, attempts, published_at)
SELECT g, gen_random_uuid(), 'orders', 'order-' || (g % 10000), 'OrderPlaced', 1, 'application/json',
       convert_to(repeat('{"order":' || g || ',"lines":[1,2,3]}', 6), 'UTF8'), '{"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}',
       now() - interval '10 days', now() - interval '10 days', 0, now() - interval '10 days' + g * interval '1 ms'
FROM generate_series($1::bigint, $2::bigint) AS g`, done+1, min(done+500_000, n))
		testenv.Must(t, err, "fill the published table")
	}
	_, err := pg.Pool.Exec(ctx, `VACUUM ANALYZE courier_outbox_published`)
	testenv.Must(t, err, "vacuum")
	var size string
	testenv.Must(t, pg.Pool.QueryRow(ctx, `SELECT pg_size_pretty(pg_total_relation_size('courier_outbox_published'))`).Scan(&size), "size")
	t.Logf("filled courier_outbox_published with %d rows (%s) in %s", n, size, time.Since(start).Round(time.Second))

	alone := writers(t, pg.Pool, 15*time.Second, nil)
	t.Logf("writers alone:          %s", alone)

	pause, _ := time.ParseDuration(os.Getenv(envLoadPause))
	c := &cleanup.Cleaner{Ops: postgres.Operations(pg.Pool), Keep: map[store.Table]time.Duration{store.TablePublished: 24 * time.Hour}, Pause: pause}
	var rep cleanup.Report
	var took time.Duration
	during := writers(t, pg.Pool, 0, func() {
		t0 := time.Now()
		rep, err = c.RunOnce(ctx)
		took = time.Since(t0)
	})
	testenv.Must(t, err, "cleanup")
	deleted := rep.Deleted[store.TablePublished]
	t.Logf("writers during cleanup: %s", during)
	t.Logf("cleanup (pause %s) deleted %d rows in %s: %.0f rows/s", pause, deleted, took.Round(time.Millisecond), float64(deleted)/took.Seconds())
	if deleted != int64(n) {
		t.Errorf("cleanup deleted %d rows, want %d", deleted, n)
	}
	after := writers(t, pg.Pool, 15*time.Second, nil)
	t.Logf("writers after cleanup:  %s", after)
}

// load is what writers measured.
type load struct {
	txs      int64
	took     time.Duration
	p50, p99 time.Duration
	max      time.Duration
}

func (l load) String() string {
	return fmt.Sprintf("%6.0f tx/s (%d tx in %s), latency p50 %s, p99 %s, max %s",
		float64(l.txs)/l.took.Seconds(), l.txs, l.took.Round(time.Millisecond), l.p50, l.p99, l.max)
}

// writers runs 8 writers, each committing one outbox message per
// transaction, for d, or while during runs when it is not nil.
func writers(t *testing.T, pool *pgxpool.Pool, d time.Duration, during func()) load {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ins := postgres.Pgx()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		lats  []time.Duration
		txs   atomic.Int64
		errs  atomic.Int64
		start = time.Now()
	)
	for w := range 8 {
		wg.Go(func() {
			var mine []time.Duration
			for i := 0; ctx.Err() == nil; i++ {
				msg := courier.NewMessage("orders", fmt.Sprintf("w%d-%d", w, i%100), "OrderPlaced", []byte(`{"order":42,"lines":[1,2,3]}`))
				t0 := time.Now()
				err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return ins.Insert(ctx, tx, []courier.Message{msg}) })
				if err != nil {
					if ctx.Err() == nil {
						errs.Add(1)
					}
					continue
				}
				mine = append(mine, time.Since(t0))
				txs.Add(1)
			}
			mu.Lock()
			lats = append(lats, mine...)
			mu.Unlock()
		})
	}
	if during != nil {
		during()
	} else {
		time.Sleep(d)
	}
	cancel()
	took := time.Since(start)
	wg.Wait()
	if errs.Load() > 0 {
		t.Errorf("%d writer transactions failed", errs.Load())
	}
	slices.Sort(lats)
	l := load{txs: txs.Load(), took: took}
	if len(lats) > 0 {
		l.p50, l.p99, l.max = lats[len(lats)/2], lats[len(lats)*99/100], lats[len(lats)-1]
	}
	_, err := pool.Exec(context.Background(), `TRUNCATE courier_outbox`) // the next phase starts from the same outbox
	testenv.Must(t, err, "truncate the outbox")
	return l
}
