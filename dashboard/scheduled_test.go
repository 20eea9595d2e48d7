package dashboard_test

import (
	"context"
	"database/sql"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/dashboard"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/store"
)

var scheduledIDRe = regexp.MustCompile(`name="id" value="([0-9a-f-]{36})"`)

// The dashboard shows the scheduled messages that wait, on the overview
// and a page of their own (filtered, a page at a time), and cancels the
// ones chosen behind a confirmation and the form's CSRF token; every
// dialect.
func TestScheduledOverHTTP(t *testing.T) {
	for name, dbURL := range databases {
		t.Run(name, func(t *testing.T) {
			f := newFixtureAt(t, dbURL(t), []string{"orders"}, []string{"x"})
			ctx := context.Background()
			w := outbox.New(f.drv.Inserter(), outbox.Config{})
			var msgs []courier.Message
			for i, topic := range []string{"reminders", "reminders", "payments"} {
				m := courier.NewMessage(topic, "order-1", "Reminder", []byte("{}"))
				testenv.Must(t, f.drv.InTx(ctx, func(tx *sql.Tx) error {
					return w.Schedule(ctx, tx, outbox.After(time.Duration(i+1)*time.Hour), m)
				}), "schedule")
				msgs = append(msgs, m)
			}
			srv := serve(t, dashboard.Config{Database: f.drv, PageSize: 2})
			c := newClient(t, srv.URL)
			code, page := c.get("/")
			if code != 200 || !strings.Contains(page, `id="scheduled">3<`) || !strings.Contains(page, "next due") {
				t.Fatalf("overview: %d\n%s", code, page)
			}
			code, page = c.get("/scheduled")
			ids := scheduledIDRe.FindAllStringSubmatch(page, -1)
			if code != 200 || len(ids) != 2 || ids[0][1] != msgs[0].ID.String() || !strings.Contains(page, `id="next"`) {
				t.Fatalf("the first page: %d, ids %v\n%s", code, ids, page)
			}
			next := nextPageRe.FindStringSubmatch(page)[1]
			code, page = c.get(strings.ReplaceAll(next, "&amp;", "&"))
			if ids := scheduledIDRe.FindAllStringSubmatch(page, -1); code != 200 || len(ids) != 1 || ids[0][1] != msgs[2].ID.String() {
				t.Fatalf("the second page: %d, ids %v\n%s", code, ids, page)
			}
			code, page = c.get("/scheduled?topic=payments")
			if ids := scheduledIDRe.FindAllStringSubmatch(page, -1); code != 200 || len(ids) != 1 || ids[0][1] != msgs[2].ID.String() {
				t.Fatalf("topic payments: %d, ids %v", code, ids)
			}

			code, page = c.get("/scheduled/confirm?id=" + msgs[0].ID.String() + "&id=" + msgs[1].ID.String())
			if code != 200 || !strings.Contains(page, "Cancel 2") {
				t.Fatalf("confirmation: %d\n%s", code, page)
			}
			waiting := func() int {
				got, err := f.drv.Admin().ListScheduled(ctx, store.ScheduleFilter{})
				testenv.Must(t, err, "list")
				return len(got)
			}
			if waiting() != 3 {
				t.Fatal("the confirmation page cancelled something")
			}
			form := url.Values{"id": {msgs[0].ID.String(), msgs[1].ID.String()}, "back": {"/scheduled?topic=reminders"}}
			if code, _ := c.post("/scheduled/cancel", form, nil); code != http.StatusForbidden || waiting() != 3 {
				t.Fatalf("a cancel without the CSRF token: %d, %d waiting; want 403 and nothing cancelled", code, waiting())
			}
			form.Set("csrf", csrfOf(t, page))
			code, page = c.post("/scheduled/cancel", form, map[string]string{"Sec-Fetch-Site": "same-origin"})
			if code != 200 || !strings.Contains(page, "cancelled 2") || waiting() != 1 {
				t.Fatalf("cancel: %d, %d waiting\n%s", code, waiting(), page)
			}
			code, page = c.post("/scheduled/cancel", form, map[string]string{"Sec-Fetch-Site": "same-origin"})
			if code != 200 || !strings.Contains(page, "cancelled 0; 2 no longer waited") {
				t.Fatalf("cancel again: %d\n%s", code, page)
			}
			if code, _ := c.get("/scheduled/confirm?id=not-an-id"); code != http.StatusBadRequest {
				t.Fatalf("a confirmation of a bad id: %d, want 400", code)
			}
		})
	}
}
