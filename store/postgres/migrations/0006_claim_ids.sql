-- Two changes to courier_claim.
--
-- It returns the lease and the claimed ids only; the relay reads the rows'
-- contents afterwards, outside the claim's transaction. A claim holds the
-- claim lock until its transaction ends, and a transaction ends only after
-- its result has been handed to the client's socket: streaming payloads
-- inside it let a relay that froze (SIGSTOP, a paused VM, a host gone
-- silent) while reading a large result hold the lock, and so every other
-- relay, for as long as it stayed frozen. One row of ids fits in the
-- socket's buffers, so the transaction commits whatever the client does.
--
-- It scans from a floor the relay passes (p_floor) and returns the smallest
-- pending id at or above it (min_pending), or the id the next insert will
-- get when there is none. Published rows are deleted, and the primary key
-- keeps their entries until vacuum removes them; while any transaction
-- older than the deletes is open (which stops vacuum), a scan from the
-- start of the index visits every one of them, half a second per claim at
-- 5 million. A scan from the floor visits only those above it. The relay
-- keeps the floor at or below every row that may still be claimed (see
-- store/postgres, Claiming) and passes 0 now and then to find rows below
-- it.
--
-- JIT compilation is off for the call: a claim's statements run for a
-- millisecond or less, and when the table's statistics are stale (a large
-- table never analysed) their estimated cost passes jit_above_cost, and
-- compiling took 5–6 ms per statement, twenty times the claim itself.
-- Sequential and bitmap scans are off too: the scan of free rows is bounded
-- by p_window, and when that is near the table's estimated size the planner
-- read the whole table and sorted it (47 ms at 100,000 rows) instead of
-- walking the primary key and stopping after p_limit picks (3 ms).
--
-- A row whose retry has come due is picked alone, without the rows of its
-- key behind it: it failed before and may well fail again, and the rows
-- behind it would then be read and handed back at every retry.
--
-- As before: the held keys (live leases, rows waiting for a retry) and the
-- free rows are read by one statement, so against one snapshot and one
-- now(); rows of held keys are skipped as the scan meets them, at most
-- p_window free rows are looked at, and the scan stops once p_limit rows
-- are picked.
DROP FUNCTION courier_claim(text, integer, interval, integer);

-- Live leases are read by until, so a claim skips the entries of ended
-- leases, live or not yet vacuumed.
CREATE INDEX courier_outbox_leases_until ON courier_outbox_leases (until);

CREATE FUNCTION courier_claim(p_owner text, p_limit integer, p_lease interval, p_window integer, p_floor bigint)
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
    WITH live AS MATERIALIZED (
        SELECT l.ids, l.keys FROM courier_outbox_leases l WHERE l.until > now()
    ), held AS MATERIALIZED (
        SELECT unnest(l.keys) AS k FROM live l
        UNION ALL
        SELECT o.ordering_key FROM courier_outbox o WHERE o.retry_at > now()
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
