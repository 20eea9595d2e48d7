package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alecthomas/kong"

	"github.com/courier-go/courier/failgroup"
	"github.com/courier-go/courier/internal/testenv"
)

// The failures seeded by seedGroups: three relay-side dead letters failing
// alike but for their numbers, one failing otherwise, and the parked
// deliveries of two consumers, one of whose handlers panicked.
var (
	groupRelayErrors = map[int64]string{
		101: "nats: publish order 1001 failed: payload 2048 bytes exceeds 1024",
		102: "nats: publish order 1002 failed: payload 4096 bytes exceeds 1024",
		103: "nats: publish order 77 failed: payload 99999 bytes exceeds 1024",
		104: `webhook: endpoint "https://hooks.example/x" answered Gone`,
	}
	groupParked = []struct{ consumer, subject, msgID, err string }{
		{"billing", "courier.payments", "01939f3a-0000-7000-8000-0000000000b1", "handler panicked at payment.(*Service).charge (charge.go:42): card 4242 declined"},
		{"billing", "courier.payments", "01939f3a-0000-7000-8000-0000000000b2", "handler panicked at payment.(*Service).charge (charge.go:42): card 5555 declined"},
		{"shipping", "courier.shipping", "01939f3a-0000-7000-8000-0000000000c1", "address 17 not found"},
		{"shipping", "courier.shipping", "01939f3a-0000-7000-8000-0000000000c2", "address 99 not found"},
	}
)

// seedGroups writes the failures above and returns the ids the database
// gave the parked deliveries, by message id.
func seedGroups(t *testing.T, d dlqDatabase) map[string]int64 {
	t.Helper()
	for id, msg := range groupRelayErrors {
		_, err := d.db.Exec(fmt.Sprintf(`INSERT INTO courier_outbox_dead_letters
    (id, message_id, topic, ordering_key, type, version, content_type, payload, headers, occurred_at, created_at, attempts, last_error, history, dead_at)
VALUES (%d, '01939f3a-0000-7000-8000-%012d', 'orders', 'order-%d', 'OrderPlaced', 1, 'application/json', '{"order":%d}', NULL, %s, %s, 10, '%s', '[]', %s)`,
			id, id, id, id, d.now, d.now, msg, d.now))
		testenv.Must(t, err, "seed dead letter")
	}
	ids := map[string]int64{}
	for _, p := range groupParked {
		_, err := d.db.Exec(fmt.Sprintf(`INSERT INTO courier_inbox_dead_letters (consumer, message_id, subject, headers, payload, reason, last_error, attempts, parked_at)
VALUES ('%s', '%s', '%s', '{"Nats-Msg-Id":["%s"],"Courier-Type":["T"]}', 'payload %s', 'failed', '%s', 5, %s)`,
			p.consumer, p.msgID, p.subject, p.msgID, p.msgID, p.err, d.now))
		testenv.Must(t, err, "seed parked delivery")
		var id int64
		testenv.Must(t, d.db.QueryRow(`SELECT id FROM courier_inbox_dead_letters WHERE message_id = '`+p.msgID+`'`).Scan(&id), "parked id")
		ids[p.msgID] = id
	}
	return ids
}

// courier dlq groups groups dead letters by cause, and replay, discard
// and export act on one group with --group, on every dialect.
func TestDLQGroups(t *testing.T) {
	for name, open := range dlqDatabases(t) {
		t.Run(name, func(t *testing.T) { testDLQGroups(t, open(t)) })
	}
}

