package tenant_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker/memory"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/relay"
	"github.com/courier-go/courier/store/dburl"
	"github.com/courier-go/courier/store/memstore"
	"github.com/courier-go/courier/tenant"
)

// fastRelay polls often, for tests.
var fastRelay = relay.Config{PollInterval: 10 * time.Millisecond, LeaseDuration: 5 * time.Second}

// runFleet runs a fleet until the test ends, and returns it and a
// function that stops it and waits for Run to return.
func runFleet(t *testing.T, pub *memory.Publisher, cfg tenant.Config) (*tenant.Fleet, func()) {
	t.Helper()
	f, err := tenant.New(pub, cfg)
	testenv.Must(t, err, "new fleet")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	stop := sync.OnceFunc(func() {
		cancel()
		testenv.Must(t, <-done, "fleet run")
	})
	t.Cleanup(stop)
	return f, stop
}

// byTenant returns the payloads pub acknowledged per tenant, as the
// tenant header says, in the order acknowledged, without repeats; it
// fails the test for a message whose header and payload disagree.
func byTenant(t *testing.T, pub *memory.Publisher) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	seen := map[string]bool{}
	for _, m := range pub.Messages() {
		name := m.Headers[tenant.Header]
		p := string(m.Payload)
		if !strings.HasPrefix(p, name+"/") {
			t.Fatalf("message %q carries tenant header %q", p, name)
		}
		if !seen[p] {
			seen[p] = true
			out[name] = append(out[name], p)
		}
	}
	return out
}

// checkOrder fails the test unless each tenant's messages (as messages
// made them: n messages over keys) were all published, each key's in the
// order written.
func checkOrder(t *testing.T, got map[string][]string, ts []tenant.Tenant, n, keys int) {
	t.Helper()
	for _, tn := range ts {
		ps := got[tn.Name]
		if len(ps) != n {
			t.Fatalf("tenant %s: %d messages published, want %d", tn.Name, len(ps), n)
		}
		last := map[int]int{} // key → the last message index published
		for _, p := range ps {
			i, err := strconv.Atoi(strings.TrimPrefix(p, tn.Name+"/"))
			testenv.Must(t, err, "payload "+p)
			if prev, ok := last[i%keys]; ok && prev > i {
				t.Fatalf("tenant %s key k%d: message %d published after %d", tn.Name, i%keys, i, prev)
			}
			last[i%keys] = i
		}
	}
}

func published(pub *memory.Publisher) int { return len(pub.Messages()) }

// Every tenant's messages are published, stamped with the tenant's name,
// each key in order, while only two tenants may be open at once: the
// tenants take turns. It runs over three tenants of each kind of database,
// and over one fleet of tenants of every kind.
func TestFleetServesEveryTenant(t *testing.T) {
	forEachKind(t, func(t *testing.T, k tenantKind) { servesEveryTenant(t, k.tenants(t, "t", 3)) })
	t.Run("every-kind", func(t *testing.T) {
		servesEveryTenant(t, slices.Concat(sqliteTenants(t, "lite", 2), pgTenants(t, "pgs", 2),
			pgDatabaseTenants(t, "pgdb", 2), mysqlTenants(t, "my", 2)))
	})
}

func servesEveryTenant(t *testing.T, ts []tenant.Tenant) {
	const n, keys = 60, 4
	for _, tn := range ts {
		write(t, tn, messages(tn, n, keys)...)
	}
	pub := memory.NewPublisher()
	f, stop := runFleet(t, pub, tenant.Config{Source: tenant.List(ts...), Relay: fastRelay, MaxOpen: 2, IdleAfter: 50 * time.Millisecond})
	testenv.WhileProgressing(t, 30*time.Second, func() (bool, any) {
		p := published(pub)
		return len(byTenant(t, pub)) == len(ts) && p >= n*len(ts), p
	}, "every tenant's messages published: %v", testenv.Lazy(func() any { return summary(f) }))
	st := f.Status()
	if st.Open > 2 {
		t.Fatalf("%d tenants open, MaxOpen is 2", st.Open)
	}
	stop()
	checkOrder(t, byTenant(t, pub), ts, n, keys)
	var total int64
	for _, s := range f.Status().Served {
		total += s.Metrics.Published
		if s.Sessions < 1 || s.Open {
			t.Fatalf("tenant %s after the stop: %+v", s.Name, s)
		}
	}
	if total < int64(n*len(ts)) {
		t.Fatalf("status counts %d published, want %d", total, n*len(ts))
	}
}

