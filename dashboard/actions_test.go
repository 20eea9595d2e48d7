package dashboard_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/courier-go/courier/dashboard"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/store"
)

// A replay, discard or cancel request names at most Config.Limit ids (at
// most dashboard.MaxActionIDs): one that names more is refused with 400,
// naming the limit, before any is acted on; one at the limit is served.
func TestActionIDsAreCapped(t *testing.T) {
	f := newFixture(t, []string{"orders", "orders"}, []string{"too big"})
	f.park(t, "billing", "courier.payments", "card declined")
	if _, err := dashboard.New(dashboard.Config{Database: f.drv, Limit: dashboard.MaxActionIDs + 1}); err == nil ||
		!strings.Contains(err.Error(), "Config.Limit") || !strings.Contains(err.Error(), strconv.Itoa(dashboard.MaxActionIDs)) {
		t.Fatalf("a Limit over MaxActionIDs: %v; want an error naming Config.Limit and %d", err, dashboard.MaxActionIDs)
	}
	srv := serve(t, dashboard.Config{Database: f.drv})
	c := newClient(t, srv.URL)
	dead := f.deadLetters(t)
	parked := f.parked(t)
	_, page := c.get(fmt.Sprintf("/dead-letters/confirm?action=discard&id=%d", dead[0].ID))
	csrf := csrfOf(t, page)

	// ids returns n ids, the first being first.
	ids := func(first int64, n int) []string {
		out := []string{strconv.FormatInt(first, 10)}
		for i := 1; i < n; i++ {
			out = append(out, strconv.Itoa(1_000_000+i))
		}
		return out
	}
	for _, path := range []string{"/dead-letters/discard", "/dead-letters/replay", "/parked/discard", "/parked/replay", "/scheduled/cancel"} {
		first := dead[0].ID
		if strings.HasPrefix(path, "/parked") {
			first = parked[0].ID
		}
		code, body := c.post(path, url.Values{"csrf": {csrf}, "id": ids(first, dashboard.MaxActionIDs+1)}, nil)
		if code != http.StatusBadRequest || !strings.Contains(body, fmt.Sprintf("at most %d", dashboard.MaxActionIDs)) {
			t.Errorf("%s with %d ids: %d, want 400 naming the limit\n%.3000s", path, dashboard.MaxActionIDs+1, code, body)
		}
	}
	if d, p := f.deadLetters(t), f.parked(t); len(d) != 2 || len(p) != 1 || p[0].ReplayRequested != nil {
		t.Fatalf("refused requests acted: %d dead letters and %d parked left (replay asked: %v), want 2 and 1 untouched", len(d), len(p), p[0].ReplayRequested)
	}
	code, body := c.post("/dead-letters/discard", url.Values{"csrf": {csrf}, "id": ids(dead[0].ID, dashboard.MaxActionIDs)}, nil)
	if code != 200 || !strings.Contains(body, fmt.Sprintf("discarded 1; %d no longer existed", dashboard.MaxActionIDs-1)) {
		t.Fatalf("discard of %d ids: %d\n%.3000s", dashboard.MaxActionIDs, code, body)
	}
	code, body = c.get("/parked/confirm?action=replay&id=" + strings.Join(ids(parked[0].ID, dashboard.MaxActionIDs+1), "&id="))
	if code != http.StatusBadRequest || !strings.Contains(body, fmt.Sprintf("at most %d", dashboard.MaxActionIDs)) {
		t.Errorf("confirmation of %d ids: %d, want 400 naming the limit\n%.3000s", dashboard.MaxActionIDs+1, code, body)
	}
}

// parked returns the deliveries parked in the fixture's database.
func (f *fixture) parked(t testing.TB) []store.Parked {
	t.Helper()
	p, err := f.drv.Admin().Parked(context.Background(), "", 1000)
	testenv.Must(t, err, "parked")
	return p
}
