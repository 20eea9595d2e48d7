-- Failed runs of consumers' handlers: one row per run whose transaction was
-- rolled back, written in a transaction of its own after the rollback. A
-- consumer parks a message once its failures reach its limit; kept here
-- rather than in memory, the count outlives the process and is shared by
-- every instance, and a delivery lost to a crash adds nothing. Rows are
-- deleted when the message is applied or parked, and by retention.
CREATE TABLE IF NOT EXISTS courier_inbox_failures (
    id          BIGINT         NOT NULL AUTO_INCREMENT,
    consumer    VARBINARY(255) NOT NULL,
    message_id  CHAR(36)       CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    failed_at   DATETIME(6)    NOT NULL,
    error       MEDIUMTEXT     NOT NULL,
    PRIMARY KEY (id),
    KEY courier_inbox_failures_message (consumer, message_id, id),
    KEY courier_inbox_failures_failed_at (failed_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
