package ops

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/courier-go/courier/store"
)

// maxLeases caps the lease rows Status and Reconcile read.
const maxLeases = 10_000

// Status implements store.Operations. It reads the outbox's pending rows
// (the backlog, which the outbox table holds alone: published rows leave
// it), the lease, dead-letter, held, parked and failure tables whole, and counts
// the growing tables up to store.CountLimit.
func (o Ops) Status(ctx context.Context) (store.Status, error) {
	now, err := o.now(ctx)
	if err != nil {
		return store.Status{}, err
	}
	st := store.Status{Now: now, Outbox: store.Stats{Now: now}}
	for _, step := range []struct {
		what string
		fn   func(context.Context, time.Time, *store.Status) error
	}{
		{"topics", o.topics},
		{"leases", o.relays},
		{"published rows", o.published},
		{"consumers", o.consumers},
		{"sagas", o.sagas},
		{"idempotency keys", o.keys},
		{"scheduled messages", o.scheduled},
		{"replication slots", o.slots},
	} {
		if err := step.fn(ctx, now, &st); err != nil {
			return st, o.errorf("status: %s: %w", step.what, err)
		}
	}
	return st, nil
}

// scheduled counts the scheduled messages that wait, and those due, through
// the index on due times that waiting messages are in (reading at most
// store.CountLimit+1 entries: no estimate, which would count the released
// ones too).
func (o Ops) scheduled(ctx context.Context, now time.Time, st *store.Status) error {
	var n int64
	if err := o.one(ctx, `SELECT count(*) FROM (SELECT 1 AS one FROM courier_outbox_scheduled WHERE released_at IS NULL LIMIT `+
		fmt.Sprint(store.CountLimit+1)+`) AS c`, nil, &n); err != nil {
		return err
	}
	st.Scheduled.Waiting = store.Count{N: min(n, store.CountLimit), Estimated: n > store.CountLimit}
	if n == 0 {
		return nil
	}
	if err := o.one(ctx, `SELECT min(due_at) FROM courier_outbox_scheduled WHERE released_at IS NULL`, nil,
		o.d.Time.Dest(&st.Scheduled.NextDue)); err != nil {
		return err
	}
	return o.one(ctx, `SELECT count(*) FROM (SELECT 1 AS one FROM courier_outbox_scheduled WHERE released_at IS NULL AND due_at <= ? LIMIT `+
		fmt.Sprint(store.CountLimit+1)+`) AS c`, []any{o.d.Time.Encode(now)}, &st.Scheduled.Due)
}

func (o Ops) slots(ctx context.Context, _ time.Time, st *store.Status) error {
	if o.d.Slots == "" {
		return nil
	}
	return o.d.DB.Query(ctx, o.d.Slots, nil, func(scan func(...any) error) error {
		var (
			s   store.ReplicationSlot
			pid *int32
		)
		if err := scan(&s.Name, &s.Plugin, &s.Active, &pid, &s.WALStatus, &s.LagBytes, &s.RetainedBytes, &s.LagSeconds, &s.Failover, &s.Standbys); err != nil {
			return err
		}
		if pid != nil {
			s.ActivePID = *pid
		}
		st.Slots = append(st.Slots, s)
		return nil
	})
}

func (o Ops) topics(ctx context.Context, now time.Time, st *store.Status) error {
	t := o.d.Time.Encode(now)
	byTopic := Topics{}
	topic := byTopic.Get
	var (
		name                string
		pending, backoff, n int64
		oldest              time.Time
	)
	err := o.d.DB.Query(ctx, `SELECT topic, count(*), coalesce(sum(CASE WHEN retry_at > ? THEN 1 ELSE 0 END), 0), min(created_at)
FROM courier_outbox GROUP BY topic`, []any{t}, func(scan func(...any) error) error {
		oldest = time.Time{}
		if err := scan(&name, &pending, &backoff, o.d.Time.Dest(&oldest)); err != nil {
			return err
		}
		ts := topic(name)
		ts.Pending, ts.InBackoff, ts.OldestPending = pending, backoff, oldest
		return nil
	})
	if err != nil {
		return err
	}
	err = o.d.DB.Query(ctx, o.d.LeasedByTopic, []any{t}, func(scan func(...any) error) error {
		if err := scan(&name, &n); err != nil {
			return err
		}
		topic(name).Leased = n
		return nil
	})
	if err != nil {
		return err
	}
	var holds int64
	err = o.d.DB.Query(ctx, `SELECT topic, count(*), coalesce(sum(CASE WHEN holds = TRUE THEN 1 ELSE 0 END), 0), min(CASE WHEN holds = TRUE THEN dead_at END)
FROM courier_outbox_dead_letters GROUP BY topic`, nil, func(scan func(...any) error) error {
		oldest = time.Time{}
		if err := scan(&name, &n, &holds, o.d.Time.Dest(&oldest)); err != nil {
			return err
		}
		ts := topic(name)
		ts.DeadLetters, ts.HeldKeys, ts.OldestHold = n, holds, oldest
		return nil
	})
	if err != nil {
		return err
	}
	err = o.d.DB.Query(ctx, `SELECT topic, count(*) FROM courier_outbox_held GROUP BY topic`, nil, func(scan func(...any) error) error {
		if err := scan(&name, &n); err != nil {
			return err
		}
		topic(name).Held = n
		return nil
	})
	if err != nil {
		return err
	}
	byTopic.Fill(st)
	return nil
}

