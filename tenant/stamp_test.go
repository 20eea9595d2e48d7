package tenant_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/dburl"
	"github.com/courier-go/courier/tenant"
)

// tenantHeaders returns the values of the headers of h named Header in
// any case, by name as written.
func tenantHeaders(h map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range h {
		if strings.EqualFold(k, tenant.Header) {
			out[k] = v
		}
	}
	return out
}

// The stamp's name is compared without regard to case wherever it is set
// or read. A row whose headers hold courier-tenant and COURIER-TENANT
// naming other tenants (written into the outbox by hand: the outbox
// refuses them from producers) leaves the fleet over NATS with one
// stamp, its own tenant's, and the consumer applies it there. A message
// stamped in another case only, as a producer outside Courier may send
// it, is applied in the tenant it names; one whose spellings name
// different tenants is refused.
func TestStampIgnoresCase(t *testing.T) {
	ctx := context.Background()
	ts := consumerTenants(t, 2)
	alpha, gamma := ts[0], ts[1]
	e := newConsumerEnv(t)

	forged := courier.NewMessage("orders", "k1", "OrderPlaced", []byte("forged"))
	forged.Headers = map[string]string{"courier-tenant": gamma.Name, "COURIER-TENANT": "delta"}
	d, err := dburl.Open(ctx, alpha.URL, dburl.Options{})
	testenv.Must(t, err, "open alpha")
	testenv.Must(t, d.InTx(ctx, func(tx *sql.Tx) error { return d.Inserter().Insert(ctx, tx, []courier.Message{forged}) }), "insert by hand")
	d.Close()
	f, err := tenant.New(e.pub, tenant.Config{Source: tenant.List(ts...), Relay: fastRelay})
	testenv.Must(t, err, "fleet")
	fctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- f.Run(fctx) }()
	var got []courier.Message
	testenv.WhileProgressing(t, 30*time.Second, func() (bool, any) {
		got = testenv.StreamMessages(t, e.nc, e.stream, e.mapping)
		return len(got) == 1, len(got)
	}, "the row relayed: %v", testenv.Lazy(func() any { return summary(f) }))
	stop()
	testenv.Must(t, <-done, "fleet run")
	if h := tenantHeaders(got[0].Headers); len(h) != 1 || h[tenant.Header] != alpha.Name {
		t.Fatalf("the relayed message carries tenant headers %v, want only %s: %s", h, tenant.Header, alpha.Name)
	}

	// A foreign producer's stamps, straight onto the stream.
	js, err := jetstream.New(e.nc)
	testenv.Must(t, err, "jetstream")
	lower := of(alpha, "k2", "lower case")
	lower.Headers = map[string]string{"courier-tenant": alpha.Name}
	split := of(alpha, "k3", "two tenants")
	split.Headers = map[string]string{"courier-tenant": alpha.Name, tenant.Header: gamma.Name}
	for _, m := range []courier.Message{lower, split} {
		msg := e.mapping.ToNATS(&m)
		_, err := js.PublishMsg(ctx, msg)
		testenv.Must(t, err, "publish "+string(m.Payload))
	}
	c := e.run("billing", func(ctx context.Context, tx *sql.Tx, msg courier.Message) error {
		tn, _ := tenant.From(ctx)
		_, err := tenant.DB(ctx).Exec(ctx, tx, "INSERT INTO effects (message_id, tenant) VALUES (?, ?)", msg.ID.String(), tn.Name)
		return err
	}, tenant.ConsumerConfig{Source: tenant.List(ts...)})
	testenv.WhileProgressing(t, 30*time.Second, func() (bool, any) {
		m := c.Metrics()
		return m.Applied == 2 && m.Parked == 1, m
	}, "2 applied, 1 refused")
	for _, m := range []courier.Message{forged, lower} {
		if n := count(t, alpha, "SELECT count(*) FROM effects WHERE message_id = ?", m.ID.String()); n != 1 {
			t.Errorf("message %q applied %d times in %s's database, want once", m.Payload, n, alpha.Name)
		}
	}
	if n := count(t, gamma, "SELECT count(*) FROM effects"); n != 0 {
		t.Errorf("%d messages applied in %s's database, want none", n, gamma.Name)
	}
	refused := parkedIn(t, e.refused, "billing")
	if len(refused) != 1 || refused[0].MessageID != split.ID.String() || refused[0].Reason != store.ReasonMalformed || !strings.Contains(refused[0].Error, "several") {
		t.Fatalf("refused: %+v, want the message of two tenants, parked as malformed", refused)
	}
}
