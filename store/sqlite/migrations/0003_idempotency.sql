-- Idempotency-Key records. A request claims its key (state in_flight, with a
-- lock that a later request may take over once it expires) in a short
-- transaction of its own, then stores its response (state done) in the same
-- transaction as its business change. headers is the stored response's JSON
-- object of string arrays; locked_until, created_at and expires_at are
-- microseconds since the Unix epoch like every other time.
CREATE TABLE courier_idempotency_keys (
    scope         TEXT    NOT NULL,
    idem_key      TEXT    NOT NULL,
    fingerprint   BLOB    NOT NULL,
    state         TEXT    NOT NULL CHECK (state IN ('in_flight', 'done')),
    owner         TEXT    NOT NULL,
    locked_until  INTEGER NOT NULL,
    status        INTEGER,
    headers       TEXT,
    body          BLOB,
    created_at    INTEGER NOT NULL,
    expires_at    INTEGER NOT NULL,
    PRIMARY KEY (scope, idem_key)
) WITHOUT ROWID;

CREATE INDEX courier_idempotency_keys_expires_at ON courier_idempotency_keys (expires_at);