// A tenant added to the file is served without a restart; one removed
// stops being served.
func TestFleetRereadsTheSource(t *testing.T) {
	ts := sqliteTenants(t, "t", 2)
	file := filepath.Join(t.TempDir(), "tenants")
	writeFile := func(ts ...tenant.Tenant) {
		var b strings.Builder
		b.WriteString("# name url\n")
		for _, tn := range ts {
			b.WriteString(tn.Name + " " + tn.URL + "\n")
		}
		testenv.Must(t, os.WriteFile(file+".new", []byte(b.String()), 0o600), "write tenants")
		testenv.Must(t, os.Rename(file+".new", file), "rename tenants")
	}
	writeFile(ts[0])
	write(t, ts[0], messages(ts[0], 5, 1)...)
	write(t, ts[1], messages(ts[1], 5, 1)...)
	pub := memory.NewPublisher()
	f, _ := runFleet(t, pub, tenant.Config{Source: tenant.File(file), Relay: fastRelay, Refresh: time.Second})
	testenv.Eventually(t, 30*time.Second, func() bool { return len(byTenant(t, pub)[ts[0].Name]) == 5 }, "t0 published")
	if got := byTenant(t, pub)[ts[1].Name]; len(got) != 0 {
		t.Fatalf("t1 is not in the file yet, but %d of its messages were published", len(got))
	}
	writeFile(ts[1])
	testenv.Eventually(t, 30*time.Second, func() bool { return len(byTenant(t, pub)[ts[1].Name]) == 5 }, "t1 published once added")
	testenv.Eventually(t, 30*time.Second, func() bool {
		s := f.Status().Served
		return len(s) == 1 && s[0].Name == ts[1].Name
	}, "t0 no longer served once removed: %v", testenv.Lazy(func() any { return f.Status().Served }))
}

// A tenant whose database does not exist is retried while the others are
// served, with its error in Status, and is served once its database is
// created; over each kind of database (a SQLite file, schema or database
// missing).
func TestFleetBrokenTenantDoesNotStopTheOthers(t *testing.T) {
	forEachKind(t, func(t *testing.T, k tenantKind) {
		ts := k.tenants(t, "ok", 3)
		broken := tenant.Tenant{Name: "broken", URL: k.url(t, "broken")} // not created yet
		for _, tn := range ts {
			write(t, tn, messages(tn, 10, 2)...)
		}
		pub := memory.NewPublisher()
		f, _ := runFleet(t, pub, tenant.Config{Source: tenant.List(append(ts, broken)...), Relay: fastRelay, MaxOpen: 1, IdleAfter: 50 * time.Millisecond})
		testenv.Eventually(t, 30*time.Second, func() bool { return published(pub) >= 30 }, "the healthy tenants published: %v",
			testenv.Lazy(func() any { return summary(f) }))
		testenv.Eventually(t, 30*time.Second, func() bool {
			for _, s := range f.Status().Served {
				if s.Name == broken.Name {
					return s.Error != "" && !s.FailingSince.IsZero()
				}
			}
			return false
		}, "the broken tenant's error in Status: %v", testenv.Lazy(func() any { return summary(f) }))
		// Its database appears: the tenant is served at its next try.
		createTenant(t, broken)
		write(t, broken, messages(broken, 3, 1)...)
		testenv.Eventually(t, 30*time.Second, func() bool { return len(byTenant(t, pub)[broken.Name]) == 3 }, "the mended tenant published: %v",
			testenv.Lazy(func() any { return summary(f) }))
	})
}

// Once a tenant whose database failed works again, Status says so while
// its database stays open: with room for every tenant, its session lasts
// as long as the fleet, and its old error must not count it as failing.
func TestFleetStatusClearsTheErrorOfAMendedTenant(t *testing.T) {
	tn := tenant.Tenant{Name: "mended", URL: sqliteKind.url(t, "mended")} // not created yet
	pub := memory.NewPublisher()
	f, _ := runFleet(t, pub, tenant.Config{Source: tenant.List(tn), Relay: fastRelay})
	testenv.Eventually(t, 30*time.Second, func() bool { return f.Status().Failing() == 1 }, "the tenant failing: %v",
		testenv.Lazy(func() any { return summary(f) }))
	createTenant(t, tn)
	write(t, tn, messages(tn, 3, 1)...)
	testenv.Eventually(t, 30*time.Second, func() bool { return len(byTenant(t, pub)[tn.Name]) == 3 }, "the mended tenant published: %v",
		testenv.Lazy(func() any { return summary(f) }))
	testenv.Eventually(t, 5*time.Second, func() bool {
		st := f.Status()
		return st.Failing() == 0 && len(st.Served) == 1 && st.Served[0].Open && st.Served[0].FailingSince.IsZero()
	}, "the mended tenant, open and publishing, still has its old error: %v", testenv.Lazy(func() any { return summary(f) }))
}

