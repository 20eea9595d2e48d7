package sqlite

import (
	"context"
	"database/sql"

	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/internal/sqlstore"
)

// Release implements store.Releaser. A first look without the write lock
// tells whether anything is due; only then does it move the due messages,
// in an immediate transaction: SQLite's one writer is what serialises
// releases.
func (s *relayStore) Release(ctx context.Context, limit int) (store.Released, error) {
	d := dialect(s.db, s.clock)
	now := nowOf(s.clock)
	r, err := d.NextDue(ctx, s.db, now)
	if err != nil || !r.Waiting || r.Next > 0 {
		return r, err
	}
	err = s.write(ctx, func(conn *sql.Conn) error {
		now = nowOf(s.clock)
		r, err = d.Release(ctx, conn, now, limit, sqlstore.Guard{})
		return err
	})
	return r, err
}
