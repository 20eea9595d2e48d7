package main

import (
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/courier-go/courier/internal/escape"
	"github.com/courier-go/courier/store"
)

type reconcileCmd struct {
	dbFlags
	JSON          bool          `help:"Print JSON instead of tables." env:"COURIER_JSON"`
	Repair        bool          `help:"Put right what can be: release ended leases and idempotency keys left in flight past their lock. Each repair is logged." env:"COURIER_REPAIR"`
	LeaseGrace    time.Duration `help:"A relay's lease counts as stuck once it ended this long ago." default:"0s" env:"COURIER_LEASE_GRACE"`
	RetryAttempts int           `help:"A message waiting for a retry counts as stuck once it failed this many times (0: attempts do not matter)." default:"5" env:"COURIER_RETRY_ATTEMPTS"`
	RetryAge      time.Duration `help:"A message waiting for a retry counts as stuck once it was written this long ago (0: age does not matter)." default:"1h" env:"COURIER_RETRY_AGE"`
	SagaGrace     time.Duration `help:"A saga counts as stuck once its deadline passed this long ago without a runner firing it." default:"1m" env:"COURIER_SAGA_GRACE"`
	KeyGrace      time.Duration `help:"An idempotency key in flight counts as stuck once its lock expired this long ago." default:"0s" env:"COURIER_KEY_GRACE"`
	Limit         int           `help:"At most this many of each kind." default:"1000" env:"COURIER_RECONCILE_LIMIT"`
	FailIfStuck   bool          `name:"fail-if-stuck" help:"Exit 1 when anything stuck is left (after --repair: what it could not repair)." env:"COURIER_FAIL_IF_STUCK"`
}

// reconcileReport is what `courier reconcile` found and repaired.
type reconcileReport struct {
	store.Reconciliation
	// Repaired counts what --repair put right.
	Repaired struct {
		Leases int `json:"leases"`
		Keys   int `json:"idempotency_keys"`
	} `json:"repaired"`
}

func (c *reconcileCmd) Run(e *env) error {
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"--lease-grace", c.LeaseGrace}, {"--retry-age", c.RetryAge}, {"--saga-grace", c.SagaGrace}, {"--key-grace", c.KeyGrace}} {
		if f.d < 0 {
			return fmt.Errorf("%s is %s: use 0 or a positive duration", f.name, f.d)
		}
	}
	if c.RetryAttempts < 0 || c.Limit < 1 {
		return fmt.Errorf("--retry-attempts is %d and --limit %d: use 0 or more attempts and a limit of 1 or more", c.RetryAttempts, c.Limit)
	}
	d, err := c.open(e.ctx, false, "")
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.CheckSchema(e.ctx); err != nil {
		return err
	}
	ops := d.Operations()
	r, err := ops.Reconcile(e.ctx, store.ReconcileOptions{
		LeaseGrace: c.LeaseGrace, RetryAttempts: c.RetryAttempts, RetryAge: c.RetryAge,
		SagaGrace: c.SagaGrace, KeyGrace: c.KeyGrace, Limit: c.Limit,
	})
	if err != nil {
		return err
	}
	rep := reconcileReport{Reconciliation: r}
	left := len(r.ExpiredLeases) + len(r.RetriedRows) + len(r.OverdueSagas) + len(r.StaleKeys)
	if c.Repair {
		if rep.Repaired.Leases, rep.Repaired.Keys, err = repairStuck(e, ops, r); err != nil {
			return err
		}
		left -= rep.Repaired.Leases + rep.Repaired.Keys
	}
	if c.JSON {
		nonNil(&rep.ExpiredLeases)
		nonNil(&rep.RetriedRows)
		nonNil(&rep.OverdueSagas)
		nonNil(&rep.StaleKeys)
		if err := writeJSON(e, rep); err != nil {
			return err
		}
	} else {
		printReconciliation(e.stdout, rep, c.Repair)
	}
	if c.FailIfStuck && left > 0 {
		return fmt.Errorf("%w: %d stuck (see above)", errStuck, left)
	}
	return nil
}

// errStuck is returned with --fail-if-stuck when something stuck is left.
var errStuck = errors.New("reconcile found what is stuck")

