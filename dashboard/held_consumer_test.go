package dashboard_test

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/courier-go/courier/dashboard"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/store"
)

// holdParked parks a delivery of key for consumer, failed with why, as a
// consumer that holds its subject's keys does: the first of a key holds
// it, the later ones are parked behind it. It returns the parked row.
func (f *fixture) holdParked(t testing.TB, consumer, subject, key, why string) store.Parked {
	t.Helper()
	kh, ok := f.drv.ConsumerStore().(store.KeyHolds)
	if !ok {
		t.Fatalf("the ConsumerStore (%T) holds no keys", f.drv.ConsumerStore())
	}
	id, _ := uuid.NewV7()
	p, ok, err := kh.ParkHolding(context.Background(), store.Parked{Consumer: consumer, MessageID: id.String(), Subject: subject,
		Headers: map[string][]string{"Courier-Type": {"AccountDebited"}}, Payload: []byte(`{}`), Reason: store.ReasonFailed,
		Error: why, Attempts: 3, History: []store.Attempt{{At: time.Now(), Error: why}}, ParkedAt: time.Now(), Key: key}, false)
	if err != nil || !ok {
		t.Fatalf("park a delivery of %q for %q: %v, %v", key, consumer, ok, err)
	}
	return p
}

// consumerHoldRe reads a row of the consumer side's held keys: consumer,
// key, linked cause (twice), subject, held count, error.
var consumerHoldRe = regexp.MustCompile(`(?s)<tr>\s*<td>([^<]*)</td>\s*<td><code>([^<]*)</code></td>\s*<td><a href="/parked/(\d+)">consumer:(\d+)</a></td>\s*<td>([^<]*)</td>\s*<td>[^<]*</td>\s*<td class="num">(\d+)</td>\s*<td>([^<]*)</td>`)

// The keys consumers hold on the Held keys page: each with its consumer,
// key, cause (linked), subject, age, held count and error, escaped,
// filtered by consumer, topic and error, and paged apart from the relay
// side's; the page of a held delivery names its cause, the page of a
// cause says it holds its key and how many wait behind it; the list of
// parked messages marks both; the overview and the consumers page count
// them. On every dialect.
func TestConsumerHeldKeysOverHTTP(t *testing.T) {
	for name, url := range databases {
		t.Run(name, func(t *testing.T) { testConsumerHeldKeysOverHTTP(t, url(t)) })
	}
}

