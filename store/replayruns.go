package store

import (
	"context"
	"time"
)

// ReplayRuns keeps the guarded replays of dead letters (courier dlq replay,
// the dashboard) in the database, in the table courier_replay_runs: each
// run's selection, its progress while it runs and its outcome, so that the
// CLI and every dashboard see every run, whichever process started it.
// Times are the store's clock (see [Clock]).
type ReplayRuns interface {
	// StartRun records a run in state RunRunning with r's Side, Selection,
	// Total and Note (the rest is ignored) and returns its id.
	StartRun(ctx context.Context, r ReplayRun) (int64, error)
	// UpdateRun records the progress of the running run id: how many of
	// its dead letters were replayed and how many of those failed again,
	// and its note. ErrNotFound when there is no such run.
	UpdateRun(ctx context.Context, id int64, replayed, failed int, note string) error
	// FinishRun records the end of run id: its state (RunDone, RunStopped
	// or RunFailed), its last counts and its note. ErrNotFound when there
	// is no such run.
	FinishRun(ctx context.Context, id int64, state string, replayed, failed int, note string) error
	// ListRuns returns up to limit runs (at most MaxListLimit), newest
	// first; with before above 0, only those whose id is below it (the
	// next page).
	ListRuns(ctx context.Context, before int64, limit int) ([]ReplayRun, error)
}

// The states of a replay run.
const (
	// RunRunning is a run still replaying, or watching the outcome of
	// its replays. A run whose process died stays in it: its UpdatedAt
	// tells how long ago it was last heard of.
	RunRunning = "running"
	// RunDone is a run that replayed every dead letter it selected.
	RunDone = "done"
	// RunStopped is a run its guard stopped (a canary or, with
	// --stop-on-failure, a replayed letter failed again) or its operator
	// interrupted, with dead letters left.
	RunStopped = "stopped"
	// RunFailed is a run ended by an error (the database, a letter gone).
	RunFailed = "failed"
)

// ReplayRun is one guarded replay, as courier_replay_runs keeps it.
type ReplayRun struct {
	ID int64 `json:"id"`
	// Side is "relay", "consumer" or "both": the sides of its dead
	// letters.
	Side string `json:"side"`
	// Selection says what it replays, as the operator selected it
	// (refs, filters, a group) and how (canary, rate, stop on failure).
	Selection string `json:"selection"`
	// State is RunRunning, RunDone, RunStopped or RunFailed.
	State string `json:"state"`
	// Total is how many dead letters it selected; Replayed how many it
	// replayed; Failed how many of those failed again (that it saw);
	// Left how many it did not replay (Total - Replayed).
	Total    int `json:"total"`
	Replayed int `json:"replayed"`
	Failed   int `json:"failed"`
	Left     int `json:"left"`
	// Note says why it stopped or failed, or where it stands.
	Note       string     `json:"note,omitempty"`
	StartedAt  time.Time  `json:"started_at"`
	UpdatedAt  time.Time  `json:"updated_at"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
}
