package mysql

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/internal/columns"
	"github.com/courier-go/courier/store/internal/sqlstore"
	"github.com/courier-go/courier/store/internal/sqltx"
)

// leaseLiveSQL guards Complete: a relay whose lease has ended changes
// nothing, since the rows may belong to another relay by then. The lease
// row stays locked until Complete commits, so a claim cannot drop it as
// expired in between.
const leaseLiveSQL = `SELECT id FROM courier_outbox_leases WHERE id = ? AND owner = ? AND until > UTC_TIMESTAMP(6) FOR UPDATE`

const deleteSQL = `DELETE FROM courier_outbox WHERE %s`

// lockRowsSQL locks the batch's rows that no other transaction holds, in
// the Complete of a lease claimed while another had expired (the store's
// takeovers). A row another holds is being recorded by the relay whose
// lease on it ran out, after it published it too, and which may be frozen
// mid-transaction (a stopped VM, a swapped-out process): waiting for it
// would stop this batch's other rows for as long as it stays frozen.
// Leaving the row to it loses nothing: when it rolls back, the row is
// claimed and published again (a duplicate) once this Complete's lease,
// kept for the rows left (keepLeaseSQL), has run out. Other leases' rows are held
// by no one else, and their Complete skips the statement.
const lockRowsSQL = `SELECT id FROM courier_outbox WHERE %s FOR UPDATE SKIP LOCKED`

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

// keepLeaseSQL keeps a lease, until it runs out, for the rows its Complete
// left to the relay that holds them (see lockRowsSQL).
const keepLeaseSQL = `UPDATE courier_outbox_leases SET ids = ? WHERE id = ? AND owner = ?`

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
	s.takeovers.Delete(lease)
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
			var left []int64
			if _, ok := s.takeovers.Load(lease); ok {
				if o, left, err = lockRows(ctx, tx, o); err != nil {
					return fmt.Errorf("lock the batch's rows: %w", err)
				}
			}
			if err := s.record(ctx, tx, o); err != nil {
				return err
			}
			if len(left) > 0 {
				// The rows left to the relay that holds them stay leased
				// until the lease runs out: claimed again at once, they
				// would be published again and again while it is frozen.
				b, err := json.Marshal(left)
				if err != nil {
					return err
				}
				if _, err := tx.ExecContext(ctx, keepLeaseSQL, string(b), lease, owner); err != nil {
					return fmt.Errorf("keep the lease of the rows left: %w", err)
				}
				return nil
			}
		}
		if _, err := tx.ExecContext(ctx, endLeaseSQL, lease, owner); err != nil {
			return fmt.Errorf("end lease: %w", err)
		}
		return nil
	})
}

// lockRows locks, in tx, the rows of o that no other transaction holds
// (see lockRowsSQL). It returns the outcome of those rows, and the ids of
// the others.
func lockRows(ctx context.Context, tx *sql.Tx, o store.Outcome) (store.Outcome, []int64, error) {
	ids := slices.Clone(o.Published)
	for _, fs := range [][]store.Failure{o.Retry, o.Dead} {
		for _, f := range fs {
			ids = append(ids, f.Seq)
		}
	}
	if len(ids) == 0 {
		return o, nil, nil
	}
	locked, err := sqlstore.Column[int64](ctx, tx, fmt.Sprintf(lockRowsSQL, idsIn(ids)))
	if err != nil || len(locked) == len(ids) {
		return o, nil, err
	}
	mine := make(map[int64]bool, len(locked))
	for _, id := range locked {
		mine[id] = true
	}
	notMine := func(id int64) bool { return !mine[id] }
	failedNotMine := func(f store.Failure) bool { return notMine(f.Seq) }
	return store.Outcome{
		Published: slices.DeleteFunc(slices.Clone(o.Published), notMine),
		Retry:     slices.DeleteFunc(slices.Clone(o.Retry), failedNotMine),
		Dead:      slices.DeleteFunc(slices.Clone(o.Dead), failedNotMine),
	}, slices.DeleteFunc(ids, func(id int64) bool { return mine[id] }), nil
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
