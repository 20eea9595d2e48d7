-- Scheduled messages: written in the producer's transaction with a due
-- time, kept here until they fall due. A relay's release then moves each
-- into courier_outbox (in due order, during a claim's turn), where it is
-- published like any message; so a message due next week is not in the
-- outbox, and neither holds its key back nor costs a claim anything until
-- then. Released rows stay, without their payload and headers, so that
-- cancelling one says it was published; `courier cleanup --keep-released`
-- trims them. MySQL has no partial indexes: released_at leads the index a
-- release reads (NULL while a message waits) and the trim's.
CREATE TABLE IF NOT EXISTS courier_outbox_scheduled (
    id            BIGINT        NOT NULL AUTO_INCREMENT,
    message_id    CHAR(36)      CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    due_at        DATETIME(6)   NOT NULL,
    topic         VARCHAR(255)  NOT NULL,
    ordering_key  VARCHAR(1024) NOT NULL,
    type          VARCHAR(255)  NOT NULL,
    version       INT           NOT NULL,
    content_type  VARCHAR(255)  NOT NULL,
    payload       LONGBLOB      NULL,
    headers       JSON          NULL,
    occurred_at   DATETIME(6)   NOT NULL,
    created_at    DATETIME(6)   NOT NULL,
    released_at   DATETIME(6)   NULL,
    PRIMARY KEY (id),
    UNIQUE KEY courier_outbox_scheduled_message (message_id),
    KEY courier_outbox_scheduled_due (released_at, due_at, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
