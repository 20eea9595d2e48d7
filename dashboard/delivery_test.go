package dashboard_test

import (
	"context"
	"encoding/json"
	"html"
	"strings"
	"testing"
	"time"

	"github.com/courier-go/courier/audit"
	"github.com/courier-go/courier/dashboard"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/store"
)

// minuteLater is the clock the Delivery page is looked at by: a minute
// after the watches of saveWatches saved their state.
func minuteLater() time.Time { return time.Now().Add(time.Minute) }

// saveWatches saves two continuous audits in f's database: "nats:COURIER",
// running (a pass a minute), which found a lost message and a phantom
// whose key is markup and a terminal's escape, and "kafka:orders", which
// by minuteLater saved nothing for three of its intervals (15s) and whose
// last pass failed.
func saveWatches(t *testing.T, f *fixture) (lost, phantom audit.WatchFinding) {
	t.Helper()
	ctx := context.Background()
	at := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	lost = audit.WatchFinding{Kind: audit.KindLost, FoundAt: at, Finding: audit.Finding{MessageID: "0193a1b2-0000-7000-8000-00000000002a", Topic: "orders", Key: "order-1042",
		Type: "OrderPlaced", ID: 42, PublishedAt: at.Add(-time.Minute)}}
	phantom = audit.WatchFinding{Kind: audit.KindPhantom, FoundAt: at.Add(time.Second), Finding: audit.Finding{MessageID: "0193a1b2-0000-7000-8000-0000000000ff", Topic: "orders",
		Key: hostileKey + "\x1b[31m", Type: "OrderPlaced", Log: "COURIER", Offset: 7, StoredAt: at.Add(-30 * time.Second), Detail: "unknown to the database"}}
	findings, err := json.Marshal([]audit.WatchFinding{lost, phantom})
	testenv.Must(t, err, "findings")
	d := f.drv.Delivery()
	testenv.Must(t, d.SaveWatch(ctx, store.AuditWatch{Name: "nats:COURIER", Broker: "nats://127.0.0.1:4222 stream COURIER",
		From: minuteLater().Add(-10 * time.Minute), To: minuteLater().Add(-6 * time.Second), Passes: 40, Lost: 1, Phantoms: 1, Duplicates: 2,
		Interval: time.Minute, Findings: findings, StartedAt: at}), "save the running watch")
	testenv.Must(t, d.SaveWatch(ctx, store.AuditWatch{Name: "kafka:orders", Broker: "kafka://127.0.0.1:9092 topics orders",
		Passes: 3, Failed: 3, Interval: 15 * time.Second, LastError: "audit: read the broker: <b>connection refused</b>", StartedAt: at}), "save the stopped watch")
	return lost, phantom
}

// The Delivery page shows each continuous audit: the range judged, its
// lag and counts, its latest findings newest first with what to do about
// each kind, and a watch that stopped or fails says so; what the
// database holds is escaped. With no watch it says how to start one. On
// every dialect.
func TestDeliveryOverHTTP(t *testing.T) {
	for name, url := range databases {
		t.Run(name, func(t *testing.T) { testDeliveryOverHTTP(t, url(t)) })
	}
}

func testDeliveryOverHTTP(t *testing.T, dbURL string) {
	f := newFixtureAt(t, dbURL, []string{"orders"}, []string{"too big"})
	srv := serve(t, dashboard.Config{Database: f.drv, Clock: minuteLater})
	cl := newClient(t, srv.URL)
	code, page := cl.get("/delivery")
	if code != 200 || !strings.Contains(page, `<p id="none">No continuous audit has saved its state`) || !strings.Contains(page, `href="/delivery" class="on">Delivery</a>`) {
		t.Fatalf("the Delivery page without watches: %d\n%s", code, page)
	}

	lost, phantom := saveWatches(t, f)
	code, page = cl.get("/delivery")
	if code != 200 {
		t.Fatalf("/delivery: %d\n%s", code, page)
	}
	for _, want := range []string{
		`id="alarm"`,
		`<span class="watch-name">nats:COURIER</span> <span class="state state-findings">findings</span>`,
		`<td class="num lost">1</td><td class="num phantoms">1</td><td class="num order-breaks">0</td><td class="num duplicates">2</td>`,
		`<dt class="kind-lost">Lost (1)</dt><dd>` + html.EscapeString(audit.Advice(audit.KindLost)),
		`<dt class="kind-phantom">Phantom (1)</dt>`,
		`<dt class="kind-duplicate">Duplicate (2), no alarm</dt>`,
		`<code>` + lost.MessageID + `</code>`, "id 42 at 2026-12-06 11:59:00", "COURIER@7 at 2026-12-06 11:59:30",
		`&lt;img src=x onerror=alert(1)&gt;`,
		`<span class="watch-name">kafka:orders</span> <span class="state state-stopped">stopped</span>`,
		`Its last pass failed: audit: read the broker: &lt;b&gt;connection refused&lt;/b&gt;`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the Delivery page lacks %s", want)
		}
	}
	if strings.Contains(page, hostileKey) || strings.Contains(page, "<b>connection") || strings.Contains(page, "\x1b") {
		t.Error("the Delivery page shows what the database holds as markup, or a raw escape character")
	}
	// Newest first: the phantom, found after the lost message.
	if p, l := strings.Index(page, phantom.MessageID), strings.Index(page, lost.MessageID); p < 0 || l < 0 || p > l {
		t.Errorf("the findings are not newest first: phantom at %d, lost at %d", p, l)
	}
	if t.Failed() {
		t.Log(page)
	}
}
