package sqlite

import (
	"context"
	"database/sql"

	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/internal/columns"
	"github.com/courier-go/courier/store/internal/sqltx"
)

// claimKeySQL inserts the record, or takes over an in-flight one whose lock
// expired (same fingerprint only), or replaces one past its expiry; a record
// that is none of these stays as it is. ?6 is now.
const claimKeySQL = `INSERT INTO courier_idempotency_keys AS k
    (scope, idem_key, fingerprint, state, owner, locked_until, created_at, expires_at)
VALUES (?1, ?2, ?3, 'in_flight', ?4, ?5, ?6, ?7)
ON CONFLICT (scope, idem_key) DO UPDATE
    SET fingerprint = excluded.fingerprint, state = 'in_flight', owner = excluded.owner,
        locked_until = excluded.locked_until, status = NULL, headers = NULL, body = NULL,
        created_at = excluded.created_at, expires_at = excluded.expires_at
    WHERE k.expires_at <= ?6
       OR (k.state = 'in_flight' AND k.locked_until <= ?6 AND k.fingerprint = excluded.fingerprint)`

// idempotency returns the idempotency-key store on db, with clock's time
// instead of this process's when clock is not nil. A claim is one
// immediate transaction: the upsert and the read of the record that
// follows it hold the write lock together, so concurrent claims of one key,
// in any process, run one after another and exactly one of them owns the
// key. Claims and the transactions of InTx take turns in the process (see
// the package documentation, Idempotent requests).
func idempotency(db *sql.DB, clock store.Clock) store.Idempotency[*sql.Tx] {
	turn := sqltx.NewQueue()
	d := dialect(db, clock).Queued(turn)
	return d.Idempotency(func(ctx context.Context, c store.KeyClaim) (store.KeyRecord, bool, error) {
		rec := store.KeyRecord{Scope: c.Scope, Key: c.Key}
		var mine bool
		owner := c.Owner.String()
		err := turn.Run(ctx, func() error {
			return immediate(ctx, db, func(conn *sql.Conn) error {
				now := nowOf(clock)
				if _, err := conn.ExecContext(ctx, claimKeySQL, c.Scope, c.Key, columns.Payload(c.Fingerprint), owner,
					now.Add(c.LockFor).UnixMicro(), now.UnixMicro(), now.Add(c.Retain).UnixMicro()); err != nil {
					return err
				}
				var err error
				mine, err = d.ReadKey(ctx, conn, &rec, owner)
				return err
			})
		})
		return rec, mine, err
	})
}
