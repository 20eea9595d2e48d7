-- Idempotency-Key records. A request claims its key (state in_flight, with a
-- lock that a later request may take over once it expires) in a short
-- transaction of its own, then stores its response (state done) in the same
-- transaction as its business change.
CREATE TABLE courier_idempotency_keys (
    scope         text        NOT NULL,
    idem_key      text        NOT NULL,
    fingerprint   bytea       NOT NULL,
    state         text        NOT NULL CHECK (state IN ('in_flight', 'done')),
    owner         uuid        NOT NULL,
    locked_until  timestamptz NOT NULL,
    status        integer,
    headers       jsonb,
    body          bytea,
    created_at    timestamptz NOT NULL DEFAULT now(),
    expires_at    timestamptz NOT NULL,
    PRIMARY KEY (scope, idem_key)
);

CREATE INDEX courier_idempotency_keys_expires_at ON courier_idempotency_keys (expires_at);
