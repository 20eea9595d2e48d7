package main

import (
	"context"
	"encoding/json"
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