// Two processes sharing the tenants through heartbeats serve each tenant
// once between them; when one leaves, the other serves them all.
func TestFleetSharesTenants(t *testing.T) {
	ts := sqliteTenants(t, "s", 8)
	members := sqliteTenants(t, "members", 1)[0]
	ctx := context.Background()
	md, err := dburl.Open(ctx, members.URL, dburl.Options{})
	testenv.Must(t, err, "open the members' database")
	defer md.Close()
	pub := memory.NewPublisher()
	cfg := func(owner string) tenant.Config {
		rc := fastRelay
		rc.Owner = owner
		return tenant.Config{Source: tenant.List(ts...), Relay: rc, Members: md.Operations(), Heartbeat: 100 * time.Millisecond}
	}
	a, _ := runFleet(t, pub, cfg("relay-a"))
	b, stopB := runFleet(t, pub, cfg("relay-b"))
	split := func() bool {
		sa, sb := a.Status(), b.Status()
		names := map[string]int{}
		for _, s := range append(sa.Served, sb.Served...) {
			names[s.Name]++
		}
		if len(names) != len(ts) || len(sa.Served) == 0 || len(sb.Served) == 0 {
			return false
		}
		for _, c := range names {
			if c != 1 {
				return false
			}
		}
		return true
	}
	testenv.Eventually(t, 30*time.Second, split, "each tenant served by one process: a %+v, b %+v",
		testenv.Lazy(func() any { return a.Status() }), testenv.Lazy(func() any { return b.Status() }))
	for _, tn := range ts {
		want := tenant.Owner(tn.Name, []string{"relay-a", "relay-b"})
		if got := slices.Contains(names(a), tn.Name); got != (want == "relay-a") {
			t.Fatalf("tenant %s: served by a is %v, Owner says %s", tn.Name, got, want)
		}
	}
	for _, tn := range ts {
		write(t, tn, messages(tn, 10, 3)...)
	}
	testenv.WhileProgressing(t, 30*time.Second, func() (bool, any) { n := published(pub); return n >= 80, n }, "published by both")
	stopB()
	testenv.Eventually(t, 30*time.Second, func() bool { return len(a.Status().Served) == len(ts) }, "a serves all once b left")
	for _, tn := range ts {
		write(t, tn, courier.NewMessage("orders", "k0", "OrderPlaced", []byte(tn.Name+"/10")))
	}
	testenv.Eventually(t, 30*time.Second, func() bool { return len(byTenant(t, pub)) == len(ts) && published(pub) >= 88 }, "published by a alone")
}

func names(f *tenant.Fleet) []string {
	var out []string
	for _, s := range f.Status().Served {
		out = append(out, s.Name)
	}
	return out
}

// A producer cannot write a tenant's name into its messages: the header
// is reserved, and only the fleet sets it.
func TestProducersCannotSetTheTenantHeader(t *testing.T) {
	m := courier.NewMessage("orders", "k", "OrderPlaced", []byte("{}"))
	m.Headers = map[string]string{tenant.Header: "someone-else"}
	if err := m.Validate(courier.Limits{}); err == nil || !strings.Contains(err.Error(), "reserved") {
		t.Fatalf("a message with %s: %v; want the reserved-header error", tenant.Header, err)
	}
}

// A tenant busy for ever gives its place up after a Turn: with one place
// and a tenant that never stops writing, the other is served all the same.
// The turns are an hour long on a clock the test moves: a session ends
// only when the clock says its turn is over.
func TestFleetBusyTenantTakesTurns(t *testing.T) {
	ts := sqliteTenants(t, "b", 2)
	busy, other := ts[0], ts[1]
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	wg.Go(func() {
		for i := 0; ctx.Err() == nil; i++ {
			write(t, busy, courier.NewMessage("orders", "k", "OrderPlaced", []byte(busy.Name+"/"+strconv.Itoa(i))))
		}
	})
	testenv.Eventually(t, 30*time.Second, func() bool { return pendingOf(t, busy) > 0 }, "the busy tenant writes")
	pub := memory.NewPublisher()
	clock := memstore.NewClock()
	f, _ := runFleet(t, pub, tenant.Config{Source: tenant.List(ts...), Relay: fastRelay, MaxOpen: 1, IdleAfter: time.Hour, Turn: time.Hour, Clock: clock.Now})
	turn := func() { clock.Advance(time.Hour) } // ends the session that holds the place
	testenv.Eventually(t, 30*time.Second, func() bool {
		if len(byTenant(t, pub)[busy.Name]) > 0 && slices.ContainsFunc(f.Status().Served, func(s tenant.TenantStatus) bool { return s.Name == busy.Name && s.Open }) {
			return true
		}
		turn()
		return false
	}, "the busy tenant served: %v", testenv.Lazy(func() any { return summary(f) }))
	write(t, other, messages(other, 5, 1)...)
	testenv.Eventually(t, 30*time.Second, func() bool { turn(); return len(byTenant(t, pub)[other.Name]) == 5 }, "the other tenant served while the busy one writes")
}

// pendingOf is the count of tn's pending messages.
func pendingOf(t *testing.T, tn tenant.Tenant) int64 {
	t.Helper()
	d, err := dburl.Open(context.Background(), tn.URL, dburl.Options{})
	testenv.Must(t, err, "open "+tn.Name)
	defer d.Close()
	st, err := d.Operations().Status(context.Background())
	testenv.Must(t, err, "status of "+tn.Name)
	return st.Outbox.Pending
}

// summary is each served tenant's sessions, published messages and error.
func summary(f *tenant.Fleet) []string {
	var out []string
	for _, s := range f.Status().Served {
		out = append(out, fmt.Sprintf("%s: open %v, %d sessions, %d published, error %q", s.Name, s.Open, s.Sessions, s.Metrics.Published, s.Error))
	}
	return out
}