func (o Ops) leases(ctx context.Context, where string, args []any, limit int) ([]store.Lease, error) {
	var out []store.Lease
	err := o.d.DB.Query(ctx, `SELECT id, owner, `+o.d.LeaseRows+`, created_at, until FROM courier_outbox_leases
WHERE `+where+` ORDER BY until, id LIMIT ?`, append(args, limit), func(scan func(...any) error) error {
		var l store.Lease
		if err := scan(&l.ID, &l.Owner, &l.Rows, o.d.Time.Dest(&l.CreatedAt), o.d.Time.Dest(&l.Until)); err != nil {
			return err
		}
		out = append(out, l)
		return nil
	})
	return out, err
}

func (o Ops) relays(ctx context.Context, now time.Time, st *store.Status) error {
	ls, err := o.leases(ctx, "1 = 1", nil, maxLeases)
	if err != nil {
		return err
	}
	byOwner := map[string]*store.RelayStatus{}
	for _, l := range ls {
		r := byOwner[l.Owner]
		if r == nil {
			r = &store.RelayStatus{Owner: l.Owner}
			byOwner[l.Owner] = r
		}
		r.Leases++
		r.Rows += l.Rows
		if !l.Until.After(now) {
			r.Expired++
		}
		if l.Until.After(r.Until) {
			r.Until = l.Until
		}
	}
	for _, r := range byOwner {
		st.Relays = append(st.Relays, *r)
	}
	slices.SortFunc(st.Relays, func(a, b store.RelayStatus) int { return cmp.Compare(a.Owner, b.Owner) })
	return nil
}

func (o Ops) published(ctx context.Context, _ time.Time, st *store.Status) error {
	var err error
	if st.Published, err = o.count(ctx, "courier_outbox_published", "1 = 1", nil, 0); err != nil {
		return err
	}
	if st.InboxMarkers, err = o.count(ctx, "courier_inbox", "1 = 1", nil, 0); err != nil {
		return err
	}
	if o.d.OrderedTimes {
		return o.one(ctx, `SELECT min(published_at) FROM courier_outbox_published`, nil, o.d.Time.Dest(&st.OldestPublished))
	}
	return nil
}

