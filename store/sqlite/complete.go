package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/internal/columns"
)

// leaseLiveSQL guards Complete: a relay whose lease has ended changes
// nothing, since the rows may belong to another relay by then. Complete
// holds the write lock from this check to its commit, so the answer cannot
// change in between.
const leaseLiveSQL = `SELECT EXISTS (SELECT 1 FROM courier_outbox_leases WHERE id = ? AND owner = ? AND until > ?)`

// idsParam lists the ids of a JSON array parameter.
const idsParam = `(SELECT value FROM json_each(?1))`

const deleteSQL = `DELETE FROM courier_outbox WHERE id IN ` + idsParam

var archiveSQL = `INSERT INTO courier_outbox_published
    (id, ` + columns.Names + `, created_at, attempts, published_at)
SELECT id, ` + columns.Names + `, created_at, attempts, ?2
FROM courier_outbox WHERE id IN ` + idsParam

// failuresParam unpacks a JSON array of failures (see failureJSON).
const failuresParam = `(SELECT json_extract(value, '$.id') AS id,
        json_extract(value, '$.error') AS error,
        json_extract(value, '$.retry_at') AS retry_at,
        json_extract(value, '$.counted') AS counted,
        json_extract(value, '$.entry') AS entry,
        json_extract(value, '$.hold') AS hold
 FROM json_each(?1))`

// historyAppend appends f.entry to o.history, keeping the latest
// columns.HistoryCap. json() restores the entry's JSON type, which a
// subquery column loses.
var historyAppend = `json_insert(
    CASE WHEN json_array_length(coalesce(o.history, '[]')) >= ` + strconv.Itoa(columns.HistoryCap) + ` THEN json_remove(o.history, '$[0]')
         ELSE coalesce(o.history, '[]') END,
    '$[#]', json(f.entry))`

var retrySQL = `UPDATE courier_outbox AS o
SET attempts = o.attempts + f.counted,
    last_error = f.error,
    retry_at = f.retry_at,
    history = ` + historyAppend + `
FROM ` + failuresParam + ` AS f
WHERE o.id = f.id`

var deadSQL = `INSERT INTO courier_outbox_dead_letters
    (id, ` + columns.Names + `, created_at, attempts, last_error, history, dead_at, holds)
SELECT o.id, ` + columns.List("o.") + `, o.created_at, o.attempts + f.counted, f.error, ` + historyAppend + `, ?2, f.hold
FROM courier_outbox AS o JOIN ` + failuresParam + ` AS f ON o.id = f.id`

const deleteFailedSQL = `DELETE FROM courier_outbox WHERE id IN (SELECT json_extract(value, '$.id') FROM json_each(?1))`

const endLeaseSQL = `DELETE FROM courier_outbox_leases WHERE id = ? AND owner = ?`

// failureJSON is one failure as the statements above read it.
type failureJSON struct {
	ID      int64        `json:"id"`
	Error   string       `json:"error"`
	RetryAt int64        `json:"retry_at"`
	Counted int          `json:"counted"`
	Entry   historyEntry `json:"entry"`
	Hold    int          `json:"hold"`
}

// historyEntry is one element of a row's history.
type historyEntry struct {
	At      time.Time `json:"at"`
	Error   string    `json:"error"`
	Counted bool      `json:"counted"`
}

func failuresJSON(fs []store.Failure, now time.Time) (string, error) {
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
		out[i] = failureJSON{ID: f.Seq, Error: f.Error, RetryAt: now.Add(f.Delay).UnixMicro(), Counted: counted,
			Entry: historyEntry{At: now.UTC(), Error: f.Error, Counted: f.Counted}, Hold: hold}
	}
	b, err := json.Marshal(out)
	return string(b), err
}

// Complete implements store.RelayStore. The whole outcome is written in one
// transaction; ending the lease releases the rows it does not mention.
func (s *relayStore) Complete(ctx context.Context, owner string, lease int64, o store.Outcome) error {
	err := s.write(ctx, func(conn *sql.Conn) error {
		now := nowOf(s.clock)
		var live bool
		if err := conn.QueryRowContext(ctx, leaseLiveSQL, lease, owner, now.UnixMicro()).Scan(&live); err != nil {
			return fmt.Errorf("check lease: %w", err)
		}
		if live {
			if err := s.complete(ctx, conn, now, o); err != nil {
				return err
			}
		}
		if _, err := conn.ExecContext(ctx, endLeaseSQL, lease, owner); err != nil {
			return fmt.Errorf("end lease: %w", err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("sqlite: complete batch: %w", err)
	}
	return nil
}

func (s *relayStore) complete(ctx context.Context, conn *sql.Conn, now time.Time, o store.Outcome) error {
	nowUS := now.UnixMicro()
	if len(o.Published) > 0 {
		ids, err := json.Marshal(o.Published)
		if err != nil {
			return err
		}
		if s.keepPublished {
			if _, err := conn.ExecContext(ctx, archiveSQL, string(ids), nowUS); err != nil {
				return fmt.Errorf("archive published: %w", err)
			}
		}
		if _, err := conn.ExecContext(ctx, deleteSQL, string(ids)); err != nil {
			return fmt.Errorf("delete published: %w", err)
		}
	}
	if len(o.Retry) > 0 {
		fs, err := failuresJSON(o.Retry, now)
		if err != nil {
			return err
		}
		if _, err := conn.ExecContext(ctx, retrySQL, fs); err != nil {
			return fmt.Errorf("record retries: %w", err)
		}
	}
	if len(o.Dead) > 0 {
		fs, err := failuresJSON(o.Dead, now)
		if err != nil {
			return err
		}
		if _, err := conn.ExecContext(ctx, deadSQL, fs, nowUS); err != nil {
			return fmt.Errorf("record dead letters: %w", err)
		}
		if _, err := conn.ExecContext(ctx, deleteFailedSQL, fs); err != nil {
			return fmt.Errorf("delete dead letters: %w", err)
		}
	}
	return nil
}
