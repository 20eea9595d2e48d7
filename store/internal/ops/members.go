package ops

import (
	"context"
	"time"
)

// Beat implements store.Operations: it replaces owner's row, then reads the rows that have not expired, in one transaction.
func (o Ops) Beat(ctx context.Context, owner string, ttl time.Duration) ([]string, error) {
	now, err := o.now(ctx)
	if err != nil {
		return nil, err
	}
	var owners []string
	err = o.d.DB.Tx(ctx, func(db DB) error {
		until := o.d.Time.Encode(now.Add(ttl))
		// Delete and insert, not update: MySQL counts an update that
		// changes nothing as affecting no row.
		if _, err := db.Exec(ctx, `DELETE FROM courier_relay_members WHERE owner = ?`, owner); err != nil {
			return err
		}
		if _, err := db.Exec(ctx, `INSERT INTO courier_relay_members (owner, expires_at) VALUES (?, ?)`, owner, until); err != nil {
			return err
		}
		if _, err := db.Exec(ctx, `DELETE FROM courier_relay_members WHERE expires_at <= ?`, o.d.Time.Encode(now.Add(-time.Hour))); err != nil {
			return err
		}
		return db.Query(ctx, `SELECT owner FROM courier_relay_members WHERE expires_at > ? ORDER BY owner`,
			[]any{o.d.Time.Encode(now)}, func(scan func(...any) error) error {
				var s string
				if err := scan(&s); err != nil {
					return err
				}
				owners = append(owners, s)
				return nil
			})
	})
	if err != nil {
		return nil, o.errorf("heartbeat of %q: %w", owner, err)
	}
	return owners, nil
}

// Leave implements store.Operations.
func (o Ops) Leave(ctx context.Context, owner string) error {
	if _, err := o.d.DB.Exec(ctx, `DELETE FROM courier_relay_members WHERE owner = ?`, owner); err != nil {
		return o.errorf("leave %q: %w", owner, err)
	}
	return nil
}
