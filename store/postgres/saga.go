package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/internal/columns"
	"github.com/courier-go/courier/store/internal/sqlstore"
	"github.com/courier-go/courier/store/internal/sqltx"
)

const (
	sagaColumns    = `saga_type, id, state, phase, step, pending, data, reason, deadline, attempts, version, created_at, updated_at`
	createSagaSQL  = `INSERT INTO courier_sagas (` + sagaColumns + `) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)`
	loadSagaSQL    = `SELECT ` + sagaColumns + ` FROM courier_sagas WHERE saga_type = $1 AND id = $2`
	updateSagaSQL  = `UPDATE courier_sagas SET state = $3, phase = $4, step = $5, pending = $6, data = $7, reason = $8, deadline = $9, attempts = $10, version = $11, updated_at = $12 WHERE saga_type = $1 AND id = $2 AND version = $13`
	recordSagaSQL  = `INSERT INTO courier_saga_history (saga_type, saga_id, at, event_id, event_type, from_state, to_state, outcome, reason) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`
	historySagaSQL = `SELECT at, event_id, event_type, from_state, to_state, outcome, reason FROM courier_saga_history WHERE saga_type = $1 AND saga_id = $2 ORDER BY seq`
	dueSagaSQL     = `SELECT id FROM courier_sagas WHERE saga_type = $1 AND deadline IS NOT NULL AND deadline <= $2 AND phase IN ('running', 'compensating') ORDER BY deadline LIMIT $3`
)

func sagaArgs(r store.SagaRecord) []any {
	return []any{r.Type, r.ID, r.State, r.Phase, r.Step, columns.Steps(r.Pending), columns.Text(r.Data), r.Reason, r.Deadline,
		r.Attempts, r.Version, r.CreatedAt, r.UpdatedAt}
}

type scanner interface{ Scan(dest ...any) error }

func scanSaga(row scanner) (store.SagaRecord, error) {
	var r store.SagaRecord
	var pending, data []byte
	if err := row.Scan(&r.Type, &r.ID, &r.State, &r.Phase, &r.Step, &pending, &data, &r.Reason, &r.Deadline, &r.Attempts,
		&r.Version, &r.CreatedAt, &r.UpdatedAt); err != nil {
		if errors.Is(err, pgx.ErrNoRows) || errors.Is(err, sql.ErrNoRows) {
			return r, store.ErrNotFound
		}
		return r, fmt.Errorf("postgres: load saga: %w", err)
	}
	var err error
	if r.Pending, err = columns.ParseSteps(pending); err != nil {
		return r, fmt.Errorf("postgres: saga %s pending compensations: %w", r.ID, err)
	}
	r.Data = data
	return r, nil
}

func historyRows(rows interface {
	Next() bool
	Scan(...any) error
	Err() error
	Close() error
}, typ, id string) ([]store.SagaEvent, error) {
	defer rows.Close()
	var out []store.SagaEvent
	for rows.Next() {
		e := store.SagaEvent{Type: typ, SagaID: id}
		if err := rows.Scan(&e.At, &e.EventID, &e.EventType, &e.From, &e.To, &e.Outcome, &e.Reason); err != nil {
			return nil, fmt.Errorf("postgres: saga history: %w", err)
		}
		e.At = e.At.UTC()
		out = append(out, e)
	}
	return out, rows.Err()
}

// execFunc runs a statement in a transaction, of database/sql or of pgx,
// and returns the number of rows it affected.
type execFunc func(ctx context.Context, sql string, args ...any) (int64, error)

func sqlExec(tx *sql.Tx) execFunc {
	return func(ctx context.Context, query string, args ...any) (int64, error) {
		return sqltx.Exec(ctx, tx, query, args...)
	}
}

func pgxExec(tx pgx.Tx) execFunc {
	return func(ctx context.Context, sql string, args ...any) (int64, error) {
		tag, err := tx.Exec(ctx, sql, args...)
		return tag.RowsAffected(), err
	}
}

func createSaga(ctx context.Context, exec execFunc, r store.SagaRecord) error {
	if _, err := exec(ctx, createSagaSQL, sagaArgs(r)...); err != nil {
		if errorCode(err) == uniqueViolation {
			return store.ErrSagaExists
		}
		return fmt.Errorf("postgres: create saga: %w", err)
	}
	return nil
}

