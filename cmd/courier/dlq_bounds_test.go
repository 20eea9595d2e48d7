package main

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/dburl"
)

// courier dlq list reads summaries: a parked delivery with a 1 MiB
// payload, a 1 MiB header and a 1 MiB error lists in a few hundred bytes,
// with the type its headers name, on every dialect.
func TestDLQListReadsSummaries(t *testing.T) {
	for name, open := range dlqDatabases(t) {
		t.Run(name, func(t *testing.T) {
			d := open(t)
			ctx := context.Background()
			drv, err := dburl.Open(ctx, d.url, dburl.Options{})
			testenv.Must(t, err, "open")
			defer drv.Close()
			bulk := strings.Repeat("x", 1<<20)
			err = drv.ConsumerStore().Park(ctx, store.Parked{Consumer: "billing", MessageID: "01939f3a-0000-7000-8000-000000000002",
				Subject: "courier.payments", Headers: map[string][]string{"Courier-Type": {"ChargeRequested"}, "X-Bulk": {bulk}},
				Payload: []byte(bulk), Reason: store.ReasonFailed, Error: "card declined: " + bulk, Attempts: 5, ParkedAt: time.Now()})
			testenv.Must(t, err, "park")

			code, out, errOut := runCLI(t, "dlq", "list", "--json", "--database-url", d.url)
			var listed struct {
				Consumer []map[string]any `json:"consumer"`
			}
			if code != 0 || json.Unmarshal([]byte(out), &listed) != nil || len(listed.Consumer) != 1 {
				t.Fatalf("dlq list --json: %d %s\n%.2000s", code, errOut, out)
			}
			p := listed.Consumer[0]
			if len(out) > 2*store.ErrorPreview+1000 || p["type"] != "ChargeRequested" || p["payload"] != nil || p["headers"] != nil ||
				p["payload_size"] != float64(1<<20) {
				t.Errorf("dlq list --json printed %d bytes: type %v, payload %.20v, headers %.40v, payload_size %v; want a summary of a few hundred bytes, type ChargeRequested, no payload nor headers, the payload's size",
					len(out), p["type"], p["payload"], p["headers"], p["payload_size"])
			}
			code, out, _ = runCLI(t, "dlq", "list", "--database-url", d.url)
			if code != 0 || len(out) > 1000 || !strings.Contains(out, "ChargeRequested") {
				t.Errorf("dlq list: %d, %d bytes, want one short line with the type:\n%.2000s", code, len(out), out)
			}
		})
	}
}

// payloadCut is the line of courier dlq show that says how much of a
// payload it left out.
var payloadCut = regexp.MustCompile(`\(payload cut: the first (\d+) of its (\d+) bytes are shown, (\d+) left out; --full prints it whole`)

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

// courier dlq show prints the first 4 KiB of a payload, of a header and of
// an error, and a line that says how much it left out and how to see it;
// --full prints them whole. Either way what reaches the terminal is
// escaped.
func TestDLQShowCutsPayloads(t *testing.T) {
	d := dlqDatabases(t)["sqlite"](t)
	ctx := context.Background()
	drv, err := dburl.Open(ctx, d.url, dburl.Options{})
	testenv.Must(t, err, "open")
	defer drv.Close()
	const mib = 1 << 20
	text := hostile + strings.Repeat("é", mib/2)              // printable but for the escapes: shown as text
	binary := append([]byte{0, 1, 2}, make([]byte, mib-3)...) // shown in base64
	header := hostile + strings.Repeat("h", mib)              // a header value
	for i, payload := range [][]byte{[]byte(text), binary} {
		err = drv.ConsumerStore().Park(ctx, store.Parked{Consumer: "billing", MessageID: fmt.Sprintf("01939f3a-0000-7000-8000-00000000000%d", i),
			Subject: "courier.payments", Headers: map[string][]string{"Courier-Type": {"ChargeRequested"}, "X-Bulk": {header}},
			Payload: payload, Reason: store.ReasonFailed, Error: "card declined: " + header, Attempts: 5, ParkedAt: time.Now()})
		testenv.Must(t, err, "park")
	}
	for i, ref := range []string{"consumer:1", "consumer:2"} {
		code, out, errOut := runCLI(t, "dlq", "show", ref, "--database-url", d.url)
		if code != 0 || len(out) > 64<<10 {
			t.Fatalf("dlq show %s: exit %d, %d bytes, want a few KiB\n%.3000s%s", ref, code, len(out), out, errOut)
		}
		payloadLen := []int{len(text), len(binary)}[i]
		m := payloadCut.FindStringSubmatch(out)
		if m == nil || m[2] != fmt.Sprint(payloadLen) || atoi(m[1]) > 4096 || atoi(m[1]) < 4090 || atoi(m[1])+atoi(m[3]) != payloadLen ||
			strings.Count(out, "more bytes: --full prints them)") != 2 {
			t.Errorf("dlq show %s does not say what it left out of its %d-byte payload (%q), its error and its header:\n%.300s\n…\n%.3000s",
				ref, payloadLen, m, out, out[max(0, len(out)-3000):])
		}
		if r, ok := unsafeRune(out); ok {
			t.Errorf("dlq show %s printed %U raw", ref, r)
		}
		code, out, _ = runCLI(t, "dlq", "show", ref, "--full", "--database-url", d.url)
		if code != 0 || len(out) < 2*mib || strings.Contains(out, "--full") {
			t.Errorf("dlq show %s --full: exit %d, %d bytes, want the payload, header and error whole (%d bytes each at least)", ref, code, len(out), mib)
		}
		if r, ok := unsafeRune(out); ok {
			t.Errorf("dlq show %s --full printed %U raw", ref, r)
		}
	}
}

