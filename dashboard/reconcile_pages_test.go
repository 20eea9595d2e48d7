package dashboard_test

import (
	"context"
	"database/sql"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/courier-go/courier/dashboard"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/store"
)

var (
	overdueRe = regexp.MustCompile(`<tr><td>order</td><td>(o-\d+)</td>`)
	staleRe   = regexp.MustCompile(`<td><code>(key-\d+)</code></td>`)
	prevRe    = regexp.MustCompile(`href="([^"]+)" id="prev"`)
	pageNoRe  = regexp.MustCompile(`<span class="note">(page \d+[^<]*)</span>`)
)

// TestReconcilePages checks that the overdue sagas and the stale keys are
// listed a page at a time, oldest first, each once, the sagas' state
// filter kept from page to page.
func TestReconcilePages(t *testing.T) {
	for name, url := range databases {
		t.Run(name, func(t *testing.T) { testReconcilePages(t, url(t)) })
	}
}

func testReconcilePages(t *testing.T, dbURL string) {
	ctx := context.Background()
	f := newFixtureAt(t, dbURL, []string{"orders"}, []string{"too big"})
	drv := f.drv

	// Five sagas past their deadline, o-0 the oldest, every other one
	// awaiting payment; one not due yet.
	now := time.Now().UTC().Truncate(time.Second)
	err := drv.Sagas().InTx(ctx, func(tx *sql.Tx) error {
		for i := range 6 {
			deadline := now.Add(time.Duration(i-5) * time.Hour)
			if i == 5 {
				deadline = now.Add(time.Hour)
			}
			state := "awaiting_payment"
			if i%2 == 1 {
				state = "awaiting_shipment"
			}
			err := drv.Sagas().Create(ctx, tx, store.SagaRecord{Type: "order", ID: fmt.Sprintf("o-%d", i), State: state, Phase: "running",
				Data: []byte("{}"), Deadline: &deadline, Version: 1, CreatedAt: now, UpdatedAt: now})
			if err != nil {
				return err
			}
		}
		return nil
	})
	testenv.Must(t, err, "sagas")
	// Five keys left in flight past their lock, key-0 the oldest; one
	// still locked.
	for i := range 6 {
		lock := time.Duration(i-5) * time.Minute
		if i == 5 {
			lock = time.Hour
		}
		_, _, err := drv.Idempotency().Claim(ctx, store.KeyClaim{Scope: "POST /orders", Key: fmt.Sprintf("key-%d", i), Fingerprint: []byte("f"),
			Owner: uuid.New(), LockFor: lock, Retain: time.Hour})
		testenv.Must(t, err, "claim key")
	}

	srv := serve(t, dashboard.Config{Database: drv, PageSize: 2})
	c := newClient(t, srv.URL)
	// walk follows the next links from path and returns what re finds on
	// each page, checking each page's number and link back.
	walk := func(path string, re *regexp.Regexp, of string) [][]string {
		t.Helper()
		var got [][]string
		prev := ""
		for path != "" {
			code, page := c.get(path)
			if code != 200 {
				t.Fatalf("%s: %d\n%s", path, code, page)
			}
			var rows []string
			for _, m := range re.FindAllStringSubmatch(page, -1) {
				rows = append(rows, m[1])
			}
			got = append(got, rows)
			if m := pageNoRe.FindStringSubmatch(page); m == nil || m[1] != fmt.Sprintf("page %d%s", len(got), of) {
				t.Errorf("%s: page number %v, want page %d%s", path, m, len(got), of)
			}
			if m := prevRe.FindStringSubmatch(page); (m == nil) != (prev == "") || m != nil && unescape(m[1]) != prev {
				t.Errorf("%s: previous page %v, want %q", path, m, prev)
			}
			prev, path = path, ""
			if m := nextPageRe.FindStringSubmatch(page); m != nil {
				path = unescape(m[1])
			}
		}
		return got
	}
	equal := func(what string, got, want [][]string) {
		t.Helper()
		if !slices.EqualFunc(got, want, slices.Equal) {
			t.Errorf("pages of %s: %v, want %v", what, got, want)
		}
	}
	equal("overdue sagas", walk("/sagas", overdueRe, ""), [][]string{{"o-0", "o-1"}, {"o-2", "o-3"}, {"o-4"}})
	equal("overdue sagas awaiting payment", walk("/sagas?state=awaiting_payment", overdueRe, " of 2"), [][]string{{"o-0", "o-2"}, {"o-4"}})
	equal("stale keys", walk("/keys", staleRe, ""), [][]string{{"key-0", "key-1"}, {"key-2", "key-3"}, {"key-4"}})

	// A bad page number is the first page; a page past the end has a link
	// back to the last one.
	for path, want := range map[string]string{
		"/sagas?page=x":                   "o-0",
		"/sagas?page=-3":                  "o-0",
		"/keys?page=99999999999999999999": "key-0",
	} {
		if code, page := c.get(path); code != 200 || !strings.Contains(page, ">"+want+"<") || strings.Contains(page, `id="prev"`) {
			t.Errorf("%s: %d, want the first page\n%s", path, code, page)
		}
	}
	for path, want := range map[string]string{
		"/sagas?page=9":                          "/sagas?page=3",
		"/sagas?state=awaiting_payment&page=9":   "/sagas?page=2&amp;state=awaiting_payment",
		"/sagas?state=awaiting_payment&page=1e9": "", // not a number: the first page
		"/keys?page=4":                           "/keys?page=3",
	} {
		code, page := c.get(path)
		if code != 200 || want != "" && (!strings.Contains(page, `id="none"`) || !strings.Contains(page, `href="`+want+`" id="prev"`)) {
			t.Errorf("%s: %d, want no rows and a link back to %s\n%s", path, code, page, want)
		}
	}
}

