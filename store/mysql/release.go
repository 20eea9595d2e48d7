package mysql

import (
	"context"
	"fmt"
	"time"

	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/internal/sqlstore"
)

// Release implements store.Releaser. A first look without the turn tells
// whether anything is due; only then does it take a claim's turn (see
// migration 0005), so that releases take turns with each other and with
// claims, and move the due messages in one transaction that inserts only
// while the turn is still its own: a relay frozen in the middle of a
// release holds up the others for the rest of its turn at most, and
// records nothing after it.
func (s *relayStore) Release(ctx context.Context, limit int) (store.Released, error) {
	d := dialect(s.db, s.clock)
	now, err := s.nowTime(ctx)
	if err != nil {
		return store.Released{}, fmt.Errorf("mysql: release scheduled messages: %w", err)
	}
	r, err := d.NextDue(ctx, s.db, now)
	if err != nil || !r.Waiting || r.Next > 0 {
		return r, err
	}
	token, err := s.takeTurn(ctx)
	if err != nil {
		return store.Released{}, fmt.Errorf("mysql: release scheduled messages: %w", err)
	}
	t := &turn{db: s.db, token: token}
	defer t.end(ctx)
	if now, err = s.nowTime(ctx); err != nil {
		return store.Released{}, fmt.Errorf("mysql: release scheduled messages: %w", err)
	}
	guard := sqlstore.Guard{Join: " JOIN courier_outbox_claimer c ON c.id = 1 AND c.holder = ? AND c.until > " + serverNow,
		Args: []any{token}, Lock: " FOR UPDATE"}
	if s.clock != nil {
		guard.Join = " JOIN courier_outbox_claimer c ON c.id = 1 AND c.holder = ? AND c.until > ?"
		guard.Args = append(guard.Args, formatTime(s.clock()))
	}
	tx, err := s.db.BeginTx(ctx, readCommitted())
	if err != nil {
		return store.Released{}, fmt.Errorf("mysql: release scheduled messages: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	if r, err = d.Release(ctx, tx, now, limit, guard); err != nil {
		return store.Released{}, err
	}
	if err := tx.Commit(); err != nil {
		return store.Released{}, fmt.Errorf("mysql: release scheduled messages: %w", err)
	}
	return r, nil
}

// nowTime reads the server's clock (or the store's).
func (s *relayStore) nowTime(ctx context.Context) (time.Time, error) {
	now, err := s.now(ctx)
	if err != nil {
		return time.Time{}, err
	}
	return time.ParseInLocation(datetimeLayout, now, time.UTC)
}
