package mysql

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/internal/columns"
	"github.com/courier-go/courier/store/internal/sqltx"
)

// leaseLiveSQL guards Complete: a relay whose lease has ended changes
// nothing, since the rows may belong to another relay by then. The lease
// row stays locked until Complete commits, so a claim cannot drop it as
// expired in between.
const leaseLiveSQL = `SELECT id FROM courier_outbox_leases WHERE id = ? AND owner = ? AND until > UTC_TIMESTAMP(6) FOR UPDATE`

const deleteSQL = `DELETE FROM courier_outbox WHERE %s`

var archiveSQL = `INSERT INTO courier_outbox_published
    (id, ` + columns.Names + `, created_at, attempts, published_at)
SELECT id, ` + columns.Names + `, created_at, attempts, UTC_TIMESTAMP(6)
FROM courier_outbox WHERE %s`

// failuresTable unpacks a JSON array of failures (see failureJSON).
const failuresTable = `JSON_TABLE(?, '$[*]' COLUMNS (
    id       BIGINT     PATH '$.id',
    err      MEDIUMTEXT PATH '$.error',
    delay_us BIGINT     PATH '$.delay_us',
    counted  INT        PATH '$.counted',
    hold     INT        PATH '$.hold')) AS f`

// historyAppend appends a failure to o.history, keeping the latest
// columns.HistoryCap.
var historyAppend = `JSON_ARRAY_APPEND(
    IF(JSON_LENGTH(COALESCE(o.history, JSON_ARRAY())) >= ` + strconv.Itoa(columns.HistoryCap) + `, JSON_REMOVE(o.history, '$[0]'), COALESCE(o.history, JSON_ARRAY())),
    '$',
    JSON_OBJECT('at', DATE_FORMAT(UTC_TIMESTAMP(6), '%Y-%m-%dT%H:%i:%s.%fZ'),
                'error', f.err,
                'counted', JSON_EXTRACT(IF(f.counted, 'true', 'false'), '$')))`

var retrySQL = `UPDATE courier_outbox AS o JOIN ` + failuresTable + ` ON o.id = f.id
SET o.attempts = o.attempts + f.counted,
    o.last_error = f.err,
    o.retry_at = UTC_TIMESTAMP(6) + INTERVAL f.delay_us MICROSECOND,
    o.history = ` + historyAppend

var deadSQL = `INSERT INTO courier_outbox_dead_letters
    (id, ` + columns.Names + `, created_at, attempts, last_error, history, dead_at, holds)
SELECT o.id, ` + columns.List("o.") + `, o.created_at, o.attempts + f.counted, f.err, ` + historyAppend + `, UTC_TIMESTAMP(6), f.hold <> 0
FROM courier_outbox AS o JOIN ` + failuresTable + ` ON o.id = f.id`

const endLeaseSQL = `DELETE FROM courier_outbox_leases WHERE id = ? AND owner = ?`

// failureJSON is one failure as failuresTable reads it.
type failureJSON struct {
	ID      int64  `json:"id"`
	Error   string `json:"error"`
	DelayUS int64  `json:"delay_us"`
	Counted int    `json:"counted"`
	Hold    int    `json:"hold"`
}

// recordFailures runs query, retrySQL or deadSQL, for the failures fs, if
// any.
func (s *relayStore) recordFailures(ctx context.Context, tx *sql.Tx, query string, fs []store.Failure) error {
	if len(fs) == 0 {
		return nil
	}
	arg, err := failuresJSON(fs)
	if err != nil {
		return err
	}
	_, err = s.exec(ctx, tx, query, arg)
	return err
}

func failuresJSON(fs []store.Failure) (string, error) {
	out := make([]failureJSON, len(fs))
	for i, f := range fs {
		counted := 0
		if f.Counted {
			counted = 1
		}
		hold := 0
		if f.Hold {
			hold = 1
		}
		out[i] = failureJSON{ID: f.Seq, Error: f.Error, DelayUS: f.Delay.Microseconds(), Counted: counted, Hold: hold}
	}
	b, err := json.Marshal(out)
	return string(b), err
}

// Complete implements store.RelayStore. The whole outcome is written in one
// transaction; ending the lease releases the rows it does not mention.
func (s *relayStore) Complete(ctx context.Context, owner string, lease int64, o store.Outcome) error {
	if err := s.complete(ctx, owner, lease, o); err != nil {
		return fmt.Errorf("mysql: complete batch: %w", err)
	}
	return nil
}

func (s *relayStore) complete(ctx context.Context, owner string, lease int64, o store.Outcome) error {
	return sqltx.InTx(ctx, s.db, readCommitted(), "", func(tx *sql.Tx) error {
		var id int64
		q, args := clocked(s.clock, leaseLiveSQL, lease, owner)
		err := tx.QueryRowContext(ctx, q, args...).Scan(&id)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			// Expired or not ours: change nothing but our own lease row.
		case err != nil:
			return fmt.Errorf("check lease: %w", err)
		default:
			if err := s.record(ctx, tx, o); err != nil {
				return err
			}
		}
		if _, err := tx.ExecContext(ctx, endLeaseSQL, lease, owner); err != nil {
			return fmt.Errorf("end lease: %w", err)
		}
		return nil
	})
}

func (s *relayStore) record(ctx context.Context, tx *sql.Tx, o store.Outcome) error {
	if len(o.Published) > 0 {
		in := idsIn(o.Published)
		if s.keepPublished {
			if _, err := s.exec(ctx, tx, fmt.Sprintf(archiveSQL, in)); err != nil {
				return fmt.Errorf("archive published: %w", err)
			}
		}
		if _, err := tx.ExecContext(ctx, fmt.Sprintf(deleteSQL, in)); err != nil {
			return fmt.Errorf("delete published: %w", err)
		}
	}
	if err := s.recordFailures(ctx, tx, retrySQL, o.Retry); err != nil {
		return fmt.Errorf("record retries: %w", err)
	}
	if err := s.recordFailures(ctx, tx, deadSQL, o.Dead); err != nil {
		return fmt.Errorf("record dead letters: %w", err)
	}
	if len(o.Dead) > 0 {
		ids := make([]int64, len(o.Dead))
		for i, f := range o.Dead {
			ids[i] = f.Seq
		}
		if _, err := tx.ExecContext(ctx, fmt.Sprintf(deleteSQL, idsIn(ids))); err != nil {
			return fmt.Errorf("delete dead letters: %w", err)
		}
	}
	return nil
}
