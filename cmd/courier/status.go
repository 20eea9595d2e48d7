package main

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/courier-go/courier/internal/escape"
	"github.com/courier-go/courier/store"
)

type statusCmd struct {
	dbFlags
	latencyFlags
	JSON bool `help:"Print JSON instead of tables." env:"COURIER_JSON"`

	FailIfOldest       time.Duration `name:"fail-if-oldest" help:"Exit 1 when the oldest pending message has waited longer than this (e.g. 5m)." env:"COURIER_FAIL_IF_OLDEST"`
	FailIfPending      int64         `name:"fail-if-pending" help:"Exit 1 when more than this many messages are pending (0: no check)." env:"COURIER_FAIL_IF_PENDING"`
	FailIfDeadLetters  bool          `name:"fail-if-dead-letters" help:"Exit 1 when there is a relay-side dead letter." env:"COURIER_FAIL_IF_DEAD_LETTERS"`
	FailIfParked       bool          `name:"fail-if-parked" help:"Exit 1 when a consumer has parked a message." env:"COURIER_FAIL_IF_PARKED"`
	FailIfOverdueSagas time.Duration `name:"fail-if-overdue-sagas" help:"Exit 1 when a saga's deadline passed longer ago than this (e.g. 1m) and no runner fired it." env:"COURIER_FAIL_IF_OVERDUE_SAGAS"`
	FailIfExpiredLease bool          `name:"fail-if-expired-leases" help:"Exit 1 when a relay's lease ended without being completed (a relay stopped or froze mid-batch)." env:"COURIER_FAIL_IF_EXPIRED_LEASES"`
	FailIfSlotLag      byteSize      `name:"fail-if-slot-lag" placeholder:"SIZE" help:"Exit 1 when a logical replication slot's reader (a CDC relay) has not confirmed this much of the log, such as 512MB or 1GB (PostgreSQL)." env:"COURIER_FAIL_IF_SLOT_LAG"`
	FailIfSlotInactive bool          `name:"fail-if-slot-inactive" help:"Exit 1 when a logical replication slot has no reader (no CDC relay runs) or is lost (PostgreSQL)." env:"COURIER_FAIL_IF_SLOT_INACTIVE"`
	FailIfLate         time.Duration `name:"fail-if-scheduled-late" help:"Exit 1 when a scheduled message's due time passed longer ago than this (e.g. 1m) and no relay released it." env:"COURIER_FAIL_IF_SCHEDULED_LATE"`
	FailIfHeld         time.Duration `name:"fail-if-held-older-than" help:"Exit 1 when a key has been held (its later messages waiting behind a relay-side dead letter, or a parked message of a consumer, that holds it) longer than this (e.g. 10m), naming the oldest and how to release it." env:"COURIER_FAIL_IF_HELD_OLDER_THAN"`
	auditStatusFlags
}

// errChecks is returned when a --fail-if check failed; the status is
// printed first.
var errChecks = errors.New("status checks failed")

