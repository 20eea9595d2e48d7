-- courier_claim at a given time: the claim of 0006, reading lease ends and
-- retry times against p_now instead of now(), and recording a lease that
-- ends at p_now + p_lease. Stores given a clock (tests, which move it
-- forward instead of sleeping until a lease or a retry delay has passed)
-- call it; without a clock they call 0006's five-argument function, which
-- stays as it was. Not a default argument of that one: its statements
-- would then compare with a parameter instead of now(), whose value the
-- planner cannot see in a generic plan, and PL/pgSQL kept re-planning the
-- claim's main statement at every call (half a millisecond of a claim's
-- three).
--
-- The body is 0006's with p_now for now(); a migration that changes one
-- changes both.
CREATE FUNCTION courier_claim(p_owner text, p_limit integer, p_lease interval, p_window integer, p_floor bigint,
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
    WITH live AS MATERIALIZED (
        SELECT l.ids, l.keys FROM courier_outbox_leases l WHERE l.until > p_now
    ), held AS MATERIALIZED (
        SELECT unnest(l.keys) AS k FROM live l
        UNION ALL
        SELECT o.ordering_key FROM courier_outbox o WHERE o.retry_at > p_now
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
