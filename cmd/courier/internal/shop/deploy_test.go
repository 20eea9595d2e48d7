package shop_test

import (
	"context"
	"strings"
	"testing"

	"github.com/courier-go/courier/cmd/courier/internal/shop"
	"github.com/courier-go/courier/internal/testenv"
)

// Version 2 of ChargeRequested deployed in the middle of the demo, under
// every fault and a crash, in either order: consumer first (payment with
// its upcaster, then orders), producer first (orders, then payment; the
// version 2 requests wait for payment's deploy), and producer first with
// payment deployed after its NewerVersionWait (they are parked, then
// replayed). Version 1 requests are still in flight at the switch; each
// order's request is answered once, none is left parked, none is charged
// wrongly or declined for its shape, and every invariant holds.
func TestDemoDeploysChargeVersion2(t *testing.T) {
	for _, c := range []struct {
		name   string
		deploy string
		late   bool
	}{
		{"consumer-first", shop.DeployConsumerFirst, false},
		{"producer-first", shop.DeployProducerFirst, false},
		{"producer-first-late", shop.DeployProducerFirst, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			onEachStack(t, func(t *testing.T, st *stack) {
				const orders = 90
				f := shop.Faults{FailureRate: 0.05, DuplicateRate: 0.1, ReorderRate: 0.1}
				payment := f
				payment.DeclineRate = 0.1
				rep, err := shop.RunDemo(context.Background(), shop.DemoConfig{
					Databases: st.dbs, BrokerURL: st.brokerURL, Stream: st.stream, SubjectPrefix: st.prefix,
					Orders: orders, Faults: map[string]shop.Faults{shop.Orders: f, shop.Payment: payment, shop.Inventory: f, shop.Shipping: f},
					ReplayRate: 0.1, Crash: shop.Payment, Deploy: c.deploy, DeployLate: c.late, InFlight: demoInFlight, Timeouts: shop.Timeouts{Step: stepTimeout}, Logger: testLogger(t),
				})
				testenv.Must(t, err, "demo")
				checkDeploy(t, rep, orders, c.deploy, c.late)
			})
		})
	}
}

// uncounted is how many charge requests payment applied without counting
// them (ChargeStats): a run a crash cut short after its commit. The audit
// counts each request answered once; payment's counts, one per run or
// replay it saw end, hold the rest (at least: a replay may be counted as
// a run too).
func uncounted(rep *shop.Report, ch shop.ChargeStats) int64 {
	return max(int64(rep.Audit.AnsweredOnce)-(ch.V1+ch.Upcast+ch.V2+ch.Replayed), 0)
}

// checkDeploy fails the test unless rep shows a deploy of version 2 in
// order deploy that went right.
func checkDeploy(t *testing.T, rep *shop.Report, orders int, deploy string, late bool) {
	t.Helper()
	var out strings.Builder
	_, err := rep.WriteTo(&out)
	testenv.Must(t, err, "report")
	if !rep.OK() || rep.TimedOut || rep.Audit.Orders != orders || rep.Audit.Parked != 0 {
		t.Fatalf("demo failed:\n%s", out.String())
	}
	for reason := range rep.Audit.Reasons {
		// Declined or cancelled for a reason of the faults, never for
		// the request's shape (invalid amount, currency) nor for a
		// request that waited until its step timed out.
		if !strings.HasPrefix(reason, "payment: card declined") && !strings.HasPrefix(reason, "inventory: out of stock") &&
			!strings.HasPrefix(reason, "shipping: ") {
			t.Errorf("orders cancelled because %q:\n%s", reason, out.String())
		}
	}
	ro, ch := rep.Rollout, rep.Metrics[shop.Payment].Charges
	if ro == nil || !ro.Done || ro.Order != deploy || ro.Charges != ch {
		t.Fatalf("rollout %+v, payment's counts %+v; want the %s deploy done:\n%s", ro, ch, deploy, out.String())
	}
	// The audit found each order's request answered once; payment's
	// counts, in memory, may miss a run a crash cut short after its commit,
	// never count one twice.
	if applied := ch.V1 + ch.Upcast + ch.V2; applied > int64(orders) {
		t.Errorf("charge requests applied %+v for %d orders; want each once", ch, orders)
	}
	if ro.Queued == 0 || ch.V1 == 0 || ch.V2 == 0 {
		t.Errorf("rollout %+v: want version 1 requests in flight at the switch, and both versions applied", ro)
	}
	switch {
	case deploy == shop.DeployConsumerFirst:
		// Payment knew version 2 before orders wrote it, and upcast the
		// version 1 requests it found on its deploy.
		if ro.AtSwitch.Upcast == 0 || ch.Waited != 0 || ch.Parked != 0 || ch.Replayed != 0 {
			t.Errorf("consumer first: payment's counts %+v, at the switch %+v; want version 1 requests upcast before orders' deploy, none newer than payment knew", ch, ro.AtSwitch)
		}
	case ch.V1+ch.Upcast+uncounted(rep, ch) <= ro.AtSwitch.V1 || ch.Waited == 0 || ch.WaitRuns < ch.Waited:
		t.Errorf("producer first: payment's counts %+v, at the switch %+v, %d in flight; want version 1 requests applied after the switch, and version 2 ones waiting for payment",
			ch, ro.AtSwitch, ro.Queued)
	case late && (ch.Parked == 0 || ro.ReplayRequested == 0 || ch.Replayed > int64(ro.ReplayRequested)):
		// A parked request whose acknowledgement was lost (a webhook
		// sender that hung up) is delivered again and applied by the new
		// payment; its replay then finds it applied: the audit above
		// counts each request answered once either way.
		t.Errorf("producer first, payment late: payment's counts %+v, %d replays requested; want requests parked as newer_version, then replayed or found applied", ch, ro.ReplayRequested)
	case !late && (ch.Parked != 0 || ch.Replayed != 0):
		t.Errorf("producer first: payment's counts %+v; want nothing parked: payment was deployed long before its NewerVersionWait", ch)
	}
	for _, want := range []string{"ChargeRequested deployed from version 1 to 2 mid-run, " + strings.ReplaceAll(deploy, "-", " "),
		"charge requests applied", "every charge request answered once", "All 8 invariants hold."} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
	t.Logf("%+v\n%s", ch, out.String())
}