func (o Ops) consumers(ctx context.Context, _ time.Time, st *store.Status) error {
	by := map[string]*store.ConsumerStatus{}
	consumer := func(name string) *store.ConsumerStatus {
		if by[name] == nil {
			by[name] = &store.ConsumerStatus{Consumer: name}
		}
		return by[name]
	}
	var (
		name    string
		a, b, h int64
		oldest  time.Time
	)
	err := o.d.DB.Query(ctx, `SELECT consumer, count(*), coalesce(sum(CASE WHEN replay_requested IS NULL THEN 0 ELSE 1 END), 0),
coalesce(sum(CASE WHEN behind IS NULL THEN 0 ELSE 1 END), 0), min(parked_at)
FROM courier_inbox_dead_letters GROUP BY consumer`, nil, func(scan func(...any) error) error {
		oldest = time.Time{}
		if err := scan(&name, &a, &b, &h, o.d.Time.Dest(&oldest)); err != nil {
			return err
		}
		c := consumer(name)
		c.Parked, c.ReplayRequested, c.Held, c.OldestParked = a, b, h, oldest
		return nil
	})
	if err != nil {
		return err
	}
	err = o.d.DB.Query(ctx, `SELECT consumer, count(*), min(since) FROM courier_inbox_holds GROUP BY consumer`, nil,
		func(scan func(...any) error) error {
			oldest = time.Time{}
			if err := scan(&name, &a, o.d.Time.Dest(&oldest)); err != nil {
				return err
			}
			c := consumer(name)
			c.HeldKeys, c.OldestHold = a, oldest
			return nil
		})
	if err != nil {
		return err
	}
	err = o.d.DB.Query(ctx, `SELECT consumer, count(DISTINCT message_id), count(*), min(failed_at)
FROM courier_inbox_failures GROUP BY consumer`, nil, func(scan func(...any) error) error {
		oldest = time.Time{}
		if err := scan(&name, &a, &b, o.d.Time.Dest(&oldest)); err != nil {
			return err
		}
		c := consumer(name)
		c.FailingMessages, c.Failures, c.OldestFailure = a, b, oldest
		return nil
	})
	if err != nil {
		return err
	}
	for _, c := range by {
		st.Consumers = append(st.Consumers, *c)
	}
	slices.SortFunc(st.Consumers, func(a, b store.ConsumerStatus) int { return cmp.Compare(a.Consumer, b.Consumer) })
	return nil
}

// active is the SQL condition of unfinished sagas.
const active = `phase IN ('running', 'compensating')`

func (o Ops) sagas(ctx context.Context, now time.Time, st *store.Status) error {
	err := o.d.DB.Query(ctx, `SELECT saga_type, phase, state, count(*) FROM courier_sagas WHERE `+active+`
GROUP BY saga_type, phase, state`, nil, func(scan func(...any) error) error {
		var c store.SagaCount
		if err := scan(&c.Type, &c.Phase, &c.State, &c.Count); err != nil {
			return err
		}
		st.Sagas = append(st.Sagas, c)
		return nil
	})
	if err != nil {
		return err
	}
	// Finished instances, up to CountLimit of them: retention keeps them
	// few, and a count past that says enough.
	err = o.d.DB.Query(ctx, `SELECT saga_type, phase, count(*) FROM (SELECT saga_type, phase FROM courier_sagas
WHERE phase IN ('completed', 'cancelled') LIMIT ?) AS f GROUP BY saga_type, phase`, []any{store.CountLimit + 1},
		func(scan func(...any) error) error {
			var c store.SagaCount
			if err := scan(&c.Type, &c.Phase, &c.Count); err != nil {
				return err
			}
			st.Sagas = append(st.Sagas, c)
			return nil
		})
	if err != nil {
		return err
	}
	var finished int64
	for _, c := range st.Sagas {
		if c.State == "" {
			finished += c.Count
		}
	}
	for i := range st.Sagas {
		st.Sagas[i].Estimated = st.Sagas[i].State == "" && finished > store.CountLimit
	}
	slices.SortFunc(st.Sagas, func(a, b store.SagaCount) int {
		return cmp.Or(cmp.Compare(a.Type, b.Type), cmp.Compare(a.Phase, b.Phase), cmp.Compare(a.State, b.State))
	})
	return o.d.DB.Query(ctx, `SELECT saga_type, count(*), min(deadline) FROM courier_sagas
WHERE deadline IS NOT NULL AND deadline <= ? AND `+active+` GROUP BY saga_type ORDER BY saga_type`,
		[]any{o.d.SagaTime.Encode(now)}, func(scan func(...any) error) error {
			var s store.OverdueSagas
			if err := scan(&s.Type, &s.Count, o.d.SagaTime.Dest(&s.OldestDeadline)); err != nil {
				return err
			}
			st.OverdueSagas = append(st.OverdueSagas, s)
			return nil
		})
}

func (o Ops) keys(ctx context.Context, now time.Time, st *store.Status) error {
	err := o.one(ctx, `SELECT count(*), coalesce(sum(CASE WHEN locked_until <= ? THEN 1 ELSE 0 END), 0)
FROM courier_idempotency_keys WHERE state = 'in_flight'`, []any{o.d.Time.Encode(now)}, &st.Keys.InFlight, &st.Keys.LockExpired)
	if err != nil {
		return err
	}
	st.Keys.Completed, err = o.count(ctx, "courier_idempotency_keys", "state = 'done'", nil, st.Keys.InFlight)
	return err
}
