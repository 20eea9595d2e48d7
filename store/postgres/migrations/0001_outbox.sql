-- The outbox: one row per message, written in the producer's transaction.
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
    -- The row may be claimed once available_at has passed. While a relay
    -- holds the row it is the lease's end; after a failure, the next attempt.
    available_at  timestamptz NOT NULL DEFAULT now(),
    lease_owner   text,
    attempts      integer     NOT NULL DEFAULT 0,
    last_error    text,
    -- The latest failures, oldest first: [{"at":…, "error":…, "counted":…}].
    history       jsonb,
    published_at  timestamptz
);

CREATE UNIQUE INDEX courier_outbox_message_id ON courier_outbox (message_id);

-- The relay scans pending rows in id order. Partial, so millions of
-- published rows kept for retention cost the scan nothing.
CREATE INDEX courier_outbox_pending ON courier_outbox (id) WHERE published_at IS NULL;

-- "Is an earlier row of this key leased or backing off?" is a range scan over
-- (ordering_key, available_at > now()): it visits only the key's blocked rows,
-- never its long tail of claimable ones, so a burst on one key is claimed in
-- whole batches.
CREATE INDEX courier_outbox_pending_key ON courier_outbox (ordering_key, available_at) WHERE published_at IS NULL;

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
