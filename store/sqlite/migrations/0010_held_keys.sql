-- Held keys (relay.Config.HoldKeys): a dead letter of a topic that holds
-- its keys stops its key until it is replayed or discarded. Its key's later
-- messages wait in courier_outbox_held, out of the claims' way, behind it.
-- Times are Unix microseconds, as everywhere.
ALTER TABLE courier_outbox_dead_letters ADD COLUMN holds INTEGER NOT NULL DEFAULT 0;

CREATE INDEX courier_outbox_dead_letters_holds ON courier_outbox_dead_letters (ordering_key) WHERE holds;

CREATE TABLE courier_outbox_held (
    id            INTEGER PRIMARY KEY,
    behind        INTEGER NOT NULL,
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
    held_at       INTEGER NOT NULL
);

CREATE INDEX courier_outbox_held_behind ON courier_outbox_held (behind, id);
