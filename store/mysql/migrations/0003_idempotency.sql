-- Idempotency-Key records. A request claims its key (state in_flight, with a
-- lock that a later request may take over once it expires) in a short
-- transaction of its own, then stores its response (state done) in the same
-- transaction as its business change. scope and idem_key are VARBINARY,
-- compared byte for byte (no collation merges "k " and "k"), at most 1024
-- bytes each; longer ones are refused before anything is written. Their
-- primary key takes up to 2048 bytes: ROW_FORMAT=DYNAMIC (the default, named
-- in case a server was set to COMPACT, whose keys stop at 767 bytes).
CREATE TABLE IF NOT EXISTS courier_idempotency_keys (
    scope         VARBINARY(1024) NOT NULL,
    idem_key      VARBINARY(1024) NOT NULL,
    fingerprint   BLOB            NOT NULL,
    state         VARCHAR(16)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    owner         CHAR(36)        CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    locked_until  DATETIME(6)     NOT NULL,
    status        INT             NULL,
    headers       JSON            NULL,
    body          LONGBLOB        NULL,
    created_at    DATETIME(6)     NOT NULL,
    expires_at    DATETIME(6)     NOT NULL,
    PRIMARY KEY (scope, idem_key),
    KEY courier_idempotency_keys_expires_at (expires_at),
    CONSTRAINT courier_idempotency_keys_state CHECK (state IN ('in_flight', 'done'))
) ENGINE=InnoDB ROW_FORMAT=DYNAMIC DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
