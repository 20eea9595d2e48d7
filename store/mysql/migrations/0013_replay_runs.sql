-- Guarded replays (courier dlq replay, the dashboard): each run's
-- selection, progress and outcome, so that the CLI and every dashboard see
-- it, whichever started it.
CREATE TABLE IF NOT EXISTS courier_replay_runs (
    id           BIGINT       NOT NULL AUTO_INCREMENT,
    side         VARCHAR(16)  NOT NULL,
    selection    TEXT         NOT NULL,
    state        VARCHAR(16)  NOT NULL,
    total        INT          NOT NULL,
    replayed     INT          NOT NULL DEFAULT 0,
    failed       INT          NOT NULL DEFAULT 0,
    note         TEXT         NOT NULL,
    started_at   DATETIME(6)  NOT NULL,
    updated_at   DATETIME(6)  NOT NULL,
    finished_at  DATETIME(6)  NULL,
    PRIMARY KEY (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