func testDLQGroups(t *testing.T, d dlqDatabase) {
	db := []string{"--database-url", d.url}
	if code, out, errOut := runCLI(t, append([]string{"dlq", "groups"}, db...)...); code != 0 || strings.TrimSpace(out) != "no dead letters" {
		t.Fatalf("dlq groups on no dead letters: %d %q %q", code, out, errOut)
	}
	parkedIDs := seedGroups(t, d)
	relayGroup := failgroup.OfDeadLetter(groupRelayErrors[101]).ID()
	webhookGroup := failgroup.OfDeadLetter(groupRelayErrors[104]).ID()
	panicGroup := failgroup.OfParked("billing", "failed", groupParked[0].err).ID()
	shippingGroup := failgroup.OfParked("shipping", "failed", groupParked[2].err).ID()

	code, out, errOut := runCLI(t, append([]string{"dlq", "groups"}, db...)...)
	if code != 0 {
		t.Fatalf("dlq groups: %d\n%s%s", code, out, errOut)
	}
	for _, want := range []string{
		`(?m)^GROUP +SIDE +COUNT +FIRST +LAST +CLASS +SOURCE +PATTERN$`,
		`(?m)^` + relayGroup + ` +relay +3 +\d{4}-\d\d-\d\d \d\d:\d\d:\d\d +\d{4}-\d\d-\d\d \d\d:\d\d:\d\d +nats +topic orders +nats: publish order # failed: payload # bytes exceeds #$`,
		`(?m)^` + webhookGroup + ` +relay +1 .* topic orders +webhook: endpoint "…" answered Gone$`,
		`(?m)^` + panicGroup + ` +consumer +2 .* failed: panic +billing ← courier\.payments +at payment\.\(\*Service\)\.charge \(charge\.go:42\): card # declined$`,
		`(?m)^` + shippingGroup + ` +consumer +2 .* failed +shipping ← courier\.shipping +address # not found$`,
		`(?m)^8 dead letter\(s\) in 4 group\(s\)`,
	} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("dlq groups lacks %s:\n%s", want, out)
		}
	}

	code, out, _ = runCLI(t, append([]string{"dlq", "groups", "--json"}, db...)...)
	var rep failgroup.Report
	testenv.Must(t, json.Unmarshal([]byte(out), &rep), "groups --json")
	if g, ok := rep.Find(relayGroup); code != 0 || rep.Read != 8 || len(rep.Groups) != 4 || !ok || g.Count != 3 || !slices.Equal(g.IDs, []int64{101, 102, 103}) {
		t.Fatalf("dlq groups --json: %d %+v", code, rep)
	}
	if g, _ := rep.Find(panicGroup); g.Site != "payment.(*Service).charge (charge.go:42)" || !slices.Equal(g.Consumers, []string{"billing"}) {
		t.Errorf("panic group: %+v", g)
	}
	code, out, _ = runCLI(t, append([]string{"dlq", "groups", "--json", "--side", "consumer", "--consumer", "shipping"}, db...)...)
	testenv.Must(t, json.Unmarshal([]byte(out), &rep), "groups --json --consumer")
	if code != 0 || len(rep.Groups) != 1 || rep.Groups[0].ID != shippingGroup {
		t.Errorf("dlq groups --consumer shipping: %d %+v", code, rep)
	}
	code, out, _ = runCLI(t, append([]string{"dlq", "groups", "--max", "2", "--side", "relay"}, db...)...)
	if code != 0 || !strings.Contains(out, "only the first 2 of each were grouped (--max)") {
		t.Errorf("dlq groups --max 2: %d\n%s", code, out)
	}

	testGroupErrors(t, d, relayGroup)
	testGroupExport(t, d, relayGroup, panicGroup, parkedIDs)

	// Replay: the group's relay letters go back into the outbox, the
	// others stay.
	code, out, errOut = runCLI(t, append([]string{"dlq", "replay", "--group", relayGroup, "--dry-run"}, db...)...)
	if code != 0 || !strings.Contains(out, "would replay relay:101") || !strings.Contains(out, "relay:103") || strings.Contains(out, "relay:104") ||
		!strings.Contains(out, "3 dead letter(s) would be replayed (--dry-run: nothing changed)") || d.count(t, "courier_outbox") != 0 {
		t.Fatalf("replay --group --dry-run: %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = runCLI(t, append([]string{"dlq", "replay", "--group", relayGroup}, db...)...)
	if code != 0 || !strings.Contains(out, "3 dead letter(s) replayed") {
		t.Fatalf("replay --group: %d\n%s%s", code, out, errOut)
	}
	if got := d.ids(t, "courier_outbox"); !slices.Equal(got, []int64{101, 102, 103}) {
		t.Errorf("outbox after replay --group holds %v, want 101 102 103", got)
	}
	if got := d.ids(t, "courier_outbox_dead_letters"); !slices.Equal(got, []int64{104}) {
		t.Errorf("relay dead letters after replay --group: %v, want 104", got)
	}

	// Consumer side: the panicking consumer's letters are asked to
	// replay, and those of the other consumer are not; --wait follows
	// them as it follows any selection (no consumer runs here).
	code, out, errOut = runCLI(t, append([]string{"dlq", "replay", "--group", panicGroup, "--wait", "300ms"}, db...)...)
	if code != 1 || strings.Count(out, "not applied after 300ms: is consumer billing running?") != 2 {
		t.Fatalf("replay --group --wait: %d\n%s%s", code, out, errOut)
	}
	for _, p := range groupParked {
		var asked bool
		q := fmt.Sprintf(`SELECT replay_requested IS NOT NULL FROM courier_inbox_dead_letters WHERE id = %d`, parkedIDs[p.msgID])
		testenv.Must(t, d.db.QueryRow(q).Scan(&asked), "replay flag")
		if asked != (p.consumer == "billing") {
			t.Errorf("consumer %s, %s: replay requested %v after replay --group of billing's panics", p.consumer, p.msgID, asked)
		}
	}

	// Discard: the group's letters only.
	code, out, errOut = runCLI(t, append([]string{"dlq", "discard", "--group", shippingGroup}, db...)...)
	if code != 0 || !strings.Contains(out, "2 dead letter(s) discarded") {
		t.Fatalf("discard --group: %d\n%s%s", code, out, errOut)
	}
	want := []int64{parkedIDs[groupParked[0].msgID], parkedIDs[groupParked[1].msgID]}
	slices.Sort(want)
	if got := d.ids(t, "courier_inbox_dead_letters"); !slices.Equal(got, want) {
		t.Errorf("parked after discard --group: %v, want billing's %v", got, want)
	}
	if got := d.ids(t, "courier_outbox_dead_letters"); !slices.Equal(got, []int64{104}) {
		t.Errorf("discard --group touched the relay side: %v", got)
	}
}

// testGroupErrors checks what --group refuses, before and after reading.
func testGroupErrors(t *testing.T, d dlqDatabase, relayGroup string) {
	db := []string{"--database-url", d.url}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"dlq", "replay", "--group", "ABCDEF123456"}, `--group is "ABCDEF123456": a group id is 12 lowercase hexadecimal digits`},
		{[]string{"dlq", "export", "--group", "abc"}, `--group is "abc"`},
		{[]string{"dlq", "discard", "--group", "000000000000"}, "no group 000000000000 among 4 groups: courier dlq groups lists them"},
		{[]string{"dlq", "export", "--group", relayGroup, "--side", "consumer"}, "no group " + relayGroup + " among 2 groups: courier dlq groups lists them (with the same --topic"},
		{[]string{"dlq", "replay", "--group", relayGroup, "relay:101"}, "give dead letters to replay (relay:ID, consumer:ID) or select a group with --group, not both"},
		{[]string{"dlq", "discard", "--group", relayGroup, "--all"}, "--group and --all do not go together"},
		{[]string{"dlq", "export"}, "which dead letters?"},
	} {
		code, out, errOut := runCLI(t, append(c.args, db...)...)
		if code != 1 || !strings.Contains(errOut, c.want) || out != "" {
			t.Errorf("courier %s: %d %q %q, want exit 1 and %q", strings.Join(c.args, " "), code, out, errOut, c.want)
		}
	}
	if n := d.count(t, "courier_outbox_dead_letters"); n != 4 {
		t.Fatalf("a refused command changed the dead letters: %d left", n)
	}
}

