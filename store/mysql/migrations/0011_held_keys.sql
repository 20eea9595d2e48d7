-- Held keys (relay.Config.HoldKeys): a dead letter of a topic that holds
-- its keys stops its key until it is replayed or discarded. Its key's later
-- messages wait in courier_outbox_held, out of the claims' way, behind it.
-- (MySQL has no ADD COLUMN IF NOT EXISTS: a run that finds the column or
-- the index there skips the statement.)
ALTER TABLE courier_outbox_dead_letters ADD COLUMN holds BOOLEAN NOT NULL DEFAULT FALSE;

-- The keys held: a claim reads them at each call, through this index, so
-- that it costs one probe of an empty range when no dead letter holds its
-- key (MySQL has no partial indexes).
ALTER TABLE courier_outbox_dead_letters ADD KEY courier_outbox_dead_letters_holds (holds, id);

CREATE TABLE IF NOT EXISTS courier_outbox_held (
    id            BIGINT        NOT NULL,
    behind        BIGINT        NOT NULL,
    message_id    CHAR(36)      CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    topic         VARCHAR(255)  NOT NULL,
    ordering_key  VARCHAR(1024) NOT NULL,
    type          VARCHAR(255)  NOT NULL,
    version       INT           NOT NULL,
    content_type  VARCHAR(255)  NOT NULL,
    payload       LONGBLOB      NOT NULL,
    headers       JSON          NULL,
    occurred_at   DATETIME(6)   NOT NULL,
    created_at    DATETIME(6)   NOT NULL,
    held_at       DATETIME(6)   NOT NULL,
    PRIMARY KEY (id),
    KEY courier_outbox_held_behind (behind, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
