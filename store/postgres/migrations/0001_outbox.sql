-- The outbox: one row per message not yet published, written in the
-- producer's transaction. Publishing removes the row (keeping a copy in
-- courier_outbox_published when the relay is asked to), so the table holds
-- only pending work and its primary key is the relay's scan order.
CREATE TABLE courier_outbox (
    -- Allocated at insert, not at commit. A claim takes a key's committed rows
    -- in id order: writers serialised per key (a row lock or version check on
    -- the aggregate) get their messages published in write order; concurrent,
    -- unserialised writers of a key in the order their rows become visible.
    -- The contract: package relay, Ordering.
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

-- courier_claim leases up to p_limit claimable rows to p_owner for p_lease and
-- returns them with the lease's id, in one round trip. See the package
-- documentation of store/postgres for why claims are serialised. Claimable:
-- among the oldest rows that are neither leased nor waiting for a retry (at
-- most p_window of them), in id order, those whose key is held neither by a
-- live lease nor by a row waiting for a retry. Both exclusions are hashed
-- subplans; work_mem is raised for the call so they stay hashed however many
-- keys are held.
CREATE FUNCTION courier_claim(p_owner text, p_limit integer, p_lease interval, p_window integer)
RETURNS TABLE (lease bigint, id bigint, attempts integer, message_id uuid, topic text, ordering_key text,
               type text, version integer, content_type text, payload bytea, headers jsonb, occurred_at timestamptz)
LANGUAGE plpgsql SET work_mem = '64MB' AS $$
DECLARE
    v_ids   bigint[];
    v_keys  text[];
    v_lease bigint;
BEGIN
    -- "clai" << 32 | the table's oid: one claim at a time per outbox.
    PERFORM pg_advisory_xact_lock((1668047209::bigint << 32) | 'courier_outbox'::regclass::oid::bigint);
    DELETE FROM courier_outbox_leases l WHERE l.until <= now();
    WITH held AS MATERIALIZED (
        SELECT unnest(l.keys) AS k FROM courier_outbox_leases l
        UNION ALL
        SELECT o.ordering_key FROM courier_outbox o WHERE o.retry_at > now()
    ), candidates AS (
        SELECT o.id, o.ordering_key FROM courier_outbox o
        WHERE (o.retry_at IS NULL OR o.retry_at <= now())
          AND o.id NOT IN (SELECT unnest(l.ids) FROM courier_outbox_leases l)
        ORDER BY o.id
        LIMIT p_window
    ), picked AS (
        SELECT c.id, c.ordering_key FROM candidates c
        WHERE c.ordering_key NOT IN (SELECT h.k FROM held h)
        ORDER BY c.id
        LIMIT p_limit
    )
    SELECT array_agg(p.id ORDER BY p.id), array_agg(DISTINCT p.ordering_key) INTO v_ids, v_keys FROM picked p;
    IF v_ids IS NULL THEN
        RETURN;
    END IF;
    INSERT INTO courier_outbox_leases AS l (owner, until, ids, keys)
    VALUES (p_owner, now() + p_lease, v_ids, v_keys)
    RETURNING l.id INTO v_lease;
    RETURN QUERY
        SELECT v_lease, o.id, o.attempts, o.message_id, o.topic, o.ordering_key, o.type, o.version,
               o.content_type, o.payload, o.headers, o.occurred_at
        FROM courier_outbox o WHERE o.id = ANY(v_ids) ORDER BY o.id;
END
$$;

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
