-- Orchestrated saga instances (package saga): one row each, updated with a
-- version check by every transition. Times are the orchestrator's clock in
-- Unix microseconds (the saga package owns deadlines, so tests can move it).
CREATE TABLE IF NOT EXISTS courier_sagas (
    saga_type   VARBINARY(255) NOT NULL,
    id          VARBINARY(255) NOT NULL,
    state       VARCHAR(255)   NOT NULL,
    phase       VARCHAR(32)    NOT NULL,
    step        INT            NOT NULL,
    pending     JSON           NOT NULL,
    data        JSON           NULL,
    reason      TEXT           NOT NULL,
    deadline    BIGINT         NULL,
    attempts    INT            NOT NULL DEFAULT 0,
    version     INT            NOT NULL,
    created_at  BIGINT         NOT NULL,
    updated_at  BIGINT         NOT NULL,
    PRIMARY KEY (saga_type, id),
    KEY courier_sagas_due (saga_type, deadline)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- Every transition and every ignored event, with the reason.
CREATE TABLE IF NOT EXISTS courier_saga_history (
    seq         BIGINT         NOT NULL AUTO_INCREMENT,
    saga_type   VARBINARY(255) NOT NULL,
    saga_id     VARBINARY(255) NOT NULL,
    at          BIGINT         NOT NULL,
    event_id    VARCHAR(64)    NOT NULL,
    event_type  VARCHAR(255)   NOT NULL,
    from_state  VARCHAR(255)   NOT NULL,
    to_state    VARCHAR(255)   NOT NULL,
    outcome     VARCHAR(16)    NOT NULL,
    reason      TEXT           NOT NULL,
    PRIMARY KEY (seq),
    KEY courier_saga_history_saga (saga_type, saga_id, seq)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
