-- Courier's schema for MySQL 8.0 and MariaDB 10.6 or newer.
--
-- Times are DATETIME(6) in UTC from the server's clock (UTC_TIMESTAMP(6)),
-- whatever the session's time_zone. Text is utf8mb4 with a binary
-- collation, and Courier never compares keys in SQL anyway: "Key" is not
-- "key", "k " is not "k". MySQL commits DDL at once, so every statement is
-- idempotent (IF NOT EXISTS, INSERT IGNORE), and a migration interrupted
-- halfway is finished by running it again. Statements end with a semicolon
-- at the end of a line; comments take whole lines.

-- The outbox: one row per message not yet published, written in the
-- producer's transaction. Publishing removes the row (keeping a copy in
-- courier_outbox_published when the relay is asked to), so the table holds
-- only pending work and its primary key is the relay's scan order. The
-- index on retry_at serves the keys held back by a retry; it holds NULL for
-- rows that never failed (MySQL has no partial indexes). The id is
-- AUTO_INCREMENT, allocated at insert, not at commit. A claim takes a key's
-- committed rows in id order: writers serialised per key (a row lock or
-- version check on the aggregate) get their messages published in write
-- order; concurrent, unserialised writers of a key in the order their rows
-- become visible. The contract: package relay, Ordering.
CREATE TABLE IF NOT EXISTS courier_outbox (
    id            BIGINT        NOT NULL AUTO_INCREMENT,
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
    attempts      INT           NOT NULL DEFAULT 0,
    retry_at      DATETIME(6)   NULL,
    last_error    MEDIUMTEXT    NULL,
    history       JSON          NULL,
    PRIMARY KEY (id),
    KEY courier_outbox_retry (retry_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- A relay's claim: which rows (and so which keys) it holds until when. One
-- row per claimed batch; ids and ordering_keys are JSON arrays (KEYS is a
-- reserved word in MySQL).
CREATE TABLE IF NOT EXISTS courier_outbox_leases (
    id             BIGINT       NOT NULL AUTO_INCREMENT,
    owner          TEXT         NOT NULL,
    until          DATETIME(6)  NOT NULL,
    ids            JSON         NOT NULL,
    ordering_keys  JSON         NOT NULL,
    created_at     DATETIME(6)  NOT NULL,
    PRIMARY KEY (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- One row that serialises claims: a claim locks it (SELECT … FOR UPDATE)
-- for the length of its transaction.
CREATE TABLE IF NOT EXISTS courier_outbox_claim_lock (
    id  TINYINT NOT NULL,
    PRIMARY KEY (id)
) ENGINE=InnoDB;

INSERT IGNORE INTO courier_outbox_claim_lock (id) VALUES (1);

-- Published messages, kept only when the relay runs with KeepPublished, for
-- audits; trim it by published_at.
CREATE TABLE IF NOT EXISTS courier_outbox_published (
    id            BIGINT        NOT NULL,
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
    attempts      INT           NOT NULL,
    published_at  DATETIME(6)   NOT NULL,
    KEY courier_outbox_published_at (published_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- Messages that failed MaxAttempts times, with their history. Replaying one
-- moves it back into courier_outbox.
CREATE TABLE IF NOT EXISTS courier_outbox_dead_letters (
    id            BIGINT        NOT NULL,
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
    attempts      INT           NOT NULL,
    last_error    MEDIUMTEXT    NOT NULL,
    history       JSON          NULL,
    dead_at       DATETIME(6)   NOT NULL,
    PRIMARY KEY (id),
    UNIQUE KEY courier_outbox_dead_letters_message_id (message_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
