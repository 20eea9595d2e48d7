-- Held keys on the consumer side (inbox.Config.HoldKeys): a parked
-- delivery of a topic that holds its keys stops its key for its consumer;
-- the key's later deliveries are parked behind it until it is replayed or
-- discarded.
ALTER TABLE courier_inbox_dead_letters ADD COLUMN IF NOT EXISTS ordering_key VARCHAR(1024) NULL;
ALTER TABLE courier_inbox_dead_letters ADD COLUMN IF NOT EXISTS behind BIGINT NULL;

CREATE TABLE IF NOT EXISTS courier_inbox_holds (
    consumer      VARCHAR(255)  NOT NULL,
    ordering_key  VARCHAR(1024) NOT NULL,
    cause         BIGINT        NOT NULL,
    since         DATETIME(6)   NOT NULL,
    -- A key may be 1,024 characters: too long for an index of its own.
    key_hash      BINARY(32)    AS (UNHEX(SHA2(ordering_key, 256))) PERSISTENT,
    UNIQUE KEY courier_inbox_holds_key (consumer, key_hash)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

ALTER TABLE courier_inbox_dead_letters ADD KEY IF NOT EXISTS courier_inbox_dead_letters_behind (behind, id);
