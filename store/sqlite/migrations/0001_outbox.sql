-- Courier's schema for SQLite. SQLite has no server clock that every
-- process shares with Go, so every time Courier writes is the writing
-- process's Go clock, stored as INTEGER microseconds since the Unix epoch
-- (UTC); columns ending in _at and until hold such integers.

-- The outbox: one row per message not yet published, written in the
-- producer's transaction. Publishing removes the row (keeping a copy in
-- courier_outbox_published when the relay is asked to), so the table holds
-- only pending work and its primary key is the relay's scan order.
CREATE TABLE courier_outbox (
    -- Allocated at insert; SQLite runs one writer at a time, so that is also
    -- commit order. A claim takes a key's rows in id order, so each key's
    -- messages are published in the order they were written (package relay,
    -- Ordering).
    -- AUTOINCREMENT: an id is never reused, even after the newest rows were
    -- published and deleted, so a lease or a dead letter never names a
    -- different message than the one it was taken for.
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    message_id    TEXT    NOT NULL,
    topic         TEXT    NOT NULL,
    ordering_key  TEXT    NOT NULL,
    type          TEXT    NOT NULL,
    version       INTEGER NOT NULL,
    content_type  TEXT    NOT NULL,
    payload       BLOB    NOT NULL,
    -- JSON object of the message's headers, NULL when it has none.
    headers       TEXT,
    occurred_at   INTEGER NOT NULL,
    created_at    INTEGER NOT NULL,
    attempts      INTEGER NOT NULL DEFAULT 0,
    -- Set after a failed attempt: neither this row nor any later row of its
    -- key is published before then.
    retry_at      INTEGER,
    last_error    TEXT,
    -- The latest failures, oldest first: [{"at":…, "error":…, "counted":…}].
    history       TEXT
);

-- Rows waiting for a retry, and so the keys they hold back. Partial: rows
-- that never failed (nearly all) are not in it, and writers never touch it.
CREATE INDEX courier_outbox_retry ON courier_outbox (retry_at) WHERE retry_at IS NOT NULL;

-- A relay's claim: which rows (and so which keys) it holds until when. One
-- row per claimed batch instead of a write to every claimed message; ids and
-- keys are JSON arrays, read back with json_each.
CREATE TABLE courier_outbox_leases (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    owner       TEXT    NOT NULL,
    until       INTEGER NOT NULL,
    ids         TEXT    NOT NULL,
    keys        TEXT    NOT NULL,
    created_at  INTEGER NOT NULL
);

-- Published messages, kept only when the relay runs with KeepPublished, for
-- audits; trim it by published_at.
CREATE TABLE courier_outbox_published (
    id            INTEGER NOT NULL,
    message_id    TEXT    NOT NULL,
    topic         TEXT    NOT NULL,
    ordering_key  TEXT    NOT NULL,
    type          TEXT    NOT NULL,
    version       INTEGER NOT NULL,
    content_type  TEXT    NOT NULL,
    payload       BLOB    NOT NULL,
    headers       TEXT,
    occurred_at   INTEGER NOT NULL,
    created_at    INTEGER NOT NULL,
    attempts      INTEGER NOT NULL,
    published_at  INTEGER NOT NULL
);
CREATE INDEX courier_outbox_published_at ON courier_outbox_published (published_at);

-- Messages that failed MaxAttempts times, with their history. Replaying one
-- moves it back into courier_outbox.
CREATE TABLE courier_outbox_dead_letters (
    id            INTEGER PRIMARY KEY,
    message_id    TEXT    NOT NULL UNIQUE,
    topic         TEXT    NOT NULL,
    ordering_key  TEXT    NOT NULL,
    type          TEXT    NOT NULL,
    version       INTEGER NOT NULL,
    content_type  TEXT    NOT NULL,
    payload       BLOB    NOT NULL,
    headers       TEXT,
    occurred_at   INTEGER NOT NULL,
    created_at    INTEGER NOT NULL,
    attempts      INTEGER NOT NULL,
    last_error    TEXT    NOT NULL,
    history       TEXT,
    dead_at       INTEGER NOT NULL
);
