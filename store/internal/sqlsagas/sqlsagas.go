package sqlsagas

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/internal/columns"
	"github.com/courier-go/courier/store/internal/sqlstore"
)

// New returns the saga store of d's database. It uses d's Name, DB, InTx,
// LockRow (which locks the loaded instance) and IsDuplicate.
func New(d sqlstore.Dialect) store.Sagas[*sql.Tx] { return sagas{db: d.DB, d: d} }

type sagas struct {
	db *sql.DB
	d  sqlstore.Dialect
}

const sagaColumns = `saga_type, id, state, phase, step, pending, data, reason, deadline, attempts, version, created_at, updated_at`

func (s sagas) InTx(ctx context.Context, fn func(*sql.Tx) error) error { return s.d.InTx(ctx, fn) }

func micros(t *time.Time) any {
	if t == nil {
		return nil
	}
	return t.UnixMicro()
}

func (s sagas) Create(ctx context.Context, tx *sql.Tx, r store.SagaRecord) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO courier_sagas (`+sagaColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		r.Type, r.ID, r.State, r.Phase, r.Step, columns.Steps(r.Pending), columns.Text(r.Data), r.Reason, micros(r.Deadline), r.Attempts,
		r.Version, r.CreatedAt.UnixMicro(), r.UpdatedAt.UnixMicro())
	if err != nil {
		if s.d.IsDuplicate(err) {
			return store.ErrSagaExists
		}
		return fmt.Errorf(s.d.Name+": create saga: %w", err)
	}
	return nil
}

func (s sagas) Load(ctx context.Context, tx *sql.Tx, typ, id string) (store.SagaRecord, error) {
	var r store.SagaRecord
	var pending string
	var data sql.NullString
	var deadline sql.NullInt64
	var created, updated int64
	err := tx.QueryRowContext(ctx, `SELECT `+sagaColumns+` FROM courier_sagas WHERE saga_type = ? AND id = ?`+s.d.LockRow, typ, id).
		Scan(&r.Type, &r.ID, &r.State, &r.Phase, &r.Step, &pending, &data, &r.Reason, &deadline, &r.Attempts, &r.Version, &created, &updated)
	if errors.Is(err, sql.ErrNoRows) {
		return r, store.ErrNotFound
	}
	if err != nil {
		return r, fmt.Errorf(s.d.Name+": load saga: %w", err)
	}
	if r.Pending, err = columns.ParseSteps([]byte(pending)); err != nil {
		return r, fmt.Errorf(s.d.Name+": saga %s pending compensations: %w", id, err)
	}
	if data.Valid {
		r.Data = []byte(data.String)
	}
	if deadline.Valid {
		t := time.UnixMicro(deadline.Int64).UTC()
		r.Deadline = &t
	}
	r.CreatedAt, r.UpdatedAt = time.UnixMicro(created).UTC(), time.UnixMicro(updated).UTC()
	return r, nil
}

func (s sagas) Update(ctx context.Context, tx *sql.Tx, r store.SagaRecord, expect int) (bool, error) {
	res, err := tx.ExecContext(ctx, `UPDATE courier_sagas SET state = ?, phase = ?, step = ?, pending = ?, data = ?, reason = ?,
    deadline = ?, attempts = ?, version = ?, updated_at = ? WHERE saga_type = ? AND id = ? AND version = ?`,
		r.State, r.Phase, r.Step, columns.Steps(r.Pending), columns.Text(r.Data), r.Reason, micros(r.Deadline), r.Attempts, r.Version,
		r.UpdatedAt.UnixMicro(), r.Type, r.ID, expect)
	if err != nil {
		return false, fmt.Errorf(s.d.Name+": update saga: %w", err)
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

func (s sagas) Record(ctx context.Context, tx *sql.Tx, e store.SagaEvent) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO courier_saga_history
    (saga_type, saga_id, at, event_id, event_type, from_state, to_state, outcome, reason) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		e.Type, e.SagaID, e.At.UnixMicro(), e.EventID, e.EventType, e.From, e.To, e.Outcome, e.Reason)
	if err != nil {
		return fmt.Errorf(s.d.Name+": record saga event: %w", err)
	}
	return nil
}

func (s sagas) History(ctx context.Context, typ, id string) ([]store.SagaEvent, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT at, event_id, event_type, from_state, to_state, outcome, reason
FROM courier_saga_history WHERE saga_type = ? AND saga_id = ? ORDER BY seq`, typ, id)
	if err != nil {
		return nil, fmt.Errorf(s.d.Name+": saga history: %w", err)
	}
	defer rows.Close()
	var out []store.SagaEvent
	for rows.Next() {
		e := store.SagaEvent{Type: typ, SagaID: id}
		var at int64
		if err := rows.Scan(&at, &e.EventID, &e.EventType, &e.From, &e.To, &e.Outcome, &e.Reason); err != nil {
			return nil, fmt.Errorf(s.d.Name+": saga history: %w", err)
		}
		e.At = time.UnixMicro(at).UTC()
		out = append(out, e)
	}
	return out, rows.Err()
}

func (s sagas) Due(ctx context.Context, typ string, now time.Time, limit int) ([]string, error) {
	ids, err := sqlstore.Column[string](ctx, s.db, `SELECT id FROM courier_sagas
WHERE saga_type = ? AND deadline IS NOT NULL AND deadline <= ? AND phase IN ('running', 'compensating')
ORDER BY deadline LIMIT ?`, typ, now.UnixMicro(), limit)
	if err != nil {
		return nil, fmt.Errorf(s.d.Name+": due sagas: %w", err)
	}
	return ids, nil
}