// repairStuck releases r's ended leases and stale keys, logging each, and
// leaves the rest: a row failing for long is the relay's to retry (or to
// bury as a dead letter at its max attempts), and a saga past its deadline
// is already due, for its runner (saga.Orchestrator.Run) to fire.
func repairStuck(e *env, ops store.Operations, r store.Reconciliation) (leases, keys int, err error) {
	for _, l := range r.ExpiredLeases {
		ok, err := ops.ReleaseLease(e.ctx, l.ID)
		if err != nil {
			return leases, keys, err
		}
		if ok {
			leases++
			e.log.Info("released an ended lease", "lease", l.ID, "owner", l.Owner, "rows", l.Rows, "ended", l.Until)
		} else {
			e.log.Info("lease already gone (completed or released meanwhile)", "lease", l.ID, "owner", l.Owner)
		}
	}
	for _, k := range r.StaleKeys {
		ok, err := ops.ReleaseKey(e.ctx, k.Scope, k.Key)
		if err != nil {
			return leases, keys, err
		}
		if ok {
			keys++
			e.log.Info("released an idempotency key left in flight", "scope", k.Scope, "key", k.Key, "locked_until", k.LockedUntil)
		} else {
			e.log.Info("idempotency key no longer stale (completed or taken over meanwhile)", "scope", k.Scope, "key", k.Key)
		}
	}
	for _, s := range r.OverdueSagas {
		e.log.Warn("saga past its deadline left for its runner: it is due, and the runner of its type fires it on its next round",
			"saga_type", s.Type, "saga_id", s.ID, "state", s.State, "deadline", s.Deadline)
	}
	for _, row := range r.RetriedRows {
		e.log.Warn("message failing for long left for the relay: fix what the broker rejects, or wait for it to become a dead letter",
			"seq", row.Seq, "message_id", row.MessageID, "topic", row.Topic, "key", row.Key, "attempts", row.Attempts, "last_error", row.LastError)
	}
	return leases, keys, nil
}

func printReconciliation(w io.Writer, rep reconcileReport, repaired bool) {
	r := rep.Reconciliation
	if r.Empty() {
		fmt.Fprintln(w, "nothing stuck")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	defer tw.Flush()
	section := func(title string, n int, header string) bool {
		if n == 0 {
			return false
		}
		fmt.Fprintf(tw, "%s (%d)\n%s\n", title, n, header)
		return true
	}
	if section("ENDED LEASES", len(r.ExpiredLeases), "  lease\towner\trows\tended") {
		for _, l := range r.ExpiredLeases {
			fmt.Fprintf(tw, "  %d\t%s\t%d\t%s\n", l.ID, escape.Line(l.Owner), l.Rows, ago(r.Now, l.Until))
		}
		fmt.Fprintln(tw)
	}
	if section("MESSAGES FAILING FOR LONG", len(r.RetriedRows), "  seq\ttopic\tkey\tattempts\twritten\tnext retry\tlast error") {
		for _, m := range r.RetriedRows {
			fmt.Fprintf(tw, "  %d\t%s\t%s\t%d\t%s\t%s\t%s\n", m.Seq, escape.Line(m.Topic), clip(m.Key, 24), m.Attempts, ago(r.Now, m.CreatedAt),
				relative(r.Now, m.RetryAt), clip(m.LastError, 60))
		}
		fmt.Fprintln(tw)
	}
	if section("SAGAS PAST THEIR DEADLINE", len(r.OverdueSagas), "  type\tid\tphase\tstate\tattempts\tdeadline") {
		for _, s := range r.OverdueSagas {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%d\t%s\n", escape.Line(s.Type), escape.Line(s.ID), escape.Line(s.Phase), escape.Line(s.State), s.Attempts, ago(r.Now, s.Deadline))
		}
		fmt.Fprintln(tw)
	}
	if section("IDEMPOTENCY KEYS LEFT IN FLIGHT", len(r.StaleKeys), "  scope\tkey\tcreated\tlock expired") {
		for _, k := range r.StaleKeys {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", clip(k.Scope, 24), clip(k.Key, 40), ago(r.Now, k.CreatedAt), ago(r.Now, k.LockedUntil))
		}
		fmt.Fprintln(tw)
	}
	switch {
	case repaired:
		fmt.Fprintf(tw, "repaired: %d leases released, %d idempotency keys released\n", rep.Repaired.Leases, rep.Repaired.Keys)
	case len(r.ExpiredLeases)+len(r.StaleKeys) > 0:
		fmt.Fprintln(tw, "run again with --repair to release the ended leases and the keys left in flight")
	}
	if len(r.OverdueSagas) > 0 {
		fmt.Fprintln(tw, "sagas past their deadline are due: start (or fix) the saga runner of their type; it fires them")
	}
	if len(r.RetriedRows) > 0 {
		fmt.Fprintln(tw, "messages failing for long hold back their key's later messages: check the broker's error; they become dead letters at the relay's --max-attempts")
	}
}

// nonNil makes *s an empty slice instead of nil, so that JSON shows [].
func nonNil[T any](s *[]T) {
	if *s == nil {
		*s = []T{}
	}
}
