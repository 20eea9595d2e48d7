package tenants

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/courier-go/courier"
	couriernats "github.com/courier-go/courier/broker/nats"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/store/dburl"
	"github.com/courier-go/courier/tenant"
)

// Chaos numbers.
const (
	chaosRelays = 3
	chaosFor    = 20 * time.Second
)

// chaos: three `courier relay` processes share the schema tenants through
// heartbeats in the server's own database, each SIGKILLed 1–4s after it
// started and replaced, while every tenant writes steadily. Then three
// relays run in peace until the stream holds everything: no message lost,
// each tenant's keys in order, every tenant served.
func chaos(t *testing.T, srv *testenv.PGServer, ts []tenant.Tenant) {
	natsURL := testenv.NATS(t)
	dir := t.TempDir()
	var file strings.Builder
	for _, tn := range ts {
		fmt.Fprintf(&file, "%s %s\n", tn.Name, tn.URL)
	}
	tenantsFile := filepath.Join(dir, "tenants")
	testenv.Must(t, os.WriteFile(tenantsFile, []byte(file.String()), 0o600), "tenants file")
	fleetURL, err := dburl.WithSchema(srv.URL, "courier_fleet")
	testenv.Must(t, err, "fleet URL")
	testenv.Must(t, migrate(tenant.Tenant{Name: "fleet", URL: fleetURL}, dburl.Options{CreateSchema: true}), "migrate the fleet's database")
	stream := testenv.Name("TENANTS")
	prefix := strings.ToLower(stream) + "."
	nc := testenv.Connect(t, natsURL)
	t.Cleanup(func() { testenv.DeleteStream(t, nc, stream) })
	logs, err := os.Create(filepath.Join(dir, "relays.log"))
	testenv.Must(t, err, "log file")
	defer logs.Close()
	cmdline := []string{testenv.CourierBinary(t), "relay", "--log-format", "text", "--log-level", "warn",
		"--broker-url", natsURL, "--stream", stream, "--subject-prefix", prefix,
		"--tenants-file", tenantsFile, "--database-url", fleetURL, "--tenants-heartbeat", "300ms",
		"--tenants-max-open", "100", "--concurrency", "1", "--poll-interval", "500ms", "--lease", "3s"}
	start := func() *exec.Cmd {
		cmd := exec.Command(cmdline[0], cmdline[1:]...)
		cmd.Stderr = logs
		testenv.Must(t, cmd.Start(), "start a relay")
		return cmd
	}

	w := openWriters(t, ts, func(tn tenant.Tenant) string { return tn.URL })
	names := make([]string, len(ts))
	for i, tn := range ts {
		names[i] = tn.Name
	}
	ctx, cancel := context.WithTimeout(context.Background(), chaosFor)
	defer cancel()
	writing := w.steady(ctx, names, time.Second, 4)
	var kills atomic.Int64
	var wg sync.WaitGroup
	for range chaosRelays {
		wg.Go(func() {
			for ctx.Err() == nil {
				cmd := start()
				select {
				case <-ctx.Done():
				case <-time.After(time.Duration(1000+rand.IntN(3000)) * time.Millisecond):
				}
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
				kills.Add(1)
			}
		})
	}
	wg.Wait()
	writing()
	during, _ := testenv.StreamCountIfAny(t, nc, stream)
	if during == 0 {
		t.Fatalf("nothing published while the relays were killed: %d relays SIGKILLed", kills.Load())
	}

	// In peace, until the stream holds every message written.
	final := make([]*exec.Cmd, chaosRelays)
	for i := range final {
		final[i] = start()
	}
	defer func() {
		for _, cmd := range final {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			if err := cmd.Wait(); err != nil {
				t.Errorf("relay exit after SIGTERM: %v", err)
			}
		}
		if t.Failed() {
			b, _ := os.ReadFile(logs.Name())
			t.Logf("relays' log (last 4 KiB):\n%s", b[max(0, len(b)-4096):])
		}
	}()
	written := w.all()
	total := 0
	for _, msgs := range written {
		total += len(msgs)
	}
	testenv.WhileProgressing(t, time.Minute, func() (bool, any) {
		n, _ := testenv.StreamCountIfAny(t, nc, stream)
		return n >= total, fmt.Sprintf("%d of %d in the stream", n, total)
	}, "every message in the stream once the relays run in peace")
	got := map[string][]courier.Message{}
	for _, m := range testenv.StreamMessages(t, nc, stream, couriernats.Config{SubjectPrefix: prefix}) {
		got[m.Headers[tenant.Header]] = append(got[m.Headers[tenant.Header]], m)
	}
	dups := 0
	for _, tn := range ts {
		if len(got[tn.Name]) == 0 {
			t.Fatalf("tenant %s: nothing published", tn.Name)
		}
		dups += testenv.CheckDelivery(t, written[tn.Name], got[tn.Name])
	}
	t.Logf("%d relays SIGKILLed over %s while %d tenants wrote %d messages (%d published meanwhile): none lost, none out of its key's order, %d duplicates in the stream",
		kills.Load(), chaosFor, len(ts), total, during, dups)
}
