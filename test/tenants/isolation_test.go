package tenants

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker"
	"github.com/courier-go/courier/broker/memory"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/relay"
	"github.com/courier-go/courier/store/dburl"
	"github.com/courier-go/courier/tenant"
)

// measure runs the isolation run, which measures latencies and needs the
// machine to itself (not beside the other packages' tests).
var measure = flag.Bool("measure", false, "run the isolation run, which compares latencies")

// Isolation numbers.
const (
	schemaTenants = 200
	fileTenants   = 20
	brokenTenants = 10  // the first schema tenants, behind a proxy that freezes
	poisoned      = 10  // the schema tenant with a poison key and its backlog
	backlog       = 300 // messages behind the poison message on its key
	writePeriod   = 2 * time.Second
	measureFor    = 15 * time.Second
	maxOpen       = 250 // a place for every tenant: they all write
)

// isolationConfig is the fleet of the isolation test: a place for every
// tenant, since every one is busy (tenants that take turns wait for their
// turn: bench's tenants section measures that), and quick retries of the
// poison message.
func isolationConfig(src tenant.Source) tenant.Config {
	return tenant.Config{Source: src, MaxOpen: maxOpen, IdleAfter: 500 * time.Millisecond, Turn: 2 * time.Second,
		Relay: relay.Config{PollInterval: time.Second, LeaseDuration: 5 * time.Second, MaxAttempts: 3,
			Backoff: relay.Backoff{Initial: 200 * time.Millisecond, Max: time.Second}}}
}

// The fleet at scale, on a PostgreSQL server of the test's own: 200
// schema tenants and 20 SQLite files, made once for both runs.
func TestTwoHundredTenants(t *testing.T) {
	srv := server(t)
	start := time.Now()
	schemas := pgTenants(t, srv.URL, "s", schemaTenants)
	files := sqliteTenants(t, "f", fileTenants)
	t.Logf("made %d schema tenants and %d file tenants in %s", len(schemas), len(files), time.Since(start).Round(time.Second))
	t.Run("Isolation", func(t *testing.T) {
		if !*measure {
			t.Skip("compares latencies, which takes a machine to itself: run go test ./test/tenants -measure alone")
		}
		isolation(t, srv, append(slices.Clone(schemas), files...))
	})
	t.Run("Chaos", func(t *testing.T) { chaos(t, srv, schemas) })
}

// isolation: the tenants write steadily; the commit→publish p99 of the
// healthy ones is measured, then again while ten tenants' databases stop
// answering (a proxy that freezes) and one tenant holds a poison key with
// a backlog: the p99 stays within twice the first. Then the broken
// tenants recover and everything drains: nothing lost, each tenant's keys
// in order, the poison message a dead letter of its tenant.
func isolation(t *testing.T, srv *testenv.PGServer, ts []tenant.Tenant) {
	proxy := testenv.StartProxy(t, fmt.Sprintf("127.0.0.1:%d", srv.Port()))
	// The relay reaches the broken tenants through the proxy; their
	// writers, like the application, reach them directly.
	relayed := slices.Clone(ts)
	for i := range brokenTenants {
		relayed[i].URL = proxy.URL(t, ts[i].URL)
	}
	w := openWriters(t, ts, func(tn tenant.Tenant) string { return tn.URL })
	names := make([]string, len(ts))
	healthy := map[string]bool{}
	for i, tn := range ts {
		names[i] = tn.Name
		healthy[tn.Name] = i >= brokenTenants && i != poisoned
	}

	pub := memory.NewPublisher()
	f, err := tenant.New(pub, isolationConfig(tenant.List(relayed...)))
	testenv.Must(t, err, "fleet")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	defer func() { cancel(); testenv.Must(t, <-done, "fleet run") }()

	wctx, stopWriting := context.WithCancel(ctx)
	writing := w.steady(wctx, names, writePeriod, 4)
	defer func() { stopWriting(); writing() }()
	// Warm: every tenant's relay runs and has published, the first
	// sessions' opening (at most MaxConnecting at a time) is over.
	testenv.WhileProgressing(t, time.Minute, func() (bool, any) {
		n := servedTenants(pub)
		return n == len(ts), fmt.Sprintf("%d of %d tenants published", n, len(ts))
	}, "every tenant served before the measurements")

	from := time.Now()
	time.Sleep(measureFor)
	base := latencies(t, pub, from, time.Now(), healthy)

	proxy.Freeze()
	poison := courier.NewMessage("orders", "poison", "OrderPlaced", []byte("poison"))
	pub.Fail(poison.ID, -1)
	behind := make([]courier.Message, backlog)
	for i := range behind {
		behind[i] = courier.NewMessage("orders", "poison", "OrderPlaced", fmt.Appendf(nil, "behind/%d", i))
	}
	w.write(ts[poisoned].Name, append([]courier.Message{poison}, behind...)...)
	from = time.Now()
	time.Sleep(measureFor)
	broken := latencies(t, pub, from, time.Now(), healthy)
	st := f.Status()
	t.Logf("healthy tenants' commit→publish: p50 %s p99 %s over %d messages; with %d tenants unreachable and a poison key: p50 %s p99 %s over %d; %d tenants open of %d (at most %d), %d failing",
		base.p50, base.p99, base.n, brokenTenants, broken.p50, broken.p99, broken.n, st.Open, len(st.Served), maxOpen, st.Failing())
	logged := 0
	for _, s := range st.Served {
		if s.Error != "" && logged < 3 {
			logged++
			t.Logf("tenant %s: %s", s.Name, s.Error)
		}
	}
	if base.n == 0 || broken.n == 0 {
		t.Fatalf("no healthy message published in a window: %d, %d", base.n, broken.n)
	}
	if broken.p99 > 2*base.p99 {
		t.Errorf("the healthy tenants' p99 went from %s to %s with broken tenants: more than twice", base.p99, broken.p99)
	}
	if st.Failing() < brokenTenants/2 {
		t.Errorf("%d tenants failing in Status while %d cannot be reached", st.Failing(), brokenTenants)
	}

	stopWriting()
	writing()
	proxy.Thaw()
	written := w.all()
	total := 0
	for _, msgs := range written {
		total += len(msgs)
	}
	testenv.WhileProgressing(t, time.Minute, func() (bool, any) {
		n := acked(pub, written)
		return n == total-1, fmt.Sprintf("%d of %d published", n, total-1)
	}, "every message but the poison one published once the tenants recover")
	checkOrder(t, pub, written, poison.ID)
	if !deadLetter(t, ts[poisoned], poison) {
		t.Fatalf("the poison message is not a dead letter of tenant %s", ts[poisoned].Name)
	}
}

