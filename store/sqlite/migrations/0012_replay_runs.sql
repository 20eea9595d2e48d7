-- Guarded replays (courier dlq replay, the dashboard): each run's
-- selection, progress and outcome, so that the CLI and every dashboard see
-- it, whichever started it. Times are Unix microseconds, as everywhere.
CREATE TABLE courier_replay_runs (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    side         TEXT    NOT NULL,
    selection    TEXT    NOT NULL,
    state        TEXT    NOT NULL,
    total        INTEGER NOT NULL,
    replayed     INTEGER NOT NULL DEFAULT 0,
    failed       INTEGER NOT NULL DEFAULT 0,
    note         TEXT    NOT NULL DEFAULT '',
    started_at   INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL,
    finished_at  INTEGER
);
