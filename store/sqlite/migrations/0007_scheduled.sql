-- Scheduled messages: written in the producer's transaction with a due
-- time, kept here until they fall due. A relay's release then moves each
-- into courier_outbox (in due order, in one write transaction), where it
-- is published like any message; so a message due next week is not in the
-- outbox, and neither holds its key back nor costs a claim anything until
-- then. Released rows stay, without their payload and headers, so that
-- cancelling one says it was published; `courier cleanup --keep-released`
-- trims them. Times are Unix microseconds, as everywhere.
CREATE TABLE courier_outbox_scheduled (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    message_id    TEXT    NOT NULL UNIQUE,
    due_at        INTEGER NOT NULL,
    topic         TEXT    NOT NULL,
    ordering_key  TEXT    NOT NULL,
    type          TEXT    NOT NULL,
    version       INTEGER NOT NULL,
    content_type  TEXT    NOT NULL,
    payload       BLOB,
    headers       TEXT,
    occurred_at   INTEGER NOT NULL,
    created_at    INTEGER NOT NULL,
    released_at   INTEGER
);

-- The waiting messages by due time; released rows by release time, for
-- their retention trim.
CREATE INDEX courier_outbox_scheduled_due ON courier_outbox_scheduled (due_at, id) WHERE released_at IS NULL;
CREATE INDEX courier_outbox_scheduled_released ON courier_outbox_scheduled (released_at) WHERE released_at IS NOT NULL;
