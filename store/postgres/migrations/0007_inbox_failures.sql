-- Failed runs of consumers' handlers: one row per run whose transaction was
-- rolled back, written in a transaction of its own after the rollback. A
-- consumer parks a message once its failures reach its limit; kept here
-- rather than in memory, the count outlives the process and is shared by
-- every instance, and a delivery lost to a crash adds nothing. Rows are
-- deleted when the message is applied or parked, and by retention.
CREATE TABLE courier_inbox_failures (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    consumer    text        NOT NULL,
    message_id  uuid        NOT NULL,
    failed_at   timestamptz NOT NULL,
    error       text        NOT NULL
);

CREATE INDEX courier_inbox_failures_message ON courier_inbox_failures (consumer, message_id, id);

-- Retention deletes rows by age.
CREATE INDEX courier_inbox_failures_failed_at ON courier_inbox_failures USING brin (failed_at);
