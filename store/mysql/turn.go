package mysql

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"time"
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
	var b [16]byte
	_, _ = rand.Read(b[:])
	token := hex.EncodeToString(b[:])
	const firstWait = 500 * time.Microsecond
	wait := firstWait
	for {
		res, err := s.exec(ctx, s.db, takeTurnSQL, token, claimTurn.Microseconds())
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
			err := s.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM courier_outbox_claimer WHERE id = 1").Scan(&exists)
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
