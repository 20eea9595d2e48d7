-- Held keys (relay.Config.HoldKeys): a dead letter of a topic that holds
-- its keys stops its key until it is replayed or discarded. Its key's later
-- messages wait in courier_outbox_held, out of the claims' way, behind it.
ALTER TABLE courier_outbox_dead_letters ADD COLUMN holds boolean NOT NULL DEFAULT false;

-- The keys held: a claim reads it at each call, so it must cost nothing
-- when no dead letter holds its key.
CREATE INDEX courier_outbox_dead_letters_holds ON courier_outbox_dead_letters (ordering_key) WHERE holds;

-- Messages held behind a dead letter (behind: its id), with their outbox
-- id; replaying or discarding the dead letter moves them back.
CREATE TABLE courier_outbox_held (
    id            bigint      PRIMARY KEY,
    behind        bigint      NOT NULL,
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
    held_at       timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX courier_outbox_held_behind ON courier_outbox_held (behind, id);

-- courier_claim, both of them (0006's, and 0008's at p_now: identical but
-- for now() and p_now), with the keys dead letters hold: they are held as
-- a live lease's are, and the rows of those keys the claim meets in its
-- window (the free rows at or above the floor, at most p_window) move to
-- courier_outbox_held, behind the oldest dead letter that holds their key.
-- So a held key's backlog never fills the window nor keeps the floor down.
-- Moved rows leave the window; the free rows after them are scanned as
-- before, up to p_window. Replaying or discarding the dead letter (store
-- Admin) takes the claim's advisory lock, so a claim never moves a row
-- behind a dead letter that is going.
--
-- When no dead letter holds its key, the move is skipped after one probe
-- of courier_outbox_dead_letters_holds (a partial index, empty), and the
-- held keys gain one empty scan of it: the claim costs what it did.
-- Every setting of 0006 stays (see its comments).

CREATE OR REPLACE FUNCTION courier_claim(p_owner text, p_limit integer, p_lease interval, p_window integer, p_floor bigint)
RETURNS TABLE (lease bigint, ids bigint[], min_pending bigint)
LANGUAGE plpgsql SET work_mem = '64MB' SET jit = off SET enable_seqscan = off SET enable_bitmapscan = off AS $$
DECLARE
    v_ids   bigint[];
    v_keys  text[];
    v_lease bigint;
    v_min   bigint;
BEGIN
    -- "clai" << 32 | the table's oid: one claim at a time per outbox.
    PERFORM pg_advisory_xact_lock((1668047209::bigint << 32) | 'courier_outbox'::regclass::oid::bigint);
    -- Leases that ended lately; a full pass (p_floor 0) removes all of them.
    DELETE FROM courier_outbox_leases l
    WHERE l.until <= now() AND (p_floor = 0 OR l.until > now() - interval '10 minutes');
    -- Rows of keys a dead letter holds, met in the window: moved to
    -- courier_outbox_held, behind the (oldest) dead letter that holds
    -- their key. Without any, this is one probe of an empty partial index.
    IF EXISTS (SELECT 1 FROM courier_outbox_dead_letters d WHERE d.holds) THEN
        WITH causes AS MATERIALIZED (
            SELECT d.ordering_key AS k, min(d.id) AS cause FROM courier_outbox_dead_letters d
            WHERE d.holds GROUP BY d.ordering_key
        ), win AS (
            SELECT o.id, o.ordering_key FROM courier_outbox o
            WHERE o.id >= p_floor
              AND (o.retry_at IS NULL OR o.retry_at <= now())
              AND o.id NOT IN (SELECT unnest(l.ids) FROM courier_outbox_leases l WHERE l.until > now())
            ORDER BY o.id
            LIMIT p_window
        ), moved AS (
            DELETE FROM courier_outbox o USING win w, causes c
            WHERE o.id = w.id AND w.ordering_key = c.k
            RETURNING o.id, c.cause, o.message_id, o.topic, o.ordering_key, o.type, o.version, o.content_type,
                      o.payload, o.headers, o.occurred_at, o.created_at
        )
        INSERT INTO courier_outbox_held (id, behind, message_id, topic, ordering_key, type, version, content_type,
                                         payload, headers, occurred_at, created_at, held_at)
        SELECT m.id, m.cause, m.message_id, m.topic, m.ordering_key, m.type, m.version, m.content_type,
               m.payload, m.headers, m.occurred_at, m.created_at, now()
        FROM moved m;
    END IF;
    WITH live AS MATERIALIZED (
        SELECT l.ids, l.keys FROM courier_outbox_leases l WHERE l.until > now()
    ), held AS MATERIALIZED (
        SELECT unnest(l.keys) AS k FROM live l
        UNION ALL
        SELECT o.ordering_key FROM courier_outbox o WHERE o.retry_at > now()
        UNION ALL
        SELECT d.ordering_key FROM courier_outbox_dead_letters d WHERE d.holds
    ), retried AS MATERIALIZED (
        SELECT o.ordering_key AS k FROM courier_outbox o WHERE o.retry_at <= now()
    ), free AS (
        SELECT o.id, o.ordering_key, o.retry_at IS NOT NULL AS retried FROM courier_outbox o
        WHERE o.id >= p_floor
          AND (o.retry_at IS NULL OR o.retry_at <= now())
          AND o.id NOT IN (SELECT unnest(l.ids) FROM live l)
        ORDER BY o.id
        LIMIT p_window
    ), picked AS (
        SELECT f.id, f.ordering_key FROM free f
        WHERE f.ordering_key NOT IN (SELECT h.k FROM held h)
          AND (f.retried OR f.ordering_key NOT IN (SELECT r.k FROM retried r))
        ORDER BY f.id
        LIMIT p_limit
    )
    SELECT array_agg(p.id ORDER BY p.id), array_agg(DISTINCT p.ordering_key) INTO v_ids, v_keys FROM picked p;
    SELECT min(o.id) INTO v_min FROM courier_outbox o WHERE o.id >= p_floor;
    IF v_min IS NULL THEN
        -- Nothing pending: the next id is the floor. Reading the sequence
        -- needs SELECT or USAGE on it; without, the floor stays where it is.
        BEGIN
            v_min := coalesce(pg_sequence_last_value(pg_get_serial_sequence('courier_outbox', 'id')::regclass), 0) + 1;
        EXCEPTION WHEN insufficient_privilege THEN
            v_min := p_floor;
        END;
    END IF;
    IF v_ids IS NOT NULL THEN
        INSERT INTO courier_outbox_leases AS l (owner, until, ids, keys)
        VALUES (p_owner, now() + p_lease, v_ids, v_keys)
        RETURNING l.id INTO v_lease;
    END IF;
    RETURN QUERY SELECT v_lease, v_ids, v_min;
END
$$;

CREATE OR REPLACE FUNCTION courier_claim(p_owner text, p_limit integer, p_lease interval, p_window integer, p_floor bigint,
                              p_now timestamptz)
RETURNS TABLE (lease bigint, ids bigint[], min_pending bigint)
LANGUAGE plpgsql SET work_mem = '64MB' SET jit = off SET enable_seqscan = off SET enable_bitmapscan = off AS $$
DECLARE
    v_ids   bigint[];
    v_keys  text[];
    v_lease bigint;
    v_min   bigint;
BEGIN
    -- "clai" << 32 | the table's oid: one claim at a time per outbox.
    PERFORM pg_advisory_xact_lock((1668047209::bigint << 32) | 'courier_outbox'::regclass::oid::bigint);
    -- Leases that ended lately; a full pass (p_floor 0) removes all of them.
    DELETE FROM courier_outbox_leases l
    WHERE l.until <= p_now AND (p_floor = 0 OR l.until > p_now - interval '10 minutes');
    -- Rows of keys a dead letter holds, met in the window: moved to
    -- courier_outbox_held, behind the (oldest) dead letter that holds
    -- their key. Without any, this is one probe of an empty partial index.
    IF EXISTS (SELECT 1 FROM courier_outbox_dead_letters d WHERE d.holds) THEN
        WITH causes AS MATERIALIZED (
            SELECT d.ordering_key AS k, min(d.id) AS cause FROM courier_outbox_dead_letters d
            WHERE d.holds GROUP BY d.ordering_key
        ), win AS (
            SELECT o.id, o.ordering_key FROM courier_outbox o
            WHERE o.id >= p_floor
              AND (o.retry_at IS NULL OR o.retry_at <= p_now)
              AND o.id NOT IN (SELECT unnest(l.ids) FROM courier_outbox_leases l WHERE l.until > p_now)
            ORDER BY o.id
            LIMIT p_window
        ), moved AS (
            DELETE FROM courier_outbox o USING win w, causes c
            WHERE o.id = w.id AND w.ordering_key = c.k
            RETURNING o.id, c.cause, o.message_id, o.topic, o.ordering_key, o.type, o.version, o.content_type,
                      o.payload, o.headers, o.occurred_at, o.created_at
        )
        INSERT INTO courier_outbox_held (id, behind, message_id, topic, ordering_key, type, version, content_type,
                                         payload, headers, occurred_at, created_at, held_at)
        SELECT m.id, m.cause, m.message_id, m.topic, m.ordering_key, m.type, m.version, m.content_type,
               m.payload, m.headers, m.occurred_at, m.created_at, p_now
        FROM moved m;
    END IF;
    WITH live AS MATERIALIZED (
        SELECT l.ids, l.keys FROM courier_outbox_leases l WHERE l.until > p_now
    ), held AS MATERIALIZED (
        SELECT unnest(l.keys) AS k FROM live l
        UNION ALL
        SELECT o.ordering_key FROM courier_outbox o WHERE o.retry_at > p_now
        UNION ALL
        SELECT d.ordering_key FROM courier_outbox_dead_letters d WHERE d.holds
    ), retried AS MATERIALIZED (
        SELECT o.ordering_key AS k FROM courier_outbox o WHERE o.retry_at <= p_now
    ), free AS (
        SELECT o.id, o.ordering_key, o.retry_at IS NOT NULL AS retried FROM courier_outbox o
        WHERE o.id >= p_floor
          AND (o.retry_at IS NULL OR o.retry_at <= p_now)
          AND o.id NOT IN (SELECT unnest(l.ids) FROM live l)
        ORDER BY o.id
        LIMIT p_window
    ), picked AS (
        SELECT f.id, f.ordering_key FROM free f
        WHERE f.ordering_key NOT IN (SELECT h.k FROM held h)
          AND (f.retried OR f.ordering_key NOT IN (SELECT r.k FROM retried r))
        ORDER BY f.id
        LIMIT p_limit
    )
    SELECT array_agg(p.id ORDER BY p.id), array_agg(DISTINCT p.ordering_key) INTO v_ids, v_keys FROM picked p;
    SELECT min(o.id) INTO v_min FROM courier_outbox o WHERE o.id >= p_floor;
    IF v_min IS NULL THEN
        -- Nothing pending: the next id is the floor. Reading the sequence
        -- needs SELECT or USAGE on it; without, the floor stays where it is.
        BEGIN
            v_min := coalesce(pg_sequence_last_value(pg_get_serial_sequence('courier_outbox', 'id')::regclass), 0) + 1;
        EXCEPTION WHEN insufficient_privilege THEN
            v_min := p_floor;
        END;
    END IF;
    IF v_ids IS NOT NULL THEN
        INSERT INTO courier_outbox_leases AS l (owner, until, ids, keys)
        VALUES (p_owner, p_now + p_lease, v_ids, v_keys)
        RETURNING l.id INTO v_lease;
    END IF;
    RETURN QUERY SELECT v_lease, v_ids, v_min;
END
$$;
