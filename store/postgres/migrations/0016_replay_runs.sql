-- Guarded replays (courier dlq replay, the dashboard): each run's
-- selection, progress and outcome, so that the CLI and every dashboard see
-- it, whichever started it.
CREATE TABLE courier_replay_runs (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    side         text        NOT NULL,
    selection    text        NOT NULL,
    state        text        NOT NULL,
    total        integer     NOT NULL,
    replayed     integer     NOT NULL DEFAULT 0,
    failed       integer     NOT NULL DEFAULT 0,
    note         text        NOT NULL DEFAULT '',
    started_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    finished_at  timestamptz
);