func (c *statusCmd) Run(e *env) error {
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"--fail-if-oldest", c.FailIfOldest}, {"--fail-if-overdue-sagas", c.FailIfOverdueSagas}, {"--fail-if-scheduled-late", c.FailIfLate}, {"--fail-if-held-older-than", c.FailIfHeld}} {
		if f.d < 0 {
			return fmt.Errorf("%s is %s: use a positive duration such as 5m, or leave it out", f.name, f.d)
		}
	}
	if c.FailIfPending < 0 {
		return fmt.Errorf("--fail-if-pending is %d: use a positive count, or leave it out", c.FailIfPending)
	}
	if err := c.validateLatency(); err != nil {
		return err
	}
	if err := c.checkTenants(); err != nil {
		return err
	}
	if c.tenanted() && c.Tenant == "" {
		return c.tenantsStatus(e)
	}
	d, err := c.open(e.ctx, false, "")
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.CheckSchema(e.ctx); err != nil {
		return err
	}
	st, err := d.Operations().Status(e.ctx)
	if err != nil {
		return err
	}
	holds, err := c.holds(e.ctx, d.Admin(), st)
	if err != nil {
		return err
	}
	watches, err := readWatches(e.ctx, d, st.Now)
	if err != nil {
		return err
	}
	lat := c.latency(e.ctx, d.Delivery(), st.Now)
	failed := append(c.check(st), c.heldChecks(st.Now, holds)...)
	failed = append(failed, c.auditChecks(watches)...)
	failed = append(failed, c.latencyChecks(lat)...)
	warned := warnings(st)
	if c.JSON {
		nonNil(&st.Topics)
		nonNil(&st.Relays)
		nonNil(&st.Consumers)
		nonNil(&st.Sagas)
		nonNil(&st.OverdueSagas)
		nonNil(&st.Slots)
		if err := writeJSON(e, statusJSON{
			Pending: st.Outbox.Pending, Leased: st.Outbox.Leased, InBackoff: st.Outbox.InBackoff, DeadLetters: st.Outbox.DeadLetters,
			OldestPendingAgeS: st.Outbox.OldestPendingAge().Seconds(), HeldKeys: st.Outbox.HeldKeys, Held: st.Outbox.Held,
			OldestHoldAgeS: st.Outbox.OldestHoldAge().Seconds(), Status: st, Watches: watches, Latency: &lat, Failed: failed, Warnings: warned,
		}); err != nil {
			return err
		}
	} else {
		printStatus(e.stdout, st)
		printWatches(e.stdout, watches)
		printLatency(e.stdout, lat)
		for _, w := range warned {
			fmt.Fprintln(e.stdout, "\nwarning: "+w)
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("%w: %s", errChecks, strings.Join(failed, "; "))
	}
	return nil
}

// statusJSON is `courier status --json`: the outbox's totals at the top
// (as before the rest was added), then the whole store.Status.
type statusJSON struct {
	Pending           int64   `json:"pending"`
	Leased            int64   `json:"leased"`
	InBackoff         int64   `json:"in_backoff"`
	DeadLetters       int64   `json:"dead_letters"`
	OldestPendingAgeS float64 `json:"oldest_pending_age_seconds"`
	// HeldKeys, Held and OldestHoldAgeS are the outbox's held keys, the
	// messages held behind them, and how long the oldest has been held
	// (0: none is).
	HeldKeys       int64   `json:"held_keys"`
	Held           int64   `json:"held"`
	OldestHoldAgeS float64 `json:"oldest_hold_age_seconds"`
	store.Status
	// Watches are the continuous audits (courier audit --watch).
	Watches []watchStatus `json:"audit_watches"`
	// Latency is the consumers' latency over --latency-window.
	Latency *latencySection `json:"latency,omitempty"`
	// Failed lists the --fail-if checks that failed.
	Failed []string `json:"failed_checks,omitempty"`
	// Warnings are risks the status shows that no check asked about.
	Warnings []string `json:"warnings,omitempty"`
}

// warnings returns what st puts at risk without a --fail-if check: the
// replication slots a failover would leave behind. Names from the
// database are escaped for the terminal.
func warnings(st store.Status) []string {
	var w []string
	for _, s := range st.Slots {
		if s.LostOnFailover() {
			w = append(w, fmt.Sprintf("replication slot %s is not kept on the %d standby(s) streaming from this server (it is not a failover slot: PostgreSQL 17's failover = true with sync_replication_slots on the standby, or this server is older). If a standby is promoted, the CDC relay makes a new slot there and publishes the outbox's rows again, but the table-less messages (postgres.LogOnly) it had not published are lost: write table rows (the default inserter) where a failover must lose nothing. See docs/operations.md, Running on a replicated PostgreSQL.",
				escape.Line(s.Name), s.Standbys))
		}
	}
	return w
}

// roundAbove rounds d, longer than limit, to whole seconds, or as finely as
// it takes to still read longer than limit (2.4s, not 2s, past a limit of
// 2s).
func roundAbove(d, limit time.Duration) time.Duration {
	for _, p := range []time.Duration{time.Second, 100 * time.Millisecond, time.Millisecond} {
		if r := d.Round(p); r > limit {
			return r
		}
	}
	return d
}