func unescape(href string) string { return strings.ReplaceAll(href, "&amp;", "&") }

// endless is a database whose Reconcile finds as many stale keys as it
// is asked for, after the database's own, and notes the Limits asked.
type endless struct {
	store.Database
	mu     sync.Mutex
	limits []int
}

func (e *endless) Operations() store.Operations { return endlessOps{e.Database.Operations(), e} }

type endlessOps struct {
	store.Operations
	e *endless
}

func (o endlessOps) Reconcile(ctx context.Context, opts store.ReconcileOptions) (store.Reconciliation, error) {
	o.e.mu.Lock()
	o.e.limits = append(o.e.limits, opts.Limit)
	o.e.mu.Unlock()
	r, err := o.Operations.Reconcile(ctx, opts)
	for i := len(r.StaleKeys); i < opts.Limit; i++ {
		r.StaleKeys = append(r.StaleKeys, store.StaleKey{Scope: "POST /orders", Key: fmt.Sprintf("key-%d", i), LockedUntil: r.Now})
	}
	return r, err
}

// With more stale keys than the pages read, page N asks Reconcile for N
// pages and one key more, the deepest page says the list goes on, and the
// pages past it show nothing and say why.
func TestReconcilePagesBeyond(t *testing.T) {
	f := newFixture(t, []string{"orders"}, []string{"too big"})
	db := &endless{Database: f.drv}
	srv := serve(t, dashboard.Config{Database: db, PageSize: 300})
	c := newClient(t, srv.URL)
	for _, p := range []struct {
		page, limit int
		first, last string
		next        bool
	}{
		{1, 301, "key-0", "key-299", true},
		{3, 901, "key-600", "key-899", true},
		{4, 1001, "key-900", "key-999", false},
		{5, 1001, "", "", false},
	} {
		path := fmt.Sprintf("/keys?page=%d", p.page)
		code, page := c.get(path)
		if code != 200 {
			t.Fatalf("%s: %d\n%s", path, code, page)
		}
		db.mu.Lock()
		limits := db.limits
		db.limits = nil
		db.mu.Unlock()
		if !slices.Equal(limits, []int{p.limit}) {
			t.Errorf("%s asked Reconcile for %v, want [%d]", path, limits, p.limit)
		}
		rows := staleRe.FindAllStringSubmatch(page, -1)
		if p.first == "" && len(rows) > 0 || p.first != "" && (len(rows) == 0 || rows[0][1] != p.first || rows[len(rows)-1][1] != p.last) {
			t.Errorf("%s lists %d keys, want %s to %s", path, len(rows), p.first, p.last)
		}
		if next := strings.Contains(page, `id="next"`); next != p.next {
			t.Errorf("%s has a next page link: %t, want %t", path, next, p.next)
		}
		if beyond := strings.Contains(page, "pages beyond 4 are not shown"); beyond != (p.page >= 4) {
			t.Errorf("%s says pages beyond 4 are not shown: %t, want %t\n%s", path, beyond, p.page >= 4, page)
		}
	}
}
