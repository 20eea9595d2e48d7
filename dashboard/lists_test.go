package dashboard_test

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/courier-go/courier/dashboard"
	"github.com/courier-go/courier/store"
)

// watched is a database whose Admin notes which of its reads the
// dashboard makes, each passed on to the database.
type watched struct {
	store.Database
	mu    sync.Mutex
	reads []string
}

func (w *watched) Admin() store.Admin { return watchedAdmin{w.Database.Admin(), w} }

func (w *watched) note(what string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.reads = append(w.reads, what)
}

// taken returns the reads noted since the last call.
func (w *watched) taken() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	r := w.reads
	w.reads = nil
	return r
}

type watchedAdmin struct {
	store.Admin
	w *watched
}

func (a watchedAdmin) DeadLetters(ctx context.Context, limit int) ([]store.DeadLetter, error) {
	a.w.note(fmt.Sprintf("DeadLetters(%d)", limit))
	return a.Admin.DeadLetters(ctx, limit)
}

func (a watchedAdmin) DeadLetter(ctx context.Context, id int64) (store.DeadLetter, error) {
	a.w.note("DeadLetter")
	return a.Admin.DeadLetter(ctx, id)
}

func (a watchedAdmin) Parked(ctx context.Context, consumer string, limit int) ([]store.Parked, error) {
	a.w.note(fmt.Sprintf("Parked(%d)", limit))
	return a.Admin.Parked(ctx, consumer, limit)
}

func (a watchedAdmin) ParkedMessage(ctx context.Context, id int64) (store.Parked, error) {
	a.w.note("ParkedMessage")
	return a.Admin.ParkedMessage(ctx, id)
}

func (a watchedAdmin) ListDeadLetters(ctx context.Context, q store.ListQuery) ([]store.DeadLetterSummary, error) {
	a.w.note(fmt.Sprintf("ListDeadLetters(%d)", q.Limit))
	return a.Admin.ListDeadLetters(ctx, q)
}

func (a watchedAdmin) ListParked(ctx context.Context, q store.ListQuery) ([]store.ParkedSummary, error) {
	a.w.note(fmt.Sprintf("ListParked(%d)", q.Limit))
	return a.Admin.ListParked(ctx, q)
}

var (
	idRe       = regexp.MustCompile(`name="id" value="(\d+)"`)
	nextPageRe = regexp.MustCompile(`href="([^"]+)" id="next"`)
)

// A list reads summaries, one page of them, and links to the next page; a
// bulk confirmation reads the summaries of what it lists; only the page
// of one dead letter reads the whole row, that one.
func TestListPages(t *testing.T) {
	topics := []string{"orders", "payments", "orders", "orders", "orders", "payments", "orders"}
	f := newFixture(t, topics, []string{"too big"})
	for i := range 5 {
		f.park(t, "billing", "courier.payments", fmt.Sprintf("declined %d", i))
	}
	db := &watched{Database: f.drv}
	srv := serve(t, dashboard.Config{Database: db, PageSize: 2, Limit: 3})
	c := newClient(t, srv.URL)
	var all []int64
	for _, d := range f.deadLetters(t) {
		all = append(all, d.ID)
	}

	// pages follows the next links from path and returns the ids each
	// page lists, checking that it read one page of summaries.
	pages := func(path, list string) [][]string {
		t.Helper()
		var got [][]string
		for path != "" {
			code, page := c.get(path)
			if code != 200 {
				t.Fatalf("%s: %d\n%s", path, code, page)
			}
			if reads := db.taken(); !slices.Equal(reads, []string{list + "(3)"}) {
				t.Errorf("%s read %v, want one page of summaries, %s(3)", path, reads, list)
			}
			var ids []string
			for _, m := range idRe.FindAllStringSubmatch(page, -1) {
				ids = append(ids, m[1])
			}
			got = append(got, ids)
			path = ""
			if m := nextPageRe.FindStringSubmatch(page); m != nil {
				path = strings.ReplaceAll(m[1], "&amp;", "&")
			}
		}
		return got
	}
	str := func(ids ...int64) []string {
		var out []string
		for _, id := range ids {
			out = append(out, fmt.Sprint(id))
		}
		return out
	}
	want := [][]string{str(all[0], all[1]), str(all[2], all[3]), str(all[4], all[5]), str(all[6])}
	if got := pages("/dead-letters", "ListDeadLetters"); !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("pages of dead letters: %v, want %v", got, want)
	}
	want = [][]string{str(all[0], all[2]), str(all[3], all[4]), str(all[6])}
	if got := pages("/dead-letters?topic=orders", "ListDeadLetters"); !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("pages of dead letters of topic orders: %v, want %v", got, want)
	}
	if got := pages("/parked?consumer=billing", "ListParked"); len(got) != 3 || len(got[0]) != 2 || len(got[2]) != 1 {
		t.Errorf("pages of parked messages: %v, want 2, 2 and 1", got)
	}

	// All that match, up to Config.Limit: the confirmation says more match.
	code, page := c.get("/dead-letters/confirm?action=discard&all=1&topic=orders")
	if code != 200 || len(idRe.FindAllString(page, -1)) != 3 || !strings.Contains(page, `id="capped"`) {
		t.Fatalf("bulk confirmation: %d\n%s", code, page)
	}
	if reads := db.taken(); slices.ContainsFunc(reads, func(r string) bool { return !strings.HasPrefix(r, "ListDeadLetters(") }) {
		t.Errorf("the bulk confirmation read %v, want summaries only", reads)
	}
	code, page = c.get(fmt.Sprintf("/dead-letters/confirm?action=replay&id=%d&id=%d&id=999999", all[1], all[5]))
	if code != 200 || len(idRe.FindAllString(page, -1)) != 2 || !strings.Contains(page, "relay:999999") {
		t.Fatalf("confirmation of ids: %d\n%s", code, page)
	}
	if reads := db.taken(); !slices.Equal(reads, []string{"ListDeadLetters(3)"}) {
		t.Errorf("the confirmation of three ids read %v, want their summaries at once", reads)
	}
	if code, _ := c.get(fmt.Sprintf("/dead-letters/confirm?action=replay&id=%d&id=%d&id=%d&id=%d", all[0], all[1], all[2], all[3])); code != 400 {
		t.Errorf("confirmation of more ids than Config.Limit: %d, want 400", code)
	}
	db.taken()

	// One dead letter's page reads that one whole.
	if code, page := c.get(fmt.Sprintf("/dead-letters/%d", all[2])); code != 200 || !strings.Contains(page, `id="history"`) {
		t.Fatalf("dead letter page: %d\n%s", code, page)
	}
	if reads := db.taken(); !slices.Equal(reads, []string{"DeadLetter"}) {
		t.Errorf("the page of one dead letter read %v, want DeadLetter", reads)
	}
}
