package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/internal/columns"
	"github.com/courier-go/courier/store/internal/sqlstore"
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

// SQLIdempotency returns the idempotency-key store for handlers that work in
// database/sql transactions on db, a pool opened with [Open] (or with a DSN
// of your own that sets a busy timeout and _txlock=immediate).
//
// A claim is one immediate transaction: the upsert and the read of the
// record that follows it hold the write lock together, so concurrent claims
// of one key, in any process, run one after another and exactly one of them
// owns the key. Lock and expiry times are this process's clock.
//
// Idempotent requests run one at a time per database file, unrelated keys
// included. SQLite has one writer, and the request's transaction (InTx)
// begins with BEGIN IMMEDIATE, so it holds the write lock from before the
// handler runs until it commits. The next idempotent request, whatever its
// key, waits for it, and so does every other writer of the file (outbox
// writes, relay claims, inbox transactions). In the process, claims and the
// transactions of InTx take turns in arrival order (see [SQLInbox]): a retry
// of a key in flight waits for the first request and then usually gets its
// stored response rather than a 409. Other processes wait through their
// busy timeout (10 s with [Open]); a request that holds the lock longer
// makes their claims fail, and the middleware answers those with 500. Keep
// handlers short: no calls to other services inside them (write an outbox
// message and let a consumer make the call). Use PostgreSQL or MySQL when
// requests with different keys must run in parallel.
//
// That is not lifted with deferred transactions, which would let handlers
// read in parallel: a handler's first write would still wait for the lock,
// and in WAL mode a transaction that has read before another one committed
// cannot take the write lock at all. It fails with SQLITE_BUSY at once,
// without waiting, a failure every idempotent request would then risk.
func SQLIdempotency(db *sql.DB) store.Idempotency[*sql.Tx] { return sqlIdempotency(db, nil) }

// sqlIdempotency is SQLIdempotency with clock's time instead of this
// process's when clock is not nil.
func sqlIdempotency(db *sql.DB, clock store.Clock) sqlIdem {
	turn := newQueue()
	d := withClock(dialect(db, turn), clock)
	return sqlIdem{Keys: d.Keys(), d: d, turn: turn, clock: clock}
}

type sqlIdem struct {
	sqlstore.Keys
	d     sqlstore.Dialect
	turn  queue // shared with InTx's transactions
	clock store.Clock
}

func (s sqlIdem) Claim(ctx context.Context, c store.KeyClaim) (store.KeyRecord, bool, error) {
	rec := store.KeyRecord{Scope: c.Scope, Key: c.Key}
	var mine bool
	owner := c.Owner.String()
	err := s.turn.run(ctx, func() error {
		return immediate(ctx, s.d.DB, func(conn *sql.Conn) error {
			now := nowOf(s.clock)
			if _, err := conn.ExecContext(ctx, claimKeySQL, c.Scope, c.Key, columns.Payload(c.Fingerprint), owner,
				now.Add(c.LockFor).UnixMicro(), now.UnixMicro(), now.Add(c.Retain).UnixMicro()); err != nil {
				return err
			}
			var err error
			mine, err = s.d.ReadKey(ctx, conn, &rec, owner)
			return err
		})
	})
	if err != nil {
		return rec, false, fmt.Errorf("sqlite: claim idempotency key: %w", err)
	}
	return rec, mine, nil
}
