package dashboard_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/courier-go/courier/dashboard"
	"github.com/courier-go/courier/failgroup"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/store"
)

// The errors the failure tests' dead letters fail with: three alike but
// for their numbers, and one other.
var tooBig = []string{
	`subject "courier.orders": nats: maximum payload exceeded: the message's payload is 2000000 bytes`,
	`subject "courier.orders": nats: maximum payload exceeded: the message's payload is 3000000 bytes`,
	"schema rejected",
	`subject "courier.refunds": nats: maximum payload exceeded: the message's payload is 1500000 bytes`,
}

// groupOf returns the failure group of the database that has cause's
// fingerprint.
func groupOf(t *testing.T, f *fixture, c failgroup.Cause) failgroup.Group {
	t.Helper()
	rep, err := failgroup.Collect(context.Background(), f.drv.Admin(), failgroup.Options{})
	testenv.Must(t, err, "collect")
	g, ok := rep.Find(c.ID())
	if !ok {
		t.Fatalf("no group %s among %+v", c.ID(), rep.Groups)
	}
	return g
}

var groupRowRe = regexp.MustCompile(`(?s)<tr data-group="([0-9a-f]{12})">.*?<td class="num count">(\d+)</td>`)

// groupsOf returns the counts of the groups a failures page lists, by id.
func groupsOf(page string) map[string]string {
	out := map[string]string{}
	for _, m := range groupRowRe.FindAllStringSubmatch(page, -1) {
		out[m[1]] = m[2]
	}
	return out
}

func TestFailureGroupsOverHTTP(t *testing.T) {
	for name, url := range databases {
		t.Run(name, func(t *testing.T) { testFailureGroupsOverHTTP(t, url(t)) })
	}
}

