package shop

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/courier-go/courier/inbox"
	"github.com/courier-go/courier/store"
)

// The orders in which a demo deploys version 2 of ChargeRequested
// (DemoConfig.Deploy).
const (
	// DeployConsumerFirst deploys payment first, then the orders service:
	// payment upcasts the version 1 requests still in flight, then
	// receives version 2 ones.
	DeployConsumerFirst = "consumer-first"
	// DeployProducerFirst deploys the orders service first, then payment:
	// payment, knowing only version 1, receives version 2 requests, which
	// wait for its deploy.
	DeployProducerFirst = "producer-first"
)

// DefaultLateNewerVersionWait is payment's NewerVersionWait in a demo whose
// payment is deployed late (DemoConfig.DeployLate) unless one is given.
const DefaultLateNewerVersionWait = 2 * time.Second

// Rollout is what a demo's deploy of version 2 of ChargeRequested did.
type Rollout struct {
	// Order is DemoConfig.Deploy, Late DemoConfig.DeployLate, and
	// NewerVersionWait payment's.
	Order            string
	Late             bool
	NewerVersionWait time.Duration
	// At is how many orders had been placed when the deploy began.
	At int
	// Queued counts the version 1 requests in flight for payment while it
	// was down before the switch to version 2 (for its own deploy,
	// consumer first; while the orders service was deployed, producer
	// first): in the orders' outbox or the broker, not applied yet.
	Queued int
	// AtSwitch are payment's counts when the orders service had been
	// deployed with version 2: what came after them was in flight at the
	// switch, or written after it.
	AtSwitch ChargeStats
	// Charges are payment's counts at the end of the run.
	Charges ChargeStats
	// ReplayRequested counts the deliveries parked as newer_version whose
	// replay the demo requested after payment's deploy, as an operator
	// would (courier dlq replay); Replays counts the requests, a replay
	// that failed being requested again.
	ReplayRequested, Replays int
	// Done is true once both services were deployed.
	Done bool
}

// rollout deploys version 2 of ChargeRequested to the orders service and
// payment, in the order cfg.Deploy says, while the load goes on. Each wait
// is for an event (a request in flight, applied, waiting or parked at
// payment) and ends early when the load has ended and the event can no
// longer happen.
func (d *demoRun) rollout(ctx context.Context) (*Rollout, error) {
	ro := &Rollout{Order: d.cfg.Deploy, Late: d.cfg.DeployLate, NewerVersionWait: d.cfg.NewerVersionWait, At: int(d.placed.Load())}
	if ro.NewerVersionWait == 0 {
		ro.NewerVersionWait = inbox.DefaultNewerVersionWait
	}
	r := &rolloutRun{d: d, ctx: ctx, ro: ro}
	var err error
	switch d.cfg.Deploy {
	case DeployConsumerFirst:
		err = r.consumerFirst()
	case DeployProducerFirst:
		err = r.producerFirst()
	default:
		return nil, nil
	}
	if err != nil {
		return ro, err
	}
	ro.Done = true
	return ro, d.replayNewer(ctx, ro)
}

// rolloutRun is one deploy of a demo, under way.
type rolloutRun struct {
	d   *demoRun
	ctx context.Context
	ro  *Rollout
}

// charges are payment's counts.
func (r *rolloutRun) charges() ChargeStats { return r.d.shop.Payment.Metrics().Charges }

// inFlight counts the orders whose request payment has not applied: each
// order's saga wrote one in the transaction that placed it, and payment
// counts each it applied once. Payment being down, they wait for it in the
// orders' outbox or the broker.
func (r *rolloutRun) inFlight() (int, error) {
	n, err := countOrders(r.ctx, r.d.ordersDB)
	c := r.charges()
	return n - int(c.V1+c.Upcast+c.V2+c.Replayed), err
}

// queued waits, payment being down, until a request is in flight for it,
// then sets Queued.
func (r *rolloutRun) queued() error {
	return r.d.waitFor(r.ctx, true, func() (bool, error) {
		n, err := r.inFlight()
		r.ro.Queued = n
		return n > 0, err
	})
}