func updateSaga(ctx context.Context, exec execFunc, r store.SagaRecord, expect int) (bool, error) {
	args := sagaArgs(r)
	n, err := exec(ctx, updateSagaSQL, r.Type, r.ID, r.State, r.Phase, r.Step, args[5], args[6], r.Reason, r.Deadline, r.Attempts, r.Version, r.UpdatedAt, expect)
	if err != nil {
		return false, fmt.Errorf("postgres: update saga: %w", err)
	}
	return n == 1, nil
}

func recordSaga(ctx context.Context, exec execFunc, e store.SagaEvent) error {
	if _, err := exec(ctx, recordSagaSQL, e.Type, e.SagaID, e.At, e.EventID, e.EventType, e.From, e.To, e.Outcome, e.Reason); err != nil {
		return fmt.Errorf("postgres: record saga event: %w", err)
	}
	return nil
}

// sqlSagas is the saga store for database/sql transactions on db
// ([SQLDriver.Sagas]).
type sqlSagas struct{ db *sql.DB }

func (s sqlSagas) InTx(ctx context.Context, fn func(*sql.Tx) error) error {
	return sqltx.InTx(ctx, s.db, nil, "postgres: ", fn)
}

func (sqlSagas) Create(ctx context.Context, tx *sql.Tx, r store.SagaRecord) error {
	return createSaga(ctx, sqlExec(tx), r)
}

func (sqlSagas) Load(ctx context.Context, tx *sql.Tx, typ, id string) (store.SagaRecord, error) {
	return scanSaga(tx.QueryRowContext(ctx, loadSagaSQL, typ, id))
}

func (sqlSagas) Update(ctx context.Context, tx *sql.Tx, r store.SagaRecord, expect int) (bool, error) {
	return updateSaga(ctx, sqlExec(tx), r, expect)
}

func (sqlSagas) Record(ctx context.Context, tx *sql.Tx, e store.SagaEvent) error {
	return recordSaga(ctx, sqlExec(tx), e)
}

func (s sqlSagas) History(ctx context.Context, typ, id string) ([]store.SagaEvent, error) {
	rows, err := s.db.QueryContext(ctx, historySagaSQL, typ, id)
	if err != nil {
		return nil, fmt.Errorf("postgres: saga history: %w", err)
	}
	return historyRows(rows, typ, id)
}

func (s sqlSagas) Due(ctx context.Context, typ string, now time.Time, limit int) ([]string, error) {
	ids, err := sqlstore.Column[string](ctx, s.db, dueSagaSQL, typ, now, limit)
	if err != nil {
		return nil, fmt.Errorf("postgres: due sagas: %w", err)
	}
	return ids, nil
}

// pgxSagas is the saga store for pgx transactions on the pool
// ([Driver.Sagas]).
type pgxSagas struct{ pool *pgxpool.Pool }

func (s pgxSagas) InTx(ctx context.Context, fn func(pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, s.pool, fn)
}

func (pgxSagas) Create(ctx context.Context, tx pgx.Tx, r store.SagaRecord) error {
	return createSaga(ctx, pgxExec(tx), r)
}

func (pgxSagas) Load(ctx context.Context, tx pgx.Tx, typ, id string) (store.SagaRecord, error) {
	return scanSaga(tx.QueryRow(ctx, loadSagaSQL, typ, id))
}

func (pgxSagas) Update(ctx context.Context, tx pgx.Tx, r store.SagaRecord, expect int) (bool, error) {
	return updateSaga(ctx, pgxExec(tx), r, expect)
}

func (pgxSagas) Record(ctx context.Context, tx pgx.Tx, e store.SagaEvent) error {
	return recordSaga(ctx, pgxExec(tx), e)
}

func (s pgxSagas) History(ctx context.Context, typ, id string) ([]store.SagaEvent, error) {
	rows, err := s.pool.Query(ctx, historySagaSQL, typ, id)
	if err != nil {
		return nil, fmt.Errorf("postgres: saga history: %w", err)
	}
	return historyRows(pgxRows{rows}, typ, id)
}

func (s pgxSagas) Due(ctx context.Context, typ string, now time.Time, limit int) ([]string, error) {
	rows, err := s.pool.Query(ctx, dueSagaSQL, typ, now, limit)
	if err != nil {
		return nil, fmt.Errorf("postgres: due sagas: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// pgxRows gives pgx.Rows database/sql's Close signature.
type pgxRows struct{ pgx.Rows }

func (r pgxRows) Close() error { r.Rows.Close(); return nil }
