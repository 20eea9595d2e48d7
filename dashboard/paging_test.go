package dashboard_test

import (
	"strings"
	"testing"

	"github.com/courier-go/courier/dashboard"
)

// Every paged list takes any page number: a huge one (whose first row's
// index overflows an int), a negative one, zero or none that parses shows
// an empty page or the first, never a failure.
func TestHugeAndNegativePages(t *testing.T) {
	f := newFixture(t, []string{"orders", "payments", "orders"}, tooBig)
	f.park(t, "billing", "courier.payments", "card declined")
	srv := serve(t, dashboard.Config{Database: f.drv, Sagas: f.drv.Sagas(), PageSize: 2})
	c := newClient(t, srv.URL)
	for _, list := range []string{"/failures", "/failures?side=relay", "/sagas", "/sagas?state=running", "/keys"} {
		sep := "?"
		if strings.Contains(list, "?") {
			sep = "&"
		}
		for _, page := range []string{"288230376151711745", "9223372036854775807", "4611686018427387905", "99999999999999999999",
			"-1", "-9223372036854775808", "0", "2", "x"} {
			code, body := c.get(list + sep + "page=" + page)
			if code != 200 || strings.Contains(body, "-92233") || strings.Contains(body, "page=-") {
				t.Errorf("%s page %s: %d\n%s", list, page, code, body)
			}
		}
	}
	for _, list := range []string{"/dead-letters", "/parked", "/held-keys"} {
		for _, after := range []string{"9223372036854775807", "-9223372036854775808", "99999999999999999999", "-1", "x"} {
			if code, body := c.get(list + "?after=" + after); code != 200 {
				t.Errorf("%s after %s: %d\n%s", list, after, code, body)
			}
		}
	}
}