// check returns a message for each --fail-if check that fails on st.
func (c *statusCmd) check(st store.Status) []string {
	var failed []string
	if age := st.Outbox.OldestPendingAge(); c.FailIfOldest > 0 && age > c.FailIfOldest {
		var worst store.TopicStatus
		for _, t := range st.Topics {
			if t.OldestPendingAge(st.Now) > worst.OldestPendingAge(st.Now) {
				worst = t
			}
		}
		failed = append(failed, fmt.Sprintf("the oldest pending message (topic %q) has waited %s, more than --fail-if-oldest %s: is a relay running? (courier reconcile shows what is stuck)",
			worst.Topic, roundAbove(age, c.FailIfOldest), c.FailIfOldest))
	}
	if c.FailIfPending > 0 && st.Outbox.Pending > c.FailIfPending {
		failed = append(failed, fmt.Sprintf("%d messages are pending, more than --fail-if-pending %d", st.Outbox.Pending, c.FailIfPending))
	}
	if c.FailIfDeadLetters && st.Outbox.DeadLetters > 0 {
		failed = append(failed, fmt.Sprintf("%d relay-side dead letters: see courier dlq list", st.Outbox.DeadLetters))
	}
	if c.FailIfParked {
		var n int64
		for _, cs := range st.Consumers {
			n += cs.Parked
		}
		if n > 0 {
			failed = append(failed, fmt.Sprintf("%d parked messages: see courier dlq list", n))
		}
	}
	if c.FailIfOverdueSagas > 0 {
		for _, s := range st.OverdueSagas {
			if late := st.Now.Sub(s.OldestDeadline); late > c.FailIfOverdueSagas {
				failed = append(failed, fmt.Sprintf("%d %s sagas are past their deadline, the oldest by %s (more than --fail-if-overdue-sagas %s): is its saga runner running?",
					s.Count, s.Type, late.Round(time.Second), c.FailIfOverdueSagas))
			}
		}
	}
	if c.FailIfExpiredLease {
		var n int64
		for _, r := range st.Relays {
			n += r.Expired
		}
		if n > 0 {
			failed = append(failed, fmt.Sprintf("%d relay leases ended without being completed: courier reconcile --repair releases them", n))
		}
	}
	if sc := st.Scheduled; c.FailIfLate > 0 && !sc.NextDue.IsZero() && st.Now.Sub(sc.NextDue) > c.FailIfLate {
		failed = append(failed, fmt.Sprintf("%d scheduled messages are due and not released, the oldest for %s (more than --fail-if-scheduled-late %s): is a relay running?",
			sc.Due, roundAbove(st.Now.Sub(sc.NextDue), c.FailIfLate), c.FailIfLate))
	}
	for _, s := range st.Slots {
		if c.FailIfSlotLag > 0 && s.LagBytes > int64(c.FailIfSlotLag) {
			failed = append(failed, fmt.Sprintf("replication slot %s lags %s, more than --fail-if-slot-lag %s: is its CDC relay running and publishing? (the slot keeps %s of log meanwhile)",
				s.Name, byteSize(s.LagBytes), c.FailIfSlotLag, byteSize(s.RetainedBytes)))
		}
		switch {
		case !c.FailIfSlotInactive:
		case s.Lost():
			failed = append(failed, fmt.Sprintf("replication slot %s is lost (PostgreSQL removed log it needs, past max_slot_wal_keep_size): drop it, and start the CDC relay again to make a new one; the polling relay publishes the outbox's rows meanwhile", s.Name))
		case !s.Active:
			failed = append(failed, fmt.Sprintf("replication slot %s has no reader and keeps %s of log: start its CDC relay (courier relay --mode cdc --slot %s), or drop the slot if nothing reads it any more", s.Name, byteSize(s.RetainedBytes), s.Name))
		}
	}
	return failed
}