func testFailureGroupsOverHTTP(t *testing.T, dbURL string) {
	f := newFixtureAt(t, dbURL, []string{"orders", "orders", "orders", "refunds"}, tooBig)
	panic1 := "handler panicked at payment.(*Service).charge (charge.go:42): card 4242 declined"
	f.park(t, "billing", "courier.payments", panic1)
	f.park(t, "billing", "courier.payments", "handler panicked at payment.(*Service).charge (charge.go:42): card 5555 declined")
	f.park(t, "billing", "courier.payments", "ledger unavailable \x1b[31m<script>alert(1)</script>")
	srv := serve(t, dashboard.Config{Database: f.drv, PageSize: 2})
	c := newClient(t, srv.URL)

	big := groupOf(t, f, failgroup.OfDeadLetter(tooBig[0]))
	panics := groupOf(t, f, failgroup.OfParked("billing", store.ReasonFailed, panic1))
	if big.Count != 3 || panics.Count != 2 {
		t.Fatalf("groups: %d payloads too large, %d panics; want 3 and 2", big.Count, panics.Count)
	}

	// The list, two groups a page, the largest first.
	code, page := c.get("/failures")
	if code != 200 || !slices.Equal(mapsKeys(groupsOf(page)), sortedOf(big.ID, panics.ID)) || groupsOf(page)[big.ID] != "3" || !strings.Contains(page, `id="next"`) {
		t.Fatalf("failures page 1 (%d): groups %v, want %s (3) and %s (2) and a next page:\n%s", code, groupsOf(page), big.ID, panics.ID, page)
	}
	code, page = c.get("/failures?page=2")
	if code != 200 || len(groupsOf(page)) != 2 || !strings.Contains(page, `id="prev"`) || strings.Contains(page, `id="next"`) {
		t.Fatalf("failures page 2 (%d): groups %v, want the 2 others:\n%s", code, groupsOf(page), page)
	}
	if strings.Contains(page, "<script>alert") || !strings.Contains(page, "ledger unavailable \ufffd[#&lt;script&gt;") {
		t.Fatalf("a hostile error reached the page unescaped:\n%s", page)
	}
	if _, page = c.get("/failures?side=consumer&consumer=billing"); len(groupsOf(page)) != 2 {
		t.Fatalf("billing's groups: %v, want 2", groupsOf(page))
	}

	// A group's page, then its replay through the confirmation.
	code, page = c.get("/failures/" + panics.ID)
	if code != 200 || !strings.Contains(page, `<code id="site">payment.(*Service).charge (charge.go:42)</code>`) || !strings.Contains(page, `id="count">2<`) {
		t.Fatalf("group page (%d):\n%s", code, page)
	}
	code, page = c.get("/parked/confirm?action=replay&group=" + panics.ID)
	if code != 200 || strings.Count(page, `name="id"`) != 2 || !strings.Contains(page, `name="group" value="`+panics.ID+`"`) {
		t.Fatalf("confirmation of the group's replay (%d):\n%s", code, page)
	}
	if code, _ := c.get("/dead-letters/confirm?action=replay&group=" + panics.ID); code != 404 {
		t.Fatalf("a consumer group confirmed on the relay side: %d, want 404", code)
	}
	form := url.Values{"csrf": {csrfOf(t, page)}, "group": {panics.ID}, "id": idsOf(panics.IDs)}
	code, page = c.post("/parked/replay", form, nil)
	if code != 200 || !strings.Contains(page, "replayed 2") {
		t.Fatalf("replay of the group (%d):\n%s", code, page)
	}
	ps, err := f.drv.Admin().Parked(context.Background(), "", 10)
	testenv.Must(t, err, "parked")
	for _, p := range ps {
		if asked := p.ReplayRequested != nil; asked != slices.Contains(panics.IDs, p.ID) {
			t.Fatalf("parked %d (%s): replay asked %v", p.ID, p.Error, asked)
		}
	}
	if _, page = c.get("/failures/" + panics.ID); !strings.Contains(page, "2 wait for their consumer") {
		t.Fatalf("the group after its replay does not say it waits:\n%s", page)
	}
	// The consumer replays them, and one fails again: the group says so.
	cs := f.drv.ConsumerStore()
	testenv.Must(t, cs.Unpark(context.Background(), panics.IDs[0]), "unpark")
	testenv.Must(t, cs.ReplayFailed(context.Background(), panics.IDs[1], "handler panicked at payment.(*Service).charge (charge.go:42): card 6666 declined"), "replay failed")
	if _, page = c.get("/failures/" + panics.ID); !regexp.MustCompile(`1 of the 2 failures replayed from this dashboard at [0-9: -]+ UTC failed again`).MatchString(page) {
		t.Fatalf("the group's page does not say it failed again:\n%s", page)
	}
	if _, page = c.get("/failures?side=consumer"); !regexp.MustCompile(`1 of the 2 replayed at [0-9: -]+ failed again`).MatchString(page) {
		t.Fatalf("the failures page does not say the group failed again:\n%s", page)
	}

	// Export the payloads too large, then replay them: they are back in
	// the outbox, the other dead letter is not, and the gone group says
	// none failed again.
	code, body := c.get("/failures/" + big.ID + "/export")
	var refs []string
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		var line struct {
			Ref        string            `json:"ref"`
			DeadLetter *store.DeadLetter `json:"dead_letter"`
		}
		testenv.Must(t, json.Unmarshal(sc.Bytes(), &line), "decode an exported line")
		if line.DeadLetter == nil || string(line.DeadLetter.Payload) == "" || !strings.Contains(line.DeadLetter.LastError, "maximum payload exceeded") {
			t.Fatalf("exported line %s", sc.Text())
		}
		refs = append(refs, line.Ref)
	}
	if code != 200 || len(refs) != 3 {
		t.Fatalf("export (%d): %v, want the group's 3 dead letters", code, refs)
	}
	_, page = c.get("/dead-letters/confirm?action=replay&group=" + big.ID)
	code, page = c.post("/dead-letters/replay", url.Values{"csrf": {csrfOf(t, page)}, "group": {big.ID}, "id": idsOf(big.IDs)}, nil)
	if code != 200 || !strings.Contains(page, "replayed 3") {
		t.Fatalf("replay of the relay group (%d):\n%s", code, page)
	}
	for _, d := range f.deadLetters(t) {
		if slices.Contains(big.IDs, d.ID) || d.LastError != "schema rejected" {
			t.Fatalf("dead letter %d (%s) is left", d.ID, d.LastError)
		}
	}
	if !regexp.MustCompile(`(?s)id="gone".*data-group="` + big.ID + `".*none has failed again`).MatchString(page) {
		t.Fatalf("the replayed group is not shown as gone:\n%s", page)
	}
	if code, page := c.get("/failures/" + big.ID); code != 404 || !strings.Contains(page, "none has failed again") {
		t.Fatalf("the gone group's page (%d):\n%s", code, page)
	}
	if code, _ := c.get("/failures/000000000000/export"); code != 404 {
		t.Fatalf("export of an unknown group: %d, want 404", code)
	}
}

// sidePath is the path of the pages of a failure group's side.
func sidePath(side string) string {
	if side == failgroup.Relay {
		return "dead-letters"
	}
	return "parked"
}

func idsOf(ids []int64) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = strconv.FormatInt(id, 10)
	}
	return out
}

func mapsKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func sortedOf(s ...string) []string {
	slices.Sort(s)
	return s
}