func testConsumerHeldKeysOverHTTP(t *testing.T, dbURL string) {
	const why = "ledger: account frozen"
	f := newFixtureAt(t, dbURL, []string{"orders"}, []string{"broker says no"})
	relayCause := f.hold(t, "orders", "order-1", "broker says no", 1)
	f.park(t, "ledger", "courier.accounts", "not a key of a held topic") // parked, holds nothing
	a := f.holdParked(t, "ledger", "courier.accounts", "acct-1", why)
	a1 := f.holdParked(t, "ledger", "courier.accounts", "acct-1", why)
	a2 := f.holdParked(t, "ledger", "courier.accounts", "acct-1", why)
	b := f.holdParked(t, "ledger", "courier.accounts", hostileKey, "<b>bold</b> refusal")
	c := f.holdParked(t, "audit", "courier.payments", "acct-1", why)
	if a1.Behind != a.ID || a2.Behind != a.ID || b.Behind != 0 || c.Behind != 0 {
		t.Fatalf("parked behind %d: %+v, %+v; causes %+v, %+v", a.ID, a1, a2, b, c)
	}
	srv := serve(t, dashboard.Config{Database: f.drv, PageSize: 2})
	cl := newClient(t, srv.URL)

	// holds lists the consumer side of a page: [consumer, key, cause,
	// subject, held, error] of each row, and its next page.
	holds := func(path string) ([][]string, string) {
		t.Helper()
		code, page := cl.get(path)
		if code != 200 {
			t.Fatalf("%s: %d\n%s", path, code, page)
		}
		_, section, _ := strings.Cut(page, `<section id="consumer-holds">`)
		var rows [][]string
		for _, m := range consumerHoldRe.FindAllStringSubmatch(section, -1) {
			if m[3] != m[4] {
				t.Fatalf("%s links consumer:%s to parked message %s", path, m[4], m[3])
			}
			rows = append(rows, append(m[1:3], m[4:]...))
		}
		next := ""
		if m := regexp.MustCompile(`href="([^"]+)" id="consumer-next"`).FindStringSubmatch(section); m != nil {
			next = strings.ReplaceAll(m[1], "&amp;", "&")
		}
		return rows, next
	}
	rows, next := holds("/held-keys")
	want := fmt.Sprintf("[[ledger acct-1 %d courier.accounts 2 %s] [ledger &lt;img src=x onerror=alert(1)&gt; %d courier.accounts 0 &lt;b&gt;bold&lt;/b&gt; refusal]]", a.ID, why, b.ID)
	if got := fmt.Sprint(rows); got != want || next != fmt.Sprintf("/held-keys?cafter=%d", b.ID) {
		t.Fatalf("the first page of consumer holds lists %s, next %q; want %s, next after %d", got, next, want, b.ID)
	}
	if _, page := cl.get("/held-keys"); strings.Contains(page, hostileKey) || strings.Contains(page, "<b>bold") ||
		!strings.Contains(page, fmt.Sprintf(`>relay:%d</a>`, relayCause)) {
		t.Fatalf("the held keys page shows text as markup, or lacks the relay side:\n%s", page)
	}
	rows, next = holds(next)
	if got, want := fmt.Sprint(rows), fmt.Sprintf("[[audit acct-1 %d courier.payments 0 %s]]", c.ID, why); got != want || next != "" {
		t.Fatalf("the second page of consumer holds lists %s, next %q; want %s and no next page", got, next, want)
	}
	// The relay side's next page keeps the consumer side's page, and the
	// other way round.
	if _, page := cl.get(fmt.Sprintf("/held-keys?after=%d&cafter=%d", relayCause-1, b.ID)); !strings.Contains(page, fmt.Sprintf(`href="/held-keys?after=%d" id="consumer-first"`, relayCause-1)) ||
		!strings.Contains(page, fmt.Sprintf(`href="/held-keys?cafter=%d" id="first"`, b.ID)) {
		t.Fatalf("the first-page links of one side do not keep the other's page:\n%s", page)
	}
	for _, fl := range []struct{ query, want string }{
		{"consumer=audit", fmt.Sprintf("[[audit acct-1 %d courier.payments 0 %s]]", c.ID, why)},
		{"topic=accounts&error=BOLD", fmt.Sprintf("[[ledger &lt;img src=x onerror=alert(1)&gt; %d courier.accounts 0 &lt;b&gt;bold&lt;/b&gt; refusal]]", b.ID)},
		{"topic=refunds", "[]"},
	} {
		if rows, _ := holds("/held-keys?" + fl.query); fmt.Sprint(rows) != fl.want {
			t.Fatalf("consumer holds of %s: %v, want %s", fl.query, rows, fl.want)
		}
	}
	if _, page := cl.get("/held-keys?consumer=audit"); strings.Contains(page, fmt.Sprintf(`>relay:%d</a>`, relayCause)) ||
		!strings.Contains(page, `<p id="none">No key is held by a dead letter that matches.</p>`) {
		t.Fatalf("a filter by consumer lists dead letters:\n%s", page)
	}
	if _, page := cl.get("/held-keys?topic=refunds"); !strings.Contains(page, `<p id="consumer-none">No consumer holds a key behind a parked message that matches.</p>`) {
		t.Fatalf("an empty filtered list does not say so:\n%s", page)
	}

	// The cause's page says it holds its key and how many wait behind it;
	// a held delivery's page names its cause, linked.
	code, page := cl.get(fmt.Sprintf("/parked/%d", a.ID))
	if code != 200 || !strings.Contains(page, "This message holds its key <code>acct-1</code> for consumer ledger (since ") ||
		!strings.Contains(page, "2 later messages of the key are parked behind it, in order, until it is replayed or discarded.") ||
		!strings.Contains(page, "<strong>Replay</strong> applies it first, then the messages held behind it, in order.") ||
		strings.Contains(page, `id="held-behind"`) {
		t.Fatalf("the page of parked message %d, which holds its key: %d\n%s", a.ID, code, page)
	}
	code, page = cl.get(fmt.Sprintf("/parked/%d", b.ID))
	if code != 200 || !strings.Contains(page, "holds its key <code>&lt;img src=x onerror=alert(1)&gt;</code> for consumer ledger") ||
		!strings.Contains(page, "the key's later deliveries will be parked behind it") || strings.Contains(page, hostileKey) {
		t.Fatalf("the page of parked message %d: %d\n%s", b.ID, code, page)
	}
	code, page = cl.get(fmt.Sprintf("/parked/%d", a2.ID))
	link := fmt.Sprintf(`<a href="/parked/%d">consumer:%d</a>`, a.ID, a.ID)
	if code != 200 || !strings.Contains(page, "This message is held behind "+link+", the parked message that holds its key <code>acct-1</code> for consumer ledger") ||
		!strings.Contains(page, fmt.Sprintf(`<dt>held behind</dt><dd><a href="/parked/%d" id="behind">consumer:%d</a></dd>`, a.ID, a.ID)) ||
		strings.Contains(page, `id="holds"`) {
		t.Fatalf("the page of parked message %d, held behind %d: %d\n%s", a2.ID, a.ID, code, page)
	}

	// The list of parked messages marks the causes and the held ones.
	var list string
	for path := "/parked"; path != ""; {
		code, page = cl.get(path)
		if code != 200 {
			t.Fatalf("%s: %d\n%s", path, code, page)
		}
		list += page
		path = ""
		if m := nextPageRe.FindStringSubmatch(page); m != nil {
			path = strings.ReplaceAll(m[1], "&amp;", "&")
		}
	}
	for _, p := range []store.Parked{a, b, c} {
		if !strings.Contains(list, fmt.Sprintf(`>consumer:%d</a> <span class="note holds"`, p.ID)) {
			t.Fatalf("the list of parked messages does not mark consumer:%d as holding its key:\n%s", p.ID, list)
		}
	}
	for _, p := range []store.Parked{a1, a2} {
		if !strings.Contains(list, fmt.Sprintf(`>consumer:%d</a> <span class="note held" title="Parked unprocessed behind the parked message that holds its key">held behind %s</span>`, p.ID, link)) {
			t.Fatalf("the list of parked messages does not mark consumer:%d as held behind %d:\n%s", p.ID, a.ID, list)
		}
	}
	if n := strings.Count(list, `<span class="note holds"`); n != 3 {
		t.Fatalf("the list of parked messages marks %d as holding their key, want 3:\n%s", n, list)
	}

	// The overview and the consumers page count them.
	if code, page = cl.get("/"); code != 200 || !strings.Contains(page, `id="consumer-held-keys">3<`) || !strings.Contains(page, `id="consumer-held">2<`) ||
		!strings.Contains(page, "keys consumers hold, the oldest for ") {
		t.Fatalf("the overview lacks the consumers' held keys: %d\n%s", code, page)
	}
	if code, page = cl.get("/consumers"); code != 200 || !strings.Contains(page, `<a href="/held-keys?consumer=ledger#consumer-holds">2</a></td><td class="num">2</td>`) ||
		!strings.Contains(page, `<a href="/held-keys?consumer=audit#consumer-holds">1</a></td><td class="num">0</td>`) {
		t.Fatalf("the consumers page lacks their held keys: %d\n%s", code, page)
	}

	// Released, the keys leave the page and the counts.
	kh := f.drv.ConsumerStore().(store.KeyHolds)
	for _, p := range []store.Parked{a, a1, a2, b, c} {
		if _, err := kh.PassHold(context.Background(), p.Consumer, p.Key, p.ID); err != nil {
			t.Fatalf("pass the hold of %q on from %d: %v", p.Key, p.ID, err)
		}
	}
	if _, page = cl.get("/held-keys"); !strings.Contains(page, `<p id="consumer-none">No consumer holds a key.</p>`) {
		t.Fatalf("with no key held by a consumer the page says:\n%s", page)
	}
	if _, page = cl.get("/"); !strings.Contains(page, `id="consumer-held-keys">0<`) || strings.Contains(page, "keys consumers hold, the oldest") {
		t.Fatalf("with no key held by a consumer the overview says:\n%s", page)
	}
	testenv.Must(t, f.drv.Admin().DiscardDeadLetter(context.Background(), relayCause), "discard")
}
