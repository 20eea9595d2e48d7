package tenants

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/internal/waits"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/store/dburl"
	"github.com/courier-go/courier/tenant"
)

// server starts a PostgreSQL server of the test's own, with room for
// every tenant's writer and the relays' connections; it skips without
// PostgreSQL's binaries.
func server(t *testing.T) *testenv.PGServer {
	t.Helper()
	return testenv.StartPostgres(t, "max_connections=600", "fsync=off", "synchronous_commit=off")
}

// pgTenants creates n schemas of base's database, migrated, as tenants
// named prefix0…, several at a time.
func pgTenants(t *testing.T, base, prefix string, n int) []tenant.Tenant {
	t.Helper()
	ts := make([]tenant.Tenant, n)
	var g errgroup.Group
	g.SetLimit(8)
	for i := range ts {
		g.Go(func() error {
			u, err := dburl.WithSchema(base, fmt.Sprintf("tn_%s%d", prefix, i))
			if err != nil {
				return err
			}
			ts[i] = tenant.Tenant{Name: fmt.Sprintf("%s%d", prefix, i), URL: u}
			return migrate(ts[i], dburl.Options{CreateSchema: true})
		})
	}
	testenv.Must(t, g.Wait(), "create the schema tenants")
	return ts
}

// sqliteTenants creates n SQLite files, migrated, as tenants named
// prefix0….
func sqliteTenants(t *testing.T, prefix string, n int) []tenant.Tenant {
	t.Helper()
	dir := t.TempDir()
	ts := make([]tenant.Tenant, n)
	for i := range ts {
		ts[i] = tenant.Tenant{Name: fmt.Sprintf("%s%d", prefix, i), URL: "sqlite:" + filepath.Join(dir, fmt.Sprintf("%s%d.db", prefix, i))}
		testenv.Must(t, migrate(ts[i], dburl.Options{Create: true}), "create "+ts[i].Name)
	}
	return ts
}

func migrate(tn tenant.Tenant, opts dburl.Options) error {
	ctx := context.Background()
	d, err := dburl.Open(ctx, tn.URL, opts)
	if err != nil {
		return err
	}
	defer d.Close()
	_, err = d.Migrate(ctx)
	return err
}

// writers write to tenants' outboxes, each tenant's messages from one
// goroutine in turn over its keys, so that each key's messages are
// serialised and published in the order written.
type writers struct {
	t  *testing.T
	mu sync.Mutex
	// written are each tenant's messages, in the order written.
	written map[string][]courier.Message
	dbs     map[string]*dburl.DB
}

// openWriters opens a database for each tenant, at url(tenant) (its own
// URL, or another way to it), closed when the test ends.
func openWriters(t *testing.T, ts []tenant.Tenant, url func(tenant.Tenant) string) *writers {
	w := &writers{t: t, written: map[string][]courier.Message{}, dbs: map[string]*dburl.DB{}}
	for _, tn := range ts {
		d, err := dburl.Open(context.Background(), url(tn), dburl.Options{MaxConns: 1})
		testenv.Must(t, err, "open "+tn.Name)
		t.Cleanup(d.Close)
		w.dbs[tn.Name] = d
	}
	return w
}

// write commits msgs to tenant name's outbox in one transaction.
func (w *writers) write(name string, msgs ...courier.Message) {
	ctx := context.Background()
	d := w.dbs[name]
	ob := outbox.New(d.Inserter(), outbox.Config{})
	testenv.Must(w.t, d.InTx(ctx, func(tx *sql.Tx) error { return ob.Write(ctx, tx, msgs...) }), "write to "+name)
	w.mu.Lock()
	w.written[name] = append(w.written[name], msgs...)
	w.mu.Unlock()
}

// steady writes one message to each tenant every period, over keys keys,
// until ctx ends; it returns when the writing has stopped.
func (w *writers) steady(ctx context.Context, names []string, period time.Duration, keys int) func() {
	var wg sync.WaitGroup
	for _, name := range names {
		wg.Go(func() {
			// Spread the tenants over the period, not all at its start.
			if !waits.Sleep(ctx, rand.N(period)) {
				return
			}
			t := time.NewTicker(period)
			defer t.Stop()
			for i := 0; ; i++ {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
				w.write(name, courier.NewMessage("orders", fmt.Sprintf("k%d", i%keys), "OrderPlaced", fmt.Appendf(nil, "%s/%d", name, i)))
			}
		})
	}
	return wg.Wait
}

// all returns every tenant's messages written so far.
func (w *writers) all() map[string][]courier.Message {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[string][]courier.Message, len(w.written))
	for k, v := range w.written {
		out[k] = append([]courier.Message(nil), v...)
	}
	return out
}