// exportLine is a line of courier dlq export, both sides' fields.
type exportLine struct {
	Ref       string `json:"ref"`
	Side      string `json:"side"`
	ID        int64  `json:"id"`
	MessageID string `json:"message_id"`
	Topic     string `json:"topic"`
	Consumer  string `json:"consumer"`
	Payload   []byte `json:"payload"`
	LastError string `json:"last_error"`
	Error     string `json:"error"`
}

func decodeExport(t *testing.T, r io.Reader) []exportLine {
	t.Helper()
	var lines []exportLine
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		var l exportLine
		testenv.Must(t, json.Unmarshal(sc.Bytes(), &l), "decode export line "+sc.Text())
		lines = append(lines, l)
	}
	testenv.Must(t, sc.Err(), "read export")
	return lines
}

// testGroupExport exports a group to stdout and another to a file, and
// checks that an existing file is refused and left as it was.
func testGroupExport(t *testing.T, d dlqDatabase, relayGroup, panicGroup string, parkedIDs map[string]int64) {
	db := []string{"--database-url", d.url}
	code, out, errOut := runCLI(t, append([]string{"dlq", "export", "--group", relayGroup}, db...)...)
	if code != 0 {
		t.Fatalf("export --group: %d %s", code, errOut)
	}
	lines := decodeExport(t, strings.NewReader(out))
	var refs []string
	for _, l := range lines {
		refs = append(refs, l.Ref)
		if l.Side != "relay" || l.Ref != fmt.Sprintf("relay:%d", l.ID) || l.Topic != "orders" || l.LastError != groupRelayErrors[l.ID] ||
			string(l.Payload) != fmt.Sprintf(`{"order":%d}`, l.ID) || l.MessageID != fmt.Sprintf("01939f3a-0000-7000-8000-%012d", l.ID) {
			t.Errorf("export line %+v is not dead letter %d as stored", l, l.ID)
		}
	}
	if !slices.Equal(refs, []string{"relay:101", "relay:102", "relay:103"}) {
		t.Errorf("export --group wrote %v, want the group's 3 members", refs)
	}
	if !strings.Contains(out, `"payload":"eyJvcmRlciI6MTAxfQ=="`) {
		t.Errorf("export does not hold the payload in base64:\n%s", out)
	}

	path := filepath.Join(t.TempDir(), "billing.jsonl")
	code, out, errOut = runCLI(t, append([]string{"dlq", "export", "--group", panicGroup, "--out", path}, db...)...)
	if code != 0 || out != "" || !strings.Contains(errOut, "2 dead letter(s) written to "+path) {
		t.Fatalf("export --out: %d %q %q", code, out, errOut)
	}
	f, err := os.Open(path)
	testenv.Must(t, err, "open export")
	defer f.Close()
	st, err := f.Stat()
	testenv.Must(t, err, "stat export")
	if st.Mode().Perm() != 0o600 {
		t.Errorf("export file mode %v, want 0600", st.Mode().Perm())
	}
	lines = decodeExport(t, f)
	if len(lines) != 2 {
		t.Fatalf("export --out wrote %d lines, want 2", len(lines))
	}
	for i, l := range lines {
		p := groupParked[i]
		if l.Side != "consumer" || l.Ref != fmt.Sprintf("consumer:%d", parkedIDs[p.msgID]) || l.Consumer != "billing" || l.Error != p.err ||
			l.MessageID != p.msgID || string(l.Payload) != "payload "+p.msgID {
			t.Errorf("export line %d: %+v, want parked %s as stored", i, l, p.msgID)
		}
	}

	// An existing file is never overwritten, nor changed.
	code, _, errOut = runCLI(t, append([]string{"dlq", "export", "--group", panicGroup, "--out", path}, db...)...)
	if code != 1 || !strings.Contains(errOut, "--out "+path+" exists") || !strings.Contains(errOut, "choose another path") {
		t.Errorf("export --out onto an existing file: %d %q", code, errOut)
	}
	other := filepath.Join(t.TempDir(), "mine.txt")
	testenv.Must(t, os.WriteFile(other, []byte("keep me\n"), 0o644), "write file")
	code, _, errOut = runCLI(t, append([]string{"dlq", "export", "--all", "--out", other}, db...)...)
	if b, _ := os.ReadFile(other); code != 1 || !strings.Contains(errOut, "--out") || string(b) != "keep me\n" {
		t.Errorf("export --out onto someone's file: %d %q; file now %q", code, errOut, b)
	}
	if n := d.count(t, "courier_outbox_dead_letters") + d.count(t, "courier_inbox_dead_letters"); n != 8 {
		t.Errorf("export changed the dead letters: %d left, want 8", n)
	}
}

