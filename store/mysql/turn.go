package mysql

import (
	"context"
	"crypto/rand"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/courier-go/courier/store"
)

// A claim's turn: see migration 0005. takeTurnSQL succeeds (one row
// affected, whatever the DSN's clientFoundRows, since holder always changes)
// only when the previous turn has ended.
const (
	takeTurnSQL = `UPDATE courier_outbox_claimer SET holder = ?, until = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND
WHERE id = 1 AND until <= UTC_TIMESTAMP(6)`
	endTurnSQL = `UPDATE courier_outbox_claimer SET until = '1970-01-01 00:00:00' WHERE id = 1 AND holder = ?`
	nowSQL     = `SELECT UTC_TIMESTAMP(6)`
)

// claimTurn bounds a claim: a claim that has not recorded its lease by then
// records nothing (the next turn may have begun), and a relay frozen during
// its turn holds up the other claims at most this long.
const claimTurn = 3 * time.Second

// turn is a claim's turn, named by its token.
type turn struct {
	db    *sql.DB
	token string
	ended bool
}

// end ends the turn, once; when that fails, the turn runs out by itself.
func (t *turn) end(ctx context.Context) {
	if t.ended {
		return
	}
	t.ended = true
	ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), claimTurn)
	defer cancel()
	_, _ = t.db.ExecContext(ectx, endTurnSQL, t.token)
}

// takeTurn waits until the previous claim's turn has ended and takes the
// next one, returning the token that names it.
func (s *relayStore) takeTurn(ctx context.Context) (string, error) {
	return takeTurn(ctx, s.db, s.clock)
}

// ownTurnSQL locks the turn's row while the turn is still the token's: a
// transaction that reads it holds the turn until it ends, and the next
// turn is taken after.
const ownTurnSQL = `SELECT 1 FROM courier_outbox_claimer WHERE id = 1 AND holder = ? AND until > UTC_TIMESTAMP(6) FOR UPDATE`

// inTurn runs fn in a transaction on db during a turn of its own, which it
// takes first and ends after: claims wait for it. clock is the store's, nil
// the server's.
func inTurn(ctx context.Context, db *sql.DB, clock store.Clock, fn func(*sql.Tx) error) error {
	token, err := takeTurn(ctx, db, clock)
	if err != nil {
		return err
	}
	t := &turn{db: db, token: token}
	defer t.end(ctx)
	return turnTx(ctx, db, clock, token, fn)
}

// Statements that bound how long the server waits for a silent client: a
// connection silent for longer is closed, its transaction rolled back.
const (
	silenceSQL        = `SET @courier_wait_timeout = @@SESSION.wait_timeout, SESSION wait_timeout = %d`
	restoreSilenceSQL = `SET SESSION wait_timeout = @courier_wait_timeout`
)

// turnTx runs fn in a READ COMMITTED transaction that first locks the
// turn's row while the turn of token lasts (ownTurn), and commits it when
// fn succeeds. Every claim waits for that lock. MySQL waits for a silent
// client for hours (wait_timeout) before it ends its transaction, so a
// process frozen in this one (SIGSTOP, a paused VM) would stop every claim
// as long: the transaction runs on a connection of its own whose server
// waits for it at most a turn, and the connection's own wait_timeout is
// restored after (or it is closed).
func turnTx(ctx context.Context, db *sql.DB, clock store.Clock, token string, fn func(*sql.Tx) error) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, fmt.Sprintf(silenceSQL, int(claimTurn.Seconds()))); err != nil {
		return fmt.Errorf("bound the transaction's silence: %w", err)
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), claimTurn)
		defer cancel()
		if _, err := conn.ExecContext(rctx, restoreSilenceSQL); err != nil {
			_ = conn.Raw(func(any) error { return driver.ErrBadConn }) // closed, not back to the pool
		}
	}()
	tx, err := conn.BeginTx(ctx, readCommitted())
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // after Commit, sql.ErrTxDone
	if err := ownTurn(ctx, tx, clock, token); err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// ownTurn locks the turn's row in tx, or fails when the turn of token has
// run out.
func ownTurn(ctx context.Context, tx *sql.Tx, clock store.Clock, token string) error {
	q, args := clocked(clock, ownTurnSQL, token)
	var one int
	err := tx.QueryRowContext(ctx, q, args...).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("the claim turn ran out (%s) before the work in it began; try again", claimTurn)
	}
	return err
}

func takeTurn(ctx context.Context, db *sql.DB, clock store.Clock) (string, error) {
	var b [16]byte
	_, _ = rand.Read(b[:])
	token := hex.EncodeToString(b[:])
	const firstWait = 500 * time.Microsecond
	wait := firstWait
	for {
		q, args := clocked(clock, takeTurnSQL, token, claimTurn.Microseconds())
		res, err := db.ExecContext(ctx, q, args...)
		if err != nil {
			return "", fmt.Errorf("take a turn: %w", err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return "", fmt.Errorf("take a turn: %w", err)
		}
		if n == 1 {
			return token, nil
		}
		var exists int
		if wait == firstWait { // a turn never taken: is the row there at all?
			err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM courier_outbox_claimer WHERE id = 1").Scan(&exists)
			if err != nil {
				return "", fmt.Errorf("take a turn: %w", err)
			}
			if exists == 0 {
				return "", errors.New("the row of courier_outbox_claimer is missing: run Migrate (or `courier migrate`) again to restore it")
			}
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return "", ctx.Err()
		}
		wait = min(2*wait, 8*time.Millisecond)
	}
}
