-- Orchestrated saga instances (package saga): one row each, updated with a
-- version check by every transition.
CREATE TABLE courier_sagas (
    saga_type   text        NOT NULL,
    id          text        NOT NULL,
    state       text        NOT NULL,
    phase       text        NOT NULL,
    step        integer     NOT NULL,
    pending     jsonb       NOT NULL DEFAULT '[]',
    data        jsonb,
    reason      text        NOT NULL DEFAULT '',
    deadline    timestamptz,
    attempts    integer     NOT NULL DEFAULT 0,
    version     integer     NOT NULL,
    created_at  timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL,
    PRIMARY KEY (saga_type, id)
);

-- Deadlines still to fire; finished sagas leave the index.
CREATE INDEX courier_sagas_due ON courier_sagas (saga_type, deadline)
    WHERE deadline IS NOT NULL AND phase IN ('running', 'compensating');

-- Every transition and every ignored event, with the reason.
CREATE TABLE courier_saga_history (
    saga_type   text        NOT NULL,
    saga_id     text        NOT NULL,
    seq         bigint      GENERATED ALWAYS AS IDENTITY,
    at          timestamptz NOT NULL,
    event_id    text        NOT NULL DEFAULT '',
    event_type  text        NOT NULL,
    from_state  text        NOT NULL,
    to_state    text        NOT NULL,
    outcome     text        NOT NULL,
    reason      text        NOT NULL DEFAULT '',
    PRIMARY KEY (saga_type, saga_id, seq)
);