// consumerFirst deploys payment with its upcaster while requests of
// version 1 are in flight for it, then the orders service writing
// version 2.
func (r *rolloutRun) consumerFirst() error {
	d, s, ro := r.d, r.d.shop, r.ro
	err := s.Deploy(Payment, ChargeVersion, func() error {
		if err := r.queued(); err != nil {
			return err
		}
		n, err := r.inFlight()
		ro.Queued = n
		return err
	})
	if err != nil {
		return err
	}
	// Payment serves with its upcaster before orders writes version 2: it
	// upcast one of the requests in flight, or, should they all have been
	// answered meanwhile (a run cut short by the stop after its commit is
	// not counted), no order waits for payment any more.
	err = d.waitFor(r.ctx, false, func() (bool, error) {
		if r.charges().Upcast > 0 || ro.Queued == 0 {
			return true, nil
		}
		if !d.loadDone.Load() && !d.gated.Load() {
			return false, nil
		}
		n, err := countState(r.ctx, d.ordersDB, StatePaymentPending)
		return n == 0, err
	})
	if err != nil {
		return err
	}
	err = s.Deploy(Orders, ChargeVersion, nil)
	ro.AtSwitch = r.charges()
	d.markSwitched()
	return err
}

// producerFirst deploys the orders service writing version 2 while
// payment is down with version 1 requests in flight for it; payment comes
// back knowing version 1 only, meets version 2 requests, and is deployed
// once one waits (late: once one was parked).
func (r *rolloutRun) producerFirst() error {
	d, s, ro := r.d, r.d.shop, r.ro
	var deployed time.Time
	err := s.Deploy(Payment, 1, func() error {
		if err := r.queued(); err != nil {
			return err
		}
		err := s.Deploy(Orders, ChargeVersion, func() error {
			n, err := r.inFlight() // orders being down too, none is added
			ro.Queued = n
			return err
		})
		ro.AtSwitch, deployed = r.charges(), time.Now()
		d.markSwitched()
		return err
	})
	if err != nil {
		return err
	}
	// Payment, back with version 1 only, meets version 2 requests.
	err = d.waitFor(r.ctx, false, func() (bool, error) {
		if r.charges().Waited > 0 {
			return true, nil
		}
		if !d.loadDone.Load() {
			return false, nil
		}
		n, err := countPlacedSince(r.ctx, d.ordersDB, deployed)
		return n == 0, err // no version 2 request was written
	})
	if err != nil {
		return err
	}
	if d.cfg.DeployLate && r.charges().Waited > 0 {
		// Payment's deploy comes after its NewerVersionWait.
		if err := d.waitFor(r.ctx, false, func() (bool, error) { return r.charges().Parked > 0, nil }); err != nil {
			return err
		}
	}
	return s.Deploy(Payment, ChargeVersion, nil)
}

// replayNewer replays what payment parked as newer than it knew, now that
// it knows version 2, as an operator would after its deploy (courier dlq
// replay): it requests the replay of each such delivery, again if one
// failed, until none is left.
func (d *demoRun) replayNewer(ctx context.Context, ro *Rollout) error {
	db, err := openDB(ctx, d.cfg.Databases.Payment)
	if err != nil {
		return err
	}
	defer db.Close()
	admin := db.Admin()
	requested := map[int64]bool{}
	return d.waitFor(ctx, false, func() (bool, error) {
		parked, err := admin.ListParked(ctx, store.ListQuery{Consumer: Payment, Error: store.ReasonNewerVersion, Limit: store.MaxListLimit})
		if err != nil {
			return false, err
		}
		left := 0
		for _, p := range parked {
			if p.Reason != store.ReasonNewerVersion {
				continue
			}
			left++
			if p.ReplayRequested != nil {
				continue
			}
			err := admin.RequestReplay(ctx, p.ID)
			if errors.Is(err, store.ErrNotFound) {
				// Gone since the list: payment runs as several
				// instances, each replaying the requests, and one whose
				// replay failed clears the request while another's
				// succeeds and unparks the delivery. Nothing is left.
				left--
				continue
			}
			if err != nil {
				return false, err
			}
			requested[p.ID] = true
			ro.Replays++
		}
		ro.ReplayRequested = len(requested)
		return left == 0, nil
	})
}

