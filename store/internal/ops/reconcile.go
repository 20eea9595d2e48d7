package ops

import (
	"context"
	"time"

	"github.com/courier-go/courier/store"
)

// defaultLimit is ReconcileOptions.Limit's and Trim.Limit's default.
const defaultLimit = 1000

// Reconcile implements store.Operations. Each list is one bounded query on
// an index: leases by until (the table is small), rows waiting for a retry
// by the outbox's partial retry index, sagas by their due index, in-flight
// keys by their lock.
func (o Ops) Reconcile(ctx context.Context, opts store.ReconcileOptions) (store.Reconciliation, error) {
	if opts.Limit <= 0 {
		opts.Limit = defaultLimit
	}
	now, err := o.now(ctx)
	if err != nil {
		return store.Reconciliation{}, err
	}
	r := store.Reconciliation{Now: now}
	if r.ExpiredLeases, err = o.leases(ctx, "until <= ?", []any{o.d.Time.Encode(now.Add(-opts.LeaseGrace))}, opts.Limit); err != nil {
		return r, o.errorf("reconcile: leases: %w", err)
	}
	if opts.RetryAttempts > 0 || opts.RetryAge > 0 {
		if r.RetriedRows, err = o.retried(ctx, now, opts); err != nil {
			return r, o.errorf("reconcile: retried rows: %w", err)
		}
	}
	err = o.d.DB.Query(ctx, `SELECT saga_type, id, state, phase, attempts, deadline FROM courier_sagas
WHERE deadline IS NOT NULL AND deadline <= ? AND `+active+` ORDER BY deadline LIMIT ?`,
		[]any{o.d.SagaTime.Encode(now.Add(-opts.SagaGrace)), opts.Limit}, func(scan func(...any) error) error {
			var s store.OverdueSaga
			if err := scan(&s.Type, &s.ID, &s.State, &s.Phase, &s.Attempts, o.d.SagaTime.Dest(&s.Deadline)); err != nil {
				return err
			}
			r.OverdueSagas = append(r.OverdueSagas, s)
			return nil
		})
	if err != nil {
		return r, o.errorf("reconcile: sagas: %w", err)
	}
	err = o.d.DB.Query(ctx, `SELECT scope, idem_key, created_at, locked_until FROM courier_idempotency_keys
WHERE state = 'in_flight' AND locked_until <= ? ORDER BY locked_until LIMIT ?`,
		[]any{o.d.Time.Encode(now.Add(-opts.KeyGrace)), opts.Limit}, func(scan func(...any) error) error {
			var k store.StaleKey
			if err := scan(&k.Scope, &k.Key, o.d.Time.Dest(&k.CreatedAt), o.d.Time.Dest(&k.LockedUntil)); err != nil {
				return err
			}
			r.StaleKeys = append(r.StaleKeys, k)
			return nil
		})
	if err != nil {
		return r, o.errorf("reconcile: idempotency keys: %w", err)
	}
	return r, nil
}

// retried lists the rows waiting for a retry that have failed at least
// opts.RetryAttempts times or were written more than opts.RetryAge ago.
func (o Ops) retried(ctx context.Context, now time.Time, opts store.ReconcileOptions) ([]store.RetriedRow, error) {
	attempts, before := opts.RetryAttempts, now.Add(-opts.RetryAge)
	if attempts <= 0 {
		attempts = 1 << 30
	}
	if opts.RetryAge <= 0 {
		before = time.Unix(0, 0)
	}
	var out []store.RetriedRow
	err := o.d.DB.Query(ctx, `SELECT id, CAST(message_id AS CHAR(36)), topic, ordering_key, attempts, coalesce(last_error, ''), created_at, retry_at
FROM courier_outbox WHERE retry_at IS NOT NULL AND (attempts >= ? OR created_at <= ?) ORDER BY id LIMIT ?`,
		[]any{attempts, o.d.Time.Encode(before), opts.Limit}, func(scan func(...any) error) error {
			var r store.RetriedRow
			if err := scan(&r.Seq, &r.MessageID, &r.Topic, &r.Key, &r.Attempts, &r.LastError,
				o.d.Time.Dest(&r.CreatedAt), o.d.Time.Dest(&r.RetryAt)); err != nil {
				return err
			}
			out = append(out, r)
			return nil
		})
	return out, err
}

// ReleaseLease implements store.Operations.
func (o Ops) ReleaseLease(ctx context.Context, id int64) (bool, error) {
	now, err := o.now(ctx)
	if err != nil {
		return false, err
	}
	n, err := o.d.DB.Exec(ctx, `DELETE FROM courier_outbox_leases WHERE id = ? AND until <= ?`, id, o.d.Time.Encode(now))
	if err != nil {
		return false, o.errorf("release lease %d: %w", id, err)
	}
	return n > 0, nil
}

// ReleaseKey implements store.Operations.
func (o Ops) ReleaseKey(ctx context.Context, scope, key string) (bool, error) {
	now, err := o.now(ctx)
	if err != nil {
		return false, err
	}
	n, err := o.d.DB.Exec(ctx, `DELETE FROM courier_idempotency_keys
WHERE scope = ? AND idem_key = ? AND state = 'in_flight' AND locked_until <= ?`, scope, key, o.d.Time.Encode(now))
	if err != nil {
		return false, o.errorf("release idempotency key %q in scope %q: %w", key, scope, err)
	}
	return n > 0, nil
}

// TryLock implements store.Operations.
func (o Ops) TryLock(ctx context.Context, name string) (func(), bool, error) {
	if o.d.TryLock == nil {
		return func() {}, true, nil
	}
	release, ok, err := o.d.TryLock(ctx, name)
	if err != nil {
		return nil, false, o.errorf("lock %q: %w", name, err)
	}
	return release, ok, nil
}
