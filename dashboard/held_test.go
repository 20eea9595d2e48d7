package dashboard_test

import (
	"context"
	"database/sql"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/dashboard"
	"github.com/courier-go/courier/failgroup"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/store"
)

// hold makes a dead letter of topic and key that holds its key, failed
// with why, with later messages of the key held behind it, as a relay
// that holds topic's keys does; it returns the dead letter's id.
func (f *fixture) hold(t testing.TB, topic, key, why string, later int) int64 {
	t.Helper()
	ctx := context.Background()
	msgs := make([]courier.Message, 1+later)
	for i := range msgs {
		id, _ := uuid.NewV7()
		msgs[i] = courier.Message{ID: id, Topic: topic, Key: key, Type: fmt.Sprintf("Step%d", i), Version: 1,
			Payload: fmt.Appendf(nil, `{"step":%d}`, i), OccurredAt: time.Now()}
	}
	testenv.Must(t, f.drv.InTx(ctx, func(tx *sql.Tx) error { return f.drv.Inserter().Insert(ctx, tx, msgs) }), "insert")
	rs, err := f.drv.RelayStore(ctx, store.RelayConfig{})
	testenv.Must(t, err, "relay store")
	b, err := rs.Claim(ctx, "test-relay", 1, time.Minute)
	testenv.Must(t, err, "claim")
	if len(b.Records) != 1 || b.Records[0].Message.ID != msgs[0].ID {
		t.Fatalf("claimed %d rows, want %s/%s's first", len(b.Records), topic, key)
	}
	cause := b.Records[0].Seq
	testenv.Must(t, rs.Complete(ctx, "test-relay", b.Lease, store.Outcome{Dead: []store.Failure{
		{Seq: cause, Error: why, Counted: true, Hold: true}}}), "die holding the key")
	// The next claim finds the key held and moves its rows behind it.
	b, err = rs.Claim(ctx, "test-relay", 100, time.Minute)
	testenv.Must(t, err, "claim")
	if len(b.Records) != 0 {
		t.Fatalf("claimed %d rows of a held key, want none", len(b.Records))
	}
	return cause
}

var (
	heldRowRe  = regexp.MustCompile(`(?s)<tr>\s*<td><a href="/dead-letters/(\d+)">relay:(\d+)</a></td>\s*<td>([^<]*)</td>\s*<td><code>([^<]*)</code></td>\s*<td>[^<]*</td>\s*<td class="num">(\d+)</td>\s*<td>([^<]*)</td>`)
	heldMsgRe  = regexp.MustCompile(`<tr><td class="num">\d+</td><td>([^<]*)</td><td>(Step\d+)</td>`)
	hostileKey = `<img src=x onerror=alert(1)>`
)

// The held keys page lists the keys dead letters hold, with their cause,
// topic, key, age, held count and error, escaped, filtered and paged as
// the dead letters are; a holding dead letter's page lists the messages
// held behind it and says what replay and discard do to them; a failure
// group's page counts the keys its members hold and the messages behind
// them; the overview counts them. On every dialect.
func TestHeldKeysOverHTTP(t *testing.T) {
	for name, url := range databases {
		t.Run(name, func(t *testing.T) { testHeldKeysOverHTTP(t, url(t)) })
	}
}

