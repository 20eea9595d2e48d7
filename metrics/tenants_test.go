package metrics_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker/memory"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/metrics"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/relay"
	"github.com/courier-go/courier/store/memstore"
)

// Each tenant's relay counts into the sums and into its tenant's series;
// past MaxTenants, tenants share the series of OtherTenants.
func TestTenantSeriesAreBounded(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	col, err := metrics.New(metrics.Config{MaxTenants: 2})
	testenv.Must(t, err, "new")
	pub := memory.NewPublisher()
	for i, name := range []string{"acme", "globex", "initech", "umbrella"} {
		st := memstore.New(memstore.Config{})
		w := outbox.New(st, outbox.Config{})
		msgs := make([]courier.Message, i+1) // acme 1, globex 2, initech 3, umbrella 4
		for j := range msgs {
			msgs[j] = courier.NewMessage("orders", "k", "OrderPlaced", nil)
		}
		testenv.Must(t, st.InTx(ctx, func(tx *memstore.Tx) error { return w.Write(ctx, tx, msgs...) }), "write")
		r, err := relay.New(st, pub, relay.Config{Observer: col.Tenant(name), PollInterval: 5 * time.Millisecond})
		testenv.Must(t, err, "relay")
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- r.Run(runCtx) }()
		for r.Metrics().Published < int64(len(msgs)) && ctx.Err() == nil {
			time.Sleep(5 * time.Millisecond)
		}
		stop()
		testenv.Must(t, <-done, "run")
	}
	want := `
# HELP courier_relay_published_messages_total Messages the broker acknowledged and the relay marked published.
# TYPE courier_relay_published_messages_total counter
courier_relay_published_messages_total 10
# HELP courier_tenant_published_messages_total Messages of a tenant the broker acknowledged and its relay marked published (package tenant).
# TYPE courier_tenant_published_messages_total counter
courier_tenant_published_messages_total{tenant="acme"} 1
courier_tenant_published_messages_total{tenant="globex"} 2
courier_tenant_published_messages_total{tenant="other tenants"} 7
`
	if err := testutil.CollectAndCompare(col, strings.NewReader(want), "courier_relay_published_messages_total", "courier_tenant_published_messages_total"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(col, "courier_tenant_publish_latency_seconds"); n != 3 {
		t.Fatalf("%d latency series, want 3 (two tenants and the others)", n)
	}
}