// printStatus writes st as aligned tables, the outbox's first. Names read
// from the database (topics, relays, consumers, sagas, slots) are escaped
// for the terminal.
func printStatus(w io.Writer, st store.Status) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	defer tw.Flush()
	row := func(cells ...any) {
		for _, c := range cells {
			if s, ok := c.(string); ok {
				c = escape.Line(s)
			}
			fmt.Fprint(tw, c, "\t")
		}
		fmt.Fprintln(tw)
	}
	o := st.Outbox
	row("OUTBOX", "pending", "leased", "in backoff", "oldest", "dead letters", "held keys", "held", "oldest hold")
	for _, t := range st.Topics {
		row(t.Topic, t.Pending, t.Leased, t.InBackoff, age(t.OldestPendingAge(st.Now)), t.DeadLetters, t.HeldKeys, t.Held, age(t.OldestHoldAge(st.Now)))
	}
	row("total", o.Pending, o.Leased, o.InBackoff, age(o.OldestPendingAge()), o.DeadLetters, o.HeldKeys, o.Held, age(o.OldestHoldAge()))
	row()
	row("RELAYS", "leases", "rows", "expired", "lease ends")
	for _, r := range st.Relays {
		row(r.Owner, r.Leases, r.Rows, r.Expired, relative(st.Now, r.Until))
	}
	if len(st.Relays) == 0 {
		fmt.Fprintln(tw, "(no leases)")
	}
	row()
	row("CONSUMERS", "parked", "replay asked", "failing msgs", "failures", "oldest", "held keys", "held")
	for _, c := range st.Consumers {
		oldest := c.OldestParked
		if oldest.IsZero() || (!c.OldestFailure.IsZero() && c.OldestFailure.Before(oldest)) {
			oldest = c.OldestFailure
		}
		row(c.Consumer, c.Parked, c.ReplayRequested, c.FailingMessages, c.Failures, ago(st.Now, oldest), c.HeldKeys, c.Held)
	}
	if len(st.Consumers) == 0 {
		fmt.Fprintln(tw, "(nothing parked or failing)")
	}
	row()
	row("SAGAS", "phase", "state", "count", "")
	for _, s := range st.Sagas {
		row(s.Type, s.Phase, dash(s.State), count(store.Count{N: s.Count, Estimated: s.Estimated}), "")
	}
	for _, s := range st.OverdueSagas {
		row(s.Type, "overdue", "", s.Count, "deadline "+ago(st.Now, s.OldestDeadline))
	}
	if len(st.Sagas) == 0 {
		fmt.Fprintln(tw, "(no sagas)")
	}
	row()
	row("TABLES", "rows", "", "", "oldest")
	row("published copies", count(st.Published), "", "", ago(st.Now, st.OldestPublished))
	row("inbox markers", count(st.InboxMarkers), "", "", "")
	row("keys in flight", st.Keys.InFlight, "", "", "")
	row("  lock expired", st.Keys.LockExpired, "", "", "")
	row("keys completed", count(st.Keys.Completed), "", "", "")
	row("scheduled", count(st.Scheduled.Waiting), "", "", "next due "+relative(st.Now, st.Scheduled.NextDue))
	row("  due, not released", st.Scheduled.Due, "", "", "")
	if len(st.Slots) > 0 {
		row()
		row("REPLICATION SLOTS", "active", "wal status", "lag", "retained", "lag time")
		for _, s := range st.Slots {
			active := "no"
			if s.Active {
				active = fmt.Sprintf("yes (pid %d)", s.ActivePID)
			}
			lagTime := "-"
			if s.LagSeconds != nil {
				lagTime = age(time.Duration(*s.LagSeconds * float64(time.Second)))
				if lagTime == "-" {
					lagTime = "0s"
				}
			}
			row(s.Name, active, dash(s.WALStatus), byteSize(s.LagBytes), byteSize(s.RetainedBytes), lagTime)
		}
	}
}

// count renders c, with a ~ when it is an estimate.
func count(c store.Count) string {
	if c.Estimated {
		return fmt.Sprintf("~%d", c.N)
	}
	return fmt.Sprint(c.N)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// ago renders how long before now t was, "-" for the zero time.
func ago(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	if !t.Before(now) {
		return "now"
	}
	return age(now.Sub(t)) + " ago"
}

// relative renders t from now: "in 25s" or "40s ago".
func relative(now, t time.Time) string {
	if t.After(now) {
		return "in " + age(t.Sub(now))
	}
	return ago(now, t)
}

func age(d time.Duration) string {
	switch {
	case d == 0:
		return "-"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	default:
		return d.Round(time.Second).String()
	}
}
