-- Orchestrated saga instances (package saga): one row each, updated with a
-- version check by every transition. Times are this process's clock in Unix
-- microseconds, as everywhere in this dialect.
CREATE TABLE courier_sagas (
    saga_type   TEXT    NOT NULL,
    id          TEXT    NOT NULL,
    state       TEXT    NOT NULL,
    phase       TEXT    NOT NULL,
    step        INTEGER NOT NULL,
    pending     TEXT    NOT NULL DEFAULT '[]',
    data        TEXT,
    reason      TEXT    NOT NULL DEFAULT '',
    deadline    INTEGER,
    attempts    INTEGER NOT NULL DEFAULT 0,
    version     INTEGER NOT NULL,
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL,
    PRIMARY KEY (saga_type, id)
) WITHOUT ROWID;

-- Deadlines still to fire; finished sagas leave the index.
CREATE INDEX courier_sagas_due ON courier_sagas (saga_type, deadline)
    WHERE deadline IS NOT NULL AND phase IN ('running', 'compensating');

-- Every transition and every ignored event, with the reason.
CREATE TABLE courier_saga_history (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    saga_type   TEXT    NOT NULL,
    saga_id     TEXT    NOT NULL,
    at          INTEGER NOT NULL,
    event_id    TEXT    NOT NULL DEFAULT '',
    event_type  TEXT    NOT NULL,
    from_state  TEXT    NOT NULL,
    to_state    TEXT    NOT NULL,
    outcome     TEXT    NOT NULL,
    reason      TEXT    NOT NULL DEFAULT ''
);

CREATE INDEX courier_saga_history_saga ON courier_saga_history (saga_type, saga_id, seq);