// waitFor calls cond every 20ms until it reports true or an error, or ctx
// ends (with ctx's error). With whileLoad, it gives up once the load has
// ended or waits for the switch to version 2 and cond still reports false:
// cond awaits an order.
func (d *demoRun) waitFor(ctx context.Context, whileLoad bool, cond func() (bool, error)) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		ended := d.loadDone.Load() || d.gated.Load() // read before cond: then cond's false is final
		ok, err := cond()
		if ok || err != nil || (whileLoad && ended) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// countOrders counts the orders placed.
func countOrders(ctx context.Context, db *serviceDB) (int, error) {
	var n int
	err := db.sql.QueryRowContext(ctx, `SELECT COUNT(*) FROM shop_orders`).Scan(&n)
	return n, err
}

// countState counts the orders whose saga is in state.
func countState(ctx context.Context, db *serviceDB, state string) (int, error) {
	var n int
	err := db.sql.QueryRowContext(ctx, db.q(`SELECT COUNT(*) FROM courier_sagas WHERE saga_type = ? AND state = ?`), sagaType, state).Scan(&n)
	return n, err
}

// countPlacedSince counts the orders placed after t.
func countPlacedSince(ctx context.Context, db *serviceDB, t time.Time) (int, error) {
	var n int
	err := db.sql.QueryRowContext(ctx, db.q(`SELECT COUNT(*) FROM shop_orders WHERE created_at > ?`), t.UnixMicro()).Scan(&n)
	return n, err
}

// writeRollout writes what the deploy of version 2 of ChargeRequested did.
func (r *Report) writeRollout(b *strings.Builder) {
	ro := r.Rollout
	if ro == nil {
		return
	}
	c, sw := ro.Charges, ro.AtSwitch
	fmt.Fprintf(b, "\nChargeRequested deployed from version 1 to 2 mid-run, %s (from order %d)\n", strings.ReplaceAll(ro.Order, "-", " "), ro.At)
	var steps []string
	switch ro.Order {
	case DeployConsumerFirst:
		steps = []string{
			fmt.Sprintf("payment deployed with v2 and an upcaster from v1, while %d v1 requests were in flight for it", ro.Queued),
			fmt.Sprintf("orders deployed writing v2; payment upcast %d v1 requests before, %d after (still in flight at the switch)", sw.Upcast, c.Upcast-sw.Upcast),
		}
	case DeployProducerFirst:
		steps = []string{
			fmt.Sprintf("orders deployed writing v2, while payment (knowing only v1) was stopped and %d v1 requests were in flight for it", ro.Queued),
			fmt.Sprintf("payment back, still v1: it applied %d v1 requests after the switch; %d v2 requests, newer than it knew, waited for its deploy (%d runs, uncounted)",
				c.V1-sw.V1, c.Waited, c.WaitRuns),
		}
		deploy := "payment deployed with v2 before its NewerVersionWait (" + ro.NewerVersionWait.String() + ") ran out"
		if ro.Late || c.Parked > 0 {
			deploy = fmt.Sprintf("payment deployed with v2 after its NewerVersionWait (%s): %d parked as newer_version", ro.NewerVersionWait, c.Parked)
		}
		steps = append(steps, deploy)
	}
	if !ro.Done {
		steps = append(steps, "the deploy did not finish")
	}
	if ro.Replays > 0 || c.Parked > 0 {
		replay := fmt.Sprintf("the parked requests replayed, as courier dlq replay does: %d of %d", c.Replayed, ro.ReplayRequested)
		if already := int64(ro.ReplayRequested) - c.Replayed; already > 0 {
			// Parked, but its acknowledgement did not reach the broker (a
			// webhook sender that hung up first sends it again): the new
			// payment applied it, and its replay found it applied.
			replay += fmt.Sprintf("; %d had been applied already, delivered again after it was parked, and its replay skipped it", already)
		}
		if ro.Replays > ro.ReplayRequested {
			replay += fmt.Sprintf(" (%d replays failed and were requested again)", ro.Replays-ro.ReplayRequested)
		}
		steps = append(steps, replay)
	}
	for i, s := range steps {
		fmt.Fprintf(b, "  %d. %s\n", i+1, s)
	}
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  charge requests applied\tv1 by payment v1: %d\tv1 upcast by payment v2: %d\tv2: %d\treplayed: %d\n", c.V1, c.Upcast, c.V2, c.Replayed)
	tw.Flush()
}