// window is the latency of the healthy tenants' messages acknowledged in
// a window.
type window struct {
	n        int
	p50, p99 time.Duration
}

// latencies measures, for the healthy tenants' messages acknowledged
// between from and to, the time from their OccurredAt (set just before
// their commit) to their acknowledgement.
func latencies(t *testing.T, pub *memory.Publisher, from, to time.Time, healthy map[string]bool) window {
	t.Helper()
	var ds []time.Duration
	_, err := pub.ReadBack(context.Background(), from, to, func(s broker.Stored) error {
		if healthy[s.Message.Headers[tenant.Header]] {
			ds = append(ds, s.At.Sub(s.Message.OccurredAt))
		}
		return nil
	})
	testenv.Must(t, err, "read back")
	if len(ds) == 0 {
		return window{}
	}
	slices.Sort(ds)
	at := func(q float64) time.Duration { return ds[min(len(ds)-1, int(q*float64(len(ds))))] }
	return window{n: len(ds), p50: at(0.5), p99: at(0.99)}
}

// acked counts the written messages the broker acknowledged.
func acked(pub *memory.Publisher, written map[string][]courier.Message) int {
	seen := map[[16]byte]bool{}
	for _, m := range pub.Messages() {
		seen[m.ID] = true
	}
	n := 0
	for _, msgs := range written {
		for _, m := range msgs {
			if seen[m.ID] {
				n++
			}
		}
	}
	return n
}

// checkOrder fails the test unless each tenant's messages were
// acknowledged with its tenant's header, each key's first acknowledgements
// in the order written (skip is left out: the poison message).
func checkOrder(t *testing.T, pub *memory.Publisher, written map[string][]courier.Message, skip [16]byte) {
	t.Helper()
	pos := map[[16]byte]int{}
	for i, m := range pub.Messages() {
		if _, ok := pos[m.ID]; !ok {
			pos[m.ID] = i
		}
	}
	byID := map[[16]byte]string{}
	for _, m := range pub.Messages() {
		byID[m.ID] = m.Headers[tenant.Header]
	}
	for name, msgs := range written {
		last := map[string]int{}
		for _, m := range msgs {
			if m.ID == skip {
				continue
			}
			if byID[m.ID] != name {
				t.Fatalf("tenant %s's message %s published as tenant %q's", name, m.ID, byID[m.ID])
			}
			if p, ok := last[m.Key]; ok && pos[m.ID] < p {
				t.Fatalf("tenant %s key %s: %s published before a message written earlier", name, m.Key, m.Payload)
			}
			last[m.Key] = pos[m.ID]
		}
	}
}

// deadLetter reports whether msg is a dead letter in tn's database.
func deadLetter(t *testing.T, tn tenant.Tenant, msg courier.Message) bool {
	t.Helper()
	d, err := dburl.Open(context.Background(), tn.URL, dburl.Options{})
	testenv.Must(t, err, "open "+tn.Name)
	defer d.Close()
	var n int
	err = d.SQL().QueryRowContext(context.Background(), d.Rebind(`SELECT count(*) FROM courier_outbox_dead_letters WHERE message_id = ?`),
		strings.ToLower(msg.ID.String())).Scan(&n)
	testenv.Must(t, err, "count dead letters")
	return n == 1
}

// servedTenants counts the tenants with a message acknowledged.
func servedTenants(pub *memory.Publisher) int {
	seen := map[string]bool{}
	for _, m := range pub.Messages() {
		seen[m.Headers[tenant.Header]] = true
	}
	return len(seen)
}
