-- The outbox: one row per message not yet published, written in the
-- producer's transaction. Publishing removes the row (keeping a copy in
-- courier_outbox_published when the relay is asked to), so the table holds
-- only pending work and its primary key is the relay's scan order.
CREATE TABLE courier_outbox (
    -- Allocation order; messages of one key are published in this order.
    id            bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    message_id    uuid        NOT NULL,
    topic         text        NOT NULL,
    ordering_key  text        NOT NULL,
    type          text        NOT NULL,
    version       integer     NOT NULL,
    content_type  text        NOT NULL,
    payload       bytea       NOT NULL,
    headers       jsonb,
    occurred_at   timestamptz NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    attempts      integer     NOT NULL DEFAULT 0,
    -- Set after a failed attempt: neither this row nor any later row of its
    -- key is published before then.
    retry_at      timestamptz,
    last_error    text,
    -- The latest failures, oldest first: [{"at":…, "error":…, "counted":…}].
    history       jsonb
);

-- Rows waiting for a retry, and so the keys they hold back. Partial: rows
-- that never failed (nearly all) are not in it, and writers never touch it.
CREATE INDEX courier_outbox_retry ON courier_outbox (retry_at) WHERE retry_at IS NOT NULL;

-- A relay's claim: which rows (and so which keys) it holds until when. One
-- row per claimed batch instead of a write to every claimed message.
CREATE TABLE courier_outbox_leases (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    owner       text        NOT NULL,
    until       timestamptz NOT NULL,
    ids         bigint[]    NOT NULL,
    keys        text[]      NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- Published messages, kept only when the relay runs with KeepPublished
-- (`courier relay --keep-published`), for audits; trim it by published_at.
CREATE TABLE courier_outbox_published (
    id            bigint      NOT NULL,
    message_id    uuid        NOT NULL,
    topic         text        NOT NULL,
    ordering_key  text        NOT NULL,
    type          text        NOT NULL,
    version       integer     NOT NULL,
    content_type  text        NOT NULL,
    payload       bytea       NOT NULL,
    headers       jsonb,
    occurred_at   timestamptz NOT NULL,
    created_at    timestamptz NOT NULL,
    attempts      integer     NOT NULL,
    published_at  timestamptz NOT NULL DEFAULT now()
);
-- BRIN: rows arrive in published_at order; the index costs almost nothing to
-- maintain and serves retention deletes.
CREATE INDEX courier_outbox_published_at ON courier_outbox_published USING brin (published_at);

-- Messages that failed MaxAttempts times, with their history. Replaying one
-- moves it back into courier_outbox.
CREATE TABLE courier_outbox_dead_letters (
    id            bigint      PRIMARY KEY,
    message_id    uuid        NOT NULL UNIQUE,
    topic         text        NOT NULL,
    ordering_key  text        NOT NULL,
    type          text        NOT NULL,
    version       integer     NOT NULL,
    content_type  text        NOT NULL,
    payload       bytea       NOT NULL,
    headers       jsonb,
    occurred_at   timestamptz NOT NULL,
    created_at    timestamptz NOT NULL,
    attempts      integer     NOT NULL,
    last_error    text        NOT NULL,
    history       jsonb,
    dead_at       timestamptz NOT NULL DEFAULT now()
);

-- Wake-ups without serialising writers. NOTIFY in every transaction would
-- make all committing writers queue on one global lock. Instead a relay that
-- has run out of work holds an advisory lock exclusively; a writer's insert
-- tries the same lock shared. Success (the usual case while relays are busy)
-- costs a lock-table entry and nothing else; failure means a relay is
-- waiting, and only then does the writer NOTIFY.
CREATE FUNCTION courier_outbox_wake() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT pg_try_advisory_xact_lock_shared((1668248946::bigint << 32) | TG_RELID::bigint) THEN
        PERFORM pg_notify('courier_outbox_' || TG_RELID::text, '');
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER courier_outbox_wake AFTER INSERT ON courier_outbox
    FOR EACH STATEMENT EXECUTE FUNCTION courier_outbox_wake();