func (d dlqDatabase) count(t *testing.T, table string) (n int) {
	t.Helper()
	testenv.Must(t, d.db.QueryRow("SELECT count(*) FROM "+table).Scan(&n), "count "+table)
	return n
}

func (d dlqDatabase) ids(t *testing.T, table string) []int64 {
	t.Helper()
	rows, err := d.db.Query("SELECT id FROM " + table + " ORDER BY id")
	testenv.Must(t, err, "ids of "+table)
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		testenv.Must(t, rows.Scan(&id), "scan id")
		ids = append(ids, id)
	}
	testenv.Must(t, rows.Err(), "ids of "+table)
	return ids
}

// What dlq groups and dlq export print of a stored error reaches the
// terminal escaped, and the export decodes to the error as stored.
func TestDLQGroupsEscape(t *testing.T) {
	d := dlqDatabases(t)["sqlite"](t)
	now := time.Now().UnixMicro()
	_, err := d.db.Exec(`INSERT INTO courier_outbox_dead_letters (id, message_id, topic, ordering_key, type, version, content_type, payload, headers, occurred_at, created_at, attempts, last_error, history, dead_at)
VALUES (41, ?, ?, 'k', 'T', 1, 'text/plain', ?, NULL, ?, ?, 10, ?, '[]', ?)`,
		"01939f3a-0000-7000-8000-000000000001", "orders"+hostile, []byte("payload "+hostile), now, now, "HTTP 500: "+hostile, now)
	testenv.Must(t, err, "seed dead letter")
	_, err = d.db.Exec(`INSERT INTO courier_inbox_dead_letters (consumer, message_id, subject, headers, payload, reason, last_error, attempts, parked_at)
VALUES (?, 'mid', ?, '{}', 'x', 'failed', ?, 5, ?)`, "billing"+hostile, "courier.payments"+hostile, "handler panicked at x"+hostile+" (a.go:1): "+hostile, now)
	testenv.Must(t, err, "seed parked delivery")
	db := []string{"--database-url", d.url}
	group := failgroup.OfDeadLetter("HTTP 500: " + hostile).ID()
	for _, args := range [][]string{
		{"dlq", "groups"},
		{"dlq", "groups", "--json"},
		{"dlq", "export", "--all"},
		{"dlq", "replay", "--group", group, "--dry-run"},
	} {
		code, out, errOut := runCLI(t, append(args, db...)...)
		if code != 0 {
			t.Errorf("courier %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
			continue
		}
		if r, ok := unsafeRune(out + errOut); ok {
			t.Errorf("courier %s printed %U raw:\n%q", strings.Join(args, " "), r, out)
		}
		if !strings.Contains(out, `\u202e`) {
			t.Errorf("courier %s does not show the stored text, escaped:\n%s", strings.Join(args, " "), out)
		}
	}
	_, out, _ := runCLI(t, append([]string{"dlq", "export", "--group", group}, db...)...)
	lines := decodeExport(t, strings.NewReader(out))
	if len(lines) != 1 || lines[0].LastError != "HTTP 500: "+hostile || string(lines[0].Payload) != "payload "+hostile {
		t.Errorf("export decodes to %+v; want the stored error and payload as they are", lines)
	}
}

// --max defaults to failgroup.DefaultMax (a tag cannot name the constant).
func TestDLQGroupsMaxDefault(t *testing.T) {
	var c cli
	parser, err := kong.New(&c, kong.Name("courier"), kong.Writers(io.Discard, io.Discard), helpVars())
	testenv.Must(t, err, "parser")
	_, err = parser.Parse([]string{"dlq", "groups"})
	testenv.Must(t, err, "parse")
	if c.DLQ.Groups.Max != failgroup.DefaultMax {
		t.Fatalf("dlq groups --max defaults to %d, want failgroup.DefaultMax (%d)", c.DLQ.Groups.Max, failgroup.DefaultMax)
	}
}
