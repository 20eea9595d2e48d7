package tenant

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/internal/openset"
	"github.com/courier-go/courier/store/dburl"
)

// errUnknown is the error of lookup for a name Source does not list.
var errUnknown = errors.New("not among the tenants Source lists")

// databases opens the tenants' databases on demand and keeps at most
// ConsumerConfig.MaxOpen open, in an openset.Set by tenant: to open
// another, it closes the one used least recently among those no one is
// using, or waits for one to be free. It reads Source when a name it has not read arrives, and
// again once the tenants it read are older than refresh.
type databases struct {
	src     Source
	refresh time.Duration
	reread  time.Duration
	clock   courier.Clock
	log     *slog.Logger
	// The databases open or opening, by tenant (name and URL).
	open *openset.Set[Tenant, *dburl.DB]

	mu sync.Mutex
	// The tenants as Source last gave them, and when that read started.
	tenants map[string]Tenant
	names   []string // sorted
	readAt  time.Time
	readErr error // of the last read
	// The read under way: closed when it ends; nil when none is.
	reading chan struct{}
}

// newDatabases returns the databases of cfg's tenants, none open yet.
func newDatabases(cfg ConsumerConfig, log *slog.Logger) *databases {
	open := func(ctx context.Context, t Tenant) (*dburl.DB, error) {
		db, err := cfg.Open(ctx, t, dburl.Options{Flag: "tenant " + t.Name + "'s URL", MaxConns: cfg.MaxConns,
			ConnectTimeout: cfg.ConnectTimeout})
		if err != nil {
			if db != nil {
				db.Close()
			}
			return nil, fmt.Errorf("tenant %s: %w", t.Name, err)
		}
		return db, nil
	}
	closeDB := func(db *dburl.DB) {
		if db != nil {
			db.Close()
		}
	}
	return &databases{src: NewSieve(cfg.Source, log), refresh: cfg.Refresh, reread: cfg.Reread, clock: cfg.Clock, log: log,
		open: openset.New(openset.Config[Tenant, *dburl.DB]{Open: open, Close: closeDB, MaxOpen: cfg.MaxOpen})}
}

// lookup returns the tenant named name. A name it has not read waits for a
// read of Source that starts after the call (reads start reread apart at
// least); errUnknown (wrapped) says that read does not list it either.
// Tenants read longer than refresh ago are read again first, and kept when
// Source fails.
func (d *databases) lookup(ctx context.Context, name string) (Tenant, error) {
	asked := d.clock.Now()
	_ = d.read(ctx, asked.Add(-d.refresh)) // a failure keeps the tenants read before
	d.mu.Lock()
	t, ok := d.tenants[name]
	d.mu.Unlock()
	if ok {
		return t, nil
	}
	if err := d.read(ctx, asked); err != nil {
		return Tenant{}, fmt.Errorf("tenant %q is not among those read, and the tenants could not be read again: %w", name, err)
	}
	d.mu.Lock()
	t, ok = d.tenants[name]
	d.mu.Unlock()
	if !ok {
		return Tenant{}, fmt.Errorf("tenant %q: %w", name, errUnknown)
	}
	return t, nil
}

// list returns the tenants, read again first when they were read longer
// than refresh ago (those read before are kept when Source fails).
func (d *databases) list(ctx context.Context) ([]Tenant, error) {
	err := d.read(ctx, d.clock.Now().Add(-d.refresh))
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.tenants == nil {
		return nil, fmt.Errorf("tenants not read: %w", err)
	}
	ts := make([]Tenant, len(d.names))
	for i, n := range d.names {
		ts[i] = d.tenants[n]
	}
	return ts, nil
}

// read makes sure a read of Source that started at since or later has
// ended, and returns its error. Reads start reread apart at least; callers
// that need one at once share it. A read closes the databases of the
// tenants it no longer lists, or lists with another URL, once no one uses
// them. A read that fails keeps the tenants read before, and is logged
// when a read worked before it.
func (d *databases) read(ctx context.Context, since time.Time) error {
	d.mu.Lock()
	for {
		if !d.readAt.IsZero() && !d.readAt.Before(since) {
			err := d.readErr
			d.mu.Unlock()
			return err
		}
		if ch := d.reading; ch != nil {
			d.mu.Unlock()
			select {
			case <-ch:
			case <-ctx.Done():
				return ctx.Err()
			}
			d.mu.Lock()
			continue
		}
		if wait := d.readAt.Add(d.reread).Sub(d.clock.Now()); wait > 0 && !d.readAt.IsZero() {
			d.mu.Unlock()
			if !sleep(ctx, wait) {
				return ctx.Err()
			}
			d.mu.Lock()
			continue
		}
		break
	}
	start, done := d.clock.Now(), make(chan struct{})
	d.reading = done
	d.mu.Unlock()

	ts, err := d.src.Tenants(ctx)

	d.mu.Lock()
	d.reading = nil
	close(done)
	if err != nil && ctx.Err() != nil {
		d.mu.Unlock()
		return err // cut short by the caller: not a read of Source
	}
	var tenants map[string]Tenant // read now
	if err == nil {
		tenants = make(map[string]Tenant, len(ts))
		d.names = d.names[:0]
		for _, t := range ts {
			tenants[t.Name] = t
			d.names = append(d.names, t.Name)
		}
		slices.Sort(d.names)
		d.tenants = tenants
	} else if d.readErr == nil && d.tenants != nil {
		d.log.Warn("tenants not read again; using the last ones read", "error", err)
	}
	d.readAt, d.readErr = start, err
	d.mu.Unlock()
	if tenants != nil { // d.mu unlocked: closing a database takes a while
		d.open.RemoveFunc(func(k Tenant) bool { // a tenant removed, or given a new URL
			t, ok := tenants[k.Name]
			return !ok || t.URL != k.URL
		})
	}
	return err
}

// use runs fn with t's database, which it opens unless it is open. A scan
// (a pass over every tenant) does not count as a use: the database it
// opens is the first one closed for another, so that a pass over many
// tenants keeps the others open.
func (d *databases) use(ctx context.Context, t Tenant, scan bool, fn func(db *dburl.DB) error) error {
	if !d.open.Has(t) { // Source may have given the tenant a new URL: close the old one's
		d.open.RemoveFunc(func(k Tenant) bool { return k.Name == t.Name && k.URL != t.URL })
	}
	h, err := d.open.Acquire(ctx, t, scan)
	if err != nil {
		return err
	}
	defer h.Release()
	return fn(h.Value())
}

// close closes every database no one uses, and the others once released.
// Later uses open them again.
func (d *databases) close() {
	d.open.RemoveFunc(func(Tenant) bool { return true })
}

// isOpen reports whether t's database is open or opening.
func (d *databases) isOpen(t Tenant) bool { return d.open.Has(t) }

// openCount is how many databases are open or opening, those of tenants
// removed or given a new URL that are still in use included.
func (d *databases) openCount() int { return d.open.Len() }