func testHeldKeysOverHTTP(t *testing.T, dbURL string) {
	const why = "schema rejected: field amount is missing"
	f := newFixtureAt(t, dbURL, []string{"orders"}, []string{why}) // a dead letter that holds nothing, of the same cause
	plain := f.deadLetters(t)[0].ID
	a := f.hold(t, "orders", "order-1", why, 3)
	b := f.hold(t, "payments", hostileKey, "broker says no", 1)
	c := f.hold(t, "orders", "order-2", why, 0)
	srv := serve(t, dashboard.Config{Database: f.drv, PageSize: 2})
	cl := newClient(t, srv.URL)

	code, page := cl.get("/")
	if code != 200 || !strings.Contains(page, `id="held-keys">3<`) || !strings.Contains(page, `id="held">4<`) || !strings.Contains(page, "held keys, the oldest for ") ||
		!strings.Contains(page, `href="/held-keys"`) || !strings.Contains(page, `href="/held-keys?topic=orders">2</a>`) {
		t.Fatalf("overview lacks the held keys: %d\n%s", code, page)
	}

	// keys lists a page: [cause, topic, key, held, error] of each row.
	keys := func(path string) ([][]string, string) {
		t.Helper()
		code, page := cl.get(path)
		if code != 200 {
			t.Fatalf("%s: %d\n%s", path, code, page)
		}
		var rows [][]string
		for _, m := range heldRowRe.FindAllStringSubmatch(page, -1) {
			if m[1] != m[2] {
				t.Fatalf("%s links relay:%s to dead letter %s", path, m[2], m[1])
			}
			rows = append(rows, m[2:])
		}
		next := ""
		if m := nextPageRe.FindStringSubmatch(page); m != nil {
			next = strings.ReplaceAll(m[1], "&amp;", "&")
		}
		return rows, next
	}
	rows, next := keys("/held-keys")
	want := fmt.Sprintf("[[%d orders order-1 3 %s] [%d payments &lt;img src=x onerror=alert(1)&gt; 1 broker says no]]", a, why, b)
	if got := fmt.Sprint(rows); got != want || next != fmt.Sprintf("/held-keys?after=%d", b) {
		t.Fatalf("the first page of held keys lists %s, next %q; want %s, next after %d", got, next, want, b)
	}
	rows, next = keys(next)
	if got, want := fmt.Sprint(rows), fmt.Sprintf("[[%d orders order-2 0 %s]]", c, why); got != want || next != "" {
		t.Fatalf("the second page of held keys lists %s, next %q; want %s and no next page", got, next, want)
	}
	if _, page := cl.get("/held-keys"); strings.Contains(page, hostileKey) {
		t.Fatal("the held keys page shows a key as markup")
	}
	rows, next = keys("/held-keys?topic=orders&error=SCHEMA")
	if got, want := fmt.Sprint(rows), fmt.Sprintf("[[%d orders order-1 3 %s] [%d orders order-2 0 %s]]", a, why, c, why); got != want || next != "" {
		t.Fatalf("held keys of topic orders whose error has SCHEMA: %s, next %q; want %s", got, next, want)
	}
	if rows, _ := keys("/held-keys?topic=refunds"); rows != nil {
		t.Fatalf("held keys of topic refunds: %v, want none", rows)
	}
	if _, page := cl.get("/held-keys?topic=refunds"); !strings.Contains(page, "No key is held by a dead letter that matches.") {
		t.Fatalf("an empty filtered list does not say so:\n%s", page)
	}

	// The dead letter that holds order-1 lists the three held behind it,
	// in order, and says what replay and discard do with them; with a
	// page of 2, it lists two and says one more waits.
	code, page = cl.get(fmt.Sprintf("/dead-letters/%d", a))
	held := heldMsgRe.FindAllStringSubmatch(page, -1)
	if code != 200 || !strings.Contains(page, "This dead letter holds its key <code>order-1</code>: 3 later messages of the key wait behind it") ||
		!strings.Contains(page, "<strong>Replay</strong> publishes it first, then the messages held behind it, in order.") ||
		!strings.Contains(page, "<strong>Discard</strong> drops it and lets its key move on: the messages held behind it are published, in order.") ||
		len(held) != 2 || held[0][2] != "Step1" || held[1][2] != "Step2" || !strings.Contains(page, `id="held-more">And 1 more.`) {
		t.Fatalf("the page of dead letter %d, which holds its key: %d, held %v\n%s", a, code, held, page)
	}
	code, page = cl.get(fmt.Sprintf("/dead-letters/%d", b))
	if code != 200 || !strings.Contains(page, "holds its key <code>&lt;img src=x onerror=alert(1)&gt;</code>: 1 later message of the key waits behind it") ||
		strings.Contains(page, hostileKey) || strings.Contains(page, "held-more") {
		t.Fatalf("the page of dead letter %d: %d\n%s", b, code, page)
	}
	code, page = cl.get(fmt.Sprintf("/dead-letters/%d", c))
	if code != 200 || !strings.Contains(page, "the key's later messages will wait behind it") || strings.Contains(page, `id="held"`) {
		t.Fatalf("the page of dead letter %d, which holds its key with nothing behind it yet: %d\n%s", c, code, page)
	}
	// The confirmations of a replay and of a discard say what they do to
	// the messages held behind those that hold their key.
	for _, cf := range []struct{ query, want string }{
		{fmt.Sprintf("action=replay&id=%d&id=%d", a, plain), "1 of them holds its key: it is published first, then the messages held behind it, in order."},
		{fmt.Sprintf("action=discard&id=%d&id=%d&id=%d", a, c, plain), "2 of them hold their key: deleting each lets its key move on, and the messages held behind it go back into the outbox, in order, and are published."},
	} {
		code, page = cl.get("/dead-letters/confirm?" + cf.query)
		if code != 200 || !strings.Contains(page, cf.want) {
			t.Fatalf("the confirmation of %s: %d, want %q\n%s", cf.query, code, cf.want, page)
		}
	}
	if code, page = cl.get(fmt.Sprintf("/dead-letters/confirm?action=replay&id=%d", plain)); code != 200 || strings.Contains(page, "hold") {
		t.Fatalf("the confirmation of a replay of relay:%d, which holds nothing, speaks of held keys: %d\n%s", plain, code, page)
	}

	// The list of dead letters marks those that hold their key, and so
	// does a failure group's list of members.
	var list string
	for path := "/dead-letters"; path != ""; {
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
	for _, id := range []int64{plain, a, b, c} {
		listed := strings.Contains(list, fmt.Sprintf(`>relay:%d</a>`, id))
		marked := strings.Contains(list, fmt.Sprintf(`>relay:%d</a> <span class="note holds"`, id))
		if !listed || marked != (id != plain) {
			t.Fatalf("the list of dead letters lists relay:%d: %v, marks it as holding its key: %v, want %v\n%s", id, listed, marked, id != plain, list)
		}
	}
	code, page = cl.get(fmt.Sprintf("/dead-letters/%d", plain))
	if code != 200 || strings.Contains(page, `id="holds"`) {
		t.Fatalf("the page of dead letter %d, which holds nothing, speaks of held keys: %d\n%s", plain, code, page)
	}

	// The group of why: three members, two of them hold their key, three
	// messages behind them; the group of b's cause: one, one.
	for _, g := range []struct {
		why    string
		want   string
		marked int
	}{
		// A page of 2 members: the first, which holds nothing, and a.
		{why, "2 members, 3 messages held behind them</dd>", 1},
		{"broker says no", "1 member, 1 message held behind them</dd>", 1},
	} {
		grp := groupOf(t, f, failgroup.OfDeadLetter(g.why))
		code, page = cl.get("/failures/" + grp.ID)
		if code != 200 || !strings.Contains(page, `<dd id="holds">`+g.want) || !strings.Contains(page, `id="holds-note"`) ||
			strings.Count(page, `<span class="note holds"`) != g.marked {
			t.Fatalf("failure group %s (%s): %d, want %q\n%s", grp.ID, g.why, code, g.want, page)
		}
	}

	// Replayed, order-1 holds nothing any more: it leaves the list and the
	// counts.
	testenv.Must(t, f.drv.Admin().ReplayDeadLetter(context.Background(), a), "replay")
	rows, _ = keys("/held-keys")
	if got, want := fmt.Sprint(rows), fmt.Sprintf("[[%d payments &lt;img src=x onerror=alert(1)&gt; 1 broker says no] [%d orders order-2 0 %s]]", b, c, why); got != want {
		t.Fatalf("after the replay of %d the held keys are %s, want %s", a, got, want)
	}
	grp := groupOf(t, f, failgroup.OfDeadLetter(why))
	if _, page = cl.get("/failures/" + grp.ID); !strings.Contains(page, `<dd id="holds">1 member, 0 messages held behind them</dd>`) {
		t.Fatalf("after the replay of %d its group's page:\n%s", a, page)
	}
	testenv.Must(t, f.drv.Admin().DiscardDeadLetter(context.Background(), b), "discard")
	testenv.Must(t, f.drv.Admin().DiscardDeadLetter(context.Background(), c), "discard")
	if _, page = cl.get("/held-keys"); !strings.Contains(page, `<p id="none">No key is held.</p>`) {
		t.Fatalf("with no key held the page says:\n%s", page)
	}
	if _, page = cl.get("/"); !strings.Contains(page, `id="held-keys">0<`) || !strings.Contains(page, `id="held">0<`) || strings.Contains(page, "the oldest for") {
		t.Fatalf("with no key held the overview says:\n%s", page)
	}
	if _, page = cl.get("/failures/" + grp.ID); !strings.Contains(page, `<dd id="holds">none</dd>`) || strings.Contains(page, `id="holds-note"`) {
		t.Fatalf("with no key held the group's page says:\n%s", page)
	}
}

// Each tenant's held keys page shows that tenant's held keys, linked to
// its own dead letters, with the nav entry under the tenant's path.
func TestTenantsHeldKeys(t *testing.T) {
	s := newTenantSet(t)
	acme := s.sqlite("acme", "orders")
	s.sqlite("globex", "orders")
	cause := acme.hold(t, "orders", "order-1", "rejected by the broker", 2)
	srv := s.serve(dashboard.TenantsConfig{})
	c := newClient(t, srv.URL)

	code, page := c.get("/t/acme/held-keys")
	link := fmt.Sprintf(`<a href="/t/acme/dead-letters/%d">relay:%d</a>`, cause, cause)
	if code != 200 || !strings.Contains(page, link) || !strings.Contains(page, `<a href="/t/acme/held-keys" class="on">Held keys</a>`) {
		t.Fatalf("acme's held keys: %d, want %s\n%s", code, link, page)
	}
	if code, page = c.get(fmt.Sprintf("/t/acme/dead-letters/%d", cause)); code != 200 || !strings.Contains(page, "2 later messages of the key wait behind it") {
		t.Fatalf("acme's dead letter %d: %d\n%s", cause, code, page)
	}
	if code, page = c.get("/t/globex/held-keys"); code != 200 || !strings.Contains(page, `<p id="none">No key is held.</p>`) {
		t.Fatalf("globex's held keys: %d\n%s", code, page)
	}
}
