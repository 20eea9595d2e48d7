-- The inbox: one marker per message a consumer applied, inserted in the same
-- transaction as the consumer's effects. A redelivered message finds its
-- marker and is skipped. WITHOUT ROWID: the primary key is the table, so a
-- marker is written once, not into a table and an index.
CREATE TABLE courier_inbox (
    consumer      TEXT    NOT NULL,
    message_id    TEXT    NOT NULL,
    processed_at  INTEGER NOT NULL,
    PRIMARY KEY (consumer, message_id)
) WITHOUT ROWID;

-- Retention deletes markers by age.
CREATE INDEX courier_inbox_processed_at ON courier_inbox (processed_at);

-- Consume-side dead letters: deliveries a consumer gave up on, kept as
-- received so that a replay decodes them afresh. headers is a JSON object of
-- string arrays; history a JSON array of {"at":…, "error":…}.
CREATE TABLE courier_inbox_dead_letters (
    id                INTEGER PRIMARY KEY AUTOINCREMENT,
    consumer          TEXT    NOT NULL,
    message_id        TEXT    NOT NULL,
    subject           TEXT    NOT NULL,
    headers           TEXT,
    payload           BLOB    NOT NULL,
    reason            TEXT    NOT NULL,
    last_error        TEXT    NOT NULL,
    attempts          INTEGER NOT NULL,
    history           TEXT,
    parked_at         INTEGER NOT NULL,
    replay_requested  INTEGER
);

CREATE INDEX courier_inbox_dead_letters_replay ON courier_inbox_dead_letters (consumer, id)
    WHERE replay_requested IS NOT NULL;
