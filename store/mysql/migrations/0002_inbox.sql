-- The inbox: one marker per message a consumer applied, inserted in the same
-- transaction as the consumer's effects. A redelivered message finds its
-- marker and is skipped. consumer is VARBINARY, compared byte for byte: no
-- collation merges two names ("billing " is not "billing"). Names longer
-- than 255 bytes are refused before anything is written.
CREATE TABLE IF NOT EXISTS courier_inbox (
    consumer      VARBINARY(255) NOT NULL,
    message_id    CHAR(36)       CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    processed_at  DATETIME(6)    NOT NULL,
    PRIMARY KEY (consumer, message_id),
    KEY courier_inbox_processed_at (processed_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- Consume-side dead letters: deliveries a consumer gave up on, kept as
-- received so that a replay decodes them afresh. The index serves the
-- consumers' polls for replay requests: rows without one (NULL) sort first
-- and are skipped by the range (MySQL has no partial indexes).
CREATE TABLE IF NOT EXISTS courier_inbox_dead_letters (
    id                BIGINT         NOT NULL AUTO_INCREMENT,
    consumer          VARBINARY(255) NOT NULL,
    message_id        VARCHAR(255)   NOT NULL,
    subject           TEXT           NOT NULL,
    headers           JSON           NULL,
    payload           LONGBLOB       NOT NULL,
    reason            VARCHAR(32)    NOT NULL,
    last_error        MEDIUMTEXT     NOT NULL,
    attempts          INT            NOT NULL,
    history           JSON           NULL,
    parked_at         DATETIME(6)    NOT NULL,
    replay_requested  DATETIME(6)    NULL,
    PRIMARY KEY (id),
    KEY courier_inbox_dead_letters_replay (consumer, replay_requested)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
