package ops

import (
	"context"
	"fmt"
	"time"

	"github.com/courier-go/courier/store"
)

// Runs is the store.ReplayRuns of a Dialect: its DB, Clock, NowSQL and
// Time are all it uses.
type Runs struct {
	o Ops
	// lastID selects the id the transaction's INSERT gave a run, e.g.
	// "SELECT LAST_INSERT_ID()"; empty when the INSERT returns it
	// (RETURNING id).
	lastID string
}

var _ store.ReplayRuns = Runs{}

// NewRuns returns the replay runs of d's database. lastID selects the id
// the connection's last INSERT gave (MySQL's "SELECT LAST_INSERT_ID()");
// empty, the INSERT returns it with RETURNING id (PostgreSQL, SQLite).
func NewRuns(d Dialect, lastID string) Runs { return Runs{Ops{d}, lastID} }

// runStates are the states FinishRun takes.
var runStates = map[string]bool{store.RunDone: true, store.RunStopped: true, store.RunFailed: true}

// StartRun implements store.ReplayRuns.
func (r Runs) StartRun(ctx context.Context, run store.ReplayRun) (int64, error) {
	if run.Total < 0 {
		return 0, r.o.errorf("start a replay run: Total is %d: count the dead letters it replays (0 or more)", run.Total)
	}
	now, err := r.o.now(ctx)
	if err != nil {
		return 0, err
	}
	const insert = `INSERT INTO courier_replay_runs (side, selection, state, total, replayed, failed, note, started_at, updated_at)
VALUES (?, ?, ?, ?, 0, 0, ?, ?, ?)`
	args := []any{run.Side, run.Selection, store.RunRunning, run.Total, run.Note, r.o.d.Time.Encode(now), r.o.d.Time.Encode(now)}
	var id int64
	err = r.o.d.DB.Tx(ctx, func(db DB) error {
		if r.lastID == "" {
			return Ops{Dialect{DB: db}}.one(ctx, insert+` RETURNING id`, args, &id)
		}
		if _, err := db.Exec(ctx, insert, args...); err != nil {
			return err
		}
		return Ops{Dialect{DB: db}}.one(ctx, r.lastID, nil, &id)
	})
	if err != nil {
		return 0, r.o.errorf("start a replay run: %w", err)
	}
	return id, nil
}

// UpdateRun implements store.ReplayRuns.
func (r Runs) UpdateRun(ctx context.Context, id int64, replayed, failed int, note string) error {
	return r.set(ctx, id, "", replayed, failed, note)
}

// FinishRun implements store.ReplayRuns.
func (r Runs) FinishRun(ctx context.Context, id int64, state string, replayed, failed int, note string) error {
	if !runStates[state] {
		return r.o.errorf("finish replay run %d: state %q: use %q, %q or %q", id, state, store.RunDone, store.RunStopped, store.RunFailed)
	}
	return r.set(ctx, id, state, replayed, failed, note)
}

// set records a run's counts and note, and when state is set its end.
func (r Runs) set(ctx context.Context, id int64, state string, replayed, failed int, note string) error {
	if replayed < 0 || failed < 0 || failed > replayed {
		return r.o.errorf("replay run %d: %d replayed, %d failed again: the counts must be 0 or more, the failed at most the replayed", id, replayed, failed)
	}
	now, err := r.o.now(ctx)
	if err != nil {
		return err
	}
	t := r.o.d.Time.Encode(now)
	q := `UPDATE courier_replay_runs SET replayed = ?, failed = ?, note = ?, updated_at = ? WHERE id = ?`
	args := []any{replayed, failed, note, t, id}
	if state != "" {
		q = `UPDATE courier_replay_runs SET replayed = ?, failed = ?, note = ?, updated_at = ?, state = ?, finished_at = ? WHERE id = ?`
		args = []any{replayed, failed, note, t, state, t, id}
	}
	n, err := r.o.d.DB.Exec(ctx, q, args...)
	if err != nil {
		return r.o.errorf("record replay run %d: %w", id, err)
	}
	if n == 0 {
		// MySQL counts the rows changed, not those matched: a run
		// whose every value is the same is found but not changed.
		var found int
		if err := r.o.one(ctx, `SELECT count(*) FROM courier_replay_runs WHERE id = ?`, []any{id}, &found); err != nil {
			return r.o.errorf("record replay run %d: %w", id, err)
		}
		if found == 0 {
			return fmt.Errorf("replay run %d: %w", id, store.ErrNotFound)
		}
	}
	return nil
}

// ListRuns implements store.ReplayRuns.
func (r Runs) ListRuns(ctx context.Context, before int64, limit int) ([]store.ReplayRun, error) {
	if limit < 1 || limit > store.MaxListLimit {
		return nil, r.o.errorf("list replay runs: limit is %d: use 1 to %d", limit, store.MaxListLimit)
	}
	q := `SELECT id, side, selection, state, total, replayed, failed, note, started_at, updated_at, finished_at FROM courier_replay_runs`
	args := []any{}
	if before > 0 {
		q += ` WHERE id < ?`
		args = append(args, before)
	}
	q += ` ORDER BY id DESC LIMIT ?`
	args = append(args, limit)
	out := []store.ReplayRun{}
	err := r.o.d.DB.Query(ctx, q, args, func(scan func(...any) error) error {
		var run store.ReplayRun
		var finished time.Time
		if err := scan(&run.ID, &run.Side, &run.Selection, &run.State, &run.Total, &run.Replayed, &run.Failed, &run.Note,
			r.o.d.Time.Dest(&run.StartedAt), r.o.d.Time.Dest(&run.UpdatedAt), r.o.d.Time.Dest(&finished)); err != nil {
			return err
		}
		run.Left = run.Total - run.Replayed
		if !finished.IsZero() {
			run.FinishedAt = &finished
		}
		out = append(out, run)
		return nil
	})
	if err != nil {
		return nil, r.o.errorf("list replay runs: %w", err)
	}
	return out, nil
}
