-- Failed runs of consumers' handlers: one row per run whose transaction was
-- rolled back, written in a transaction of its own after the rollback. A
-- consumer parks a message once its failures reach its limit; kept here
-- rather than in memory, the count outlives the process and is shared by
-- every instance, and a delivery lost to a crash adds nothing. Rows are
-- deleted when the message is applied or parked, and by retention.
-- failed_at is in microseconds since the epoch.
CREATE TABLE courier_inbox_failures (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    consumer    TEXT    NOT NULL,
    message_id  TEXT    NOT NULL,
    failed_at   INTEGER NOT NULL,
    error       TEXT    NOT NULL
);

CREATE INDEX courier_inbox_failures_message ON courier_inbox_failures (consumer, message_id, id);

-- Retention deletes rows by age.
CREATE INDEX courier_inbox_failures_failed_at ON courier_inbox_failures (failed_at);