// Replay, discard and export select with the database's filters, the
// dashboard's (store.ListQuery): --limit counts the letters the filters
// select, and --error ignores case. A letter is read whole only to be
// exported or repaired.
func TestDLQSelectionIsTheStores(t *testing.T) {
	d := dlqDatabases(t)["sqlite"](t)
	ctx := context.Background()
	drv, err := dburl.Open(ctx, d.url, dburl.Options{})
	testenv.Must(t, err, "open")
	defer drv.Close()
	for i, why := range []string{"ledger unavailable", "ledger unavailable", "Card DECLINED"} {
		err = drv.ConsumerStore().Park(ctx, store.Parked{Consumer: "billing", MessageID: fmt.Sprintf("01939f3a-0000-7000-8000-00000000000%d", i),
			Subject: "courier.payments", Headers: map[string][]string{"Courier-Type": {"ChargeRequested"}}, Payload: []byte("x"),
			Reason: store.ReasonFailed, Error: why, Attempts: 5, ParkedAt: time.Now()})
		testenv.Must(t, err, "park")
	}
	db := []string{"--database-url", d.url}
	code, out, errOut := runCLI(t, append([]string{"dlq", "discard", "--error", "card declined", "--limit", "1", "--dry-run"}, db...)...)
	if code != 0 || !regexp.MustCompile(`would discard consumer:3 +billing ← courier\.payments ChargeRequested`).MatchString(out) || strings.Contains(out, "consumer:1") {
		t.Fatalf("discard --error 'card declined' --limit 1 --dry-run: %d, want consumer:3 (the first that matches)\n%s%s", code, out, errOut)
	}
	code, out, errOut = runCLI(t, append([]string{"dlq", "export", "--error", "LEDGER", "--limit", "1"}, db...)...)
	if code != 0 || strings.Count(out, "\n") != 1 || !strings.Contains(out, `"ref":"consumer:1"`) || !strings.Contains(out, `"payload":"eA=="`) {
		t.Fatalf("export --error LEDGER --limit 1: %d, want consumer:1 whole\n%s%s", code, out, errOut)
	}
	code, out, errOut = runCLI(t, append([]string{"dlq", "replay", "consumer:3", "--set-header", "X-Fixed=yes"}, db...)...)
	if code != 0 || !strings.Contains(out, "consumer:3: replay requested") {
		t.Fatalf("replay --set-header: %d\n%s%s", code, out, errOut)
	}
	p, err := drv.Admin().ParkedMessage(ctx, 3)
	testenv.Must(t, err, "read the repaired letter")
	if p.MessageID != "01939f3a-0000-7000-8000-000000000002" || p.Headers["X-Fixed"][0] != "yes" || p.Headers["Courier-Type"][0] != "ChargeRequested" || p.ReplayRequested == nil {
		t.Fatalf("repaired letter: message id %q, headers %v, replay asked %v; want its id and headers kept, X-Fixed added, a replay asked", p.MessageID, p.Headers, p.ReplayRequested)
	}
}
