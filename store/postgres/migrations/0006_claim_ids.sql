-- courier_claim returns the lease and the claimed ids only; the relay reads
-- the rows' contents afterwards, outside the claim's transaction. A claim
-- holds the claim lock until its transaction ends, and a transaction ends
-- only after its result has been handed to the client's socket: streaming
-- payloads inside it let a relay that froze (SIGSTOP, a paused VM, a host
-- gone silent) while reading a large result hold the lock, and so every
-- other relay, for as long as it stayed frozen. A row of ids fits in the
-- socket's buffers, so the transaction commits whatever the client does.
--
-- Otherwise unchanged from 0001: the held keys (live leases, rows waiting
-- for a retry) and the free rows are read by one statement, so against one
-- snapshot and one now(); rows of held keys are skipped as the scan meets
-- them, at most p_window free rows are looked at, and the scan stops once
-- p_limit rows are picked.
DROP FUNCTION courier_claim(text, integer, interval, integer);

CREATE FUNCTION courier_claim(p_owner text, p_limit integer, p_lease interval, p_window integer)
RETURNS TABLE (lease bigint, ids bigint[])
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
    ), free AS (
        SELECT o.id, o.ordering_key FROM courier_outbox o
        WHERE (o.retry_at IS NULL OR o.retry_at <= now())
          AND o.id NOT IN (SELECT unnest(l.ids) FROM courier_outbox_leases l)
        ORDER BY o.id
        LIMIT p_window
    ), picked AS (
        SELECT f.id, f.ordering_key FROM free f
        WHERE f.ordering_key NOT IN (SELECT h.k FROM held h)
        ORDER BY f.id
        LIMIT p_limit
    )
    SELECT array_agg(p.id ORDER BY p.id), array_agg(DISTINCT p.ordering_key) INTO v_ids, v_keys FROM picked p;
    IF v_ids IS NULL THEN
        RETURN;
    END IF;
    INSERT INTO courier_outbox_leases AS l (owner, until, ids, keys)
    VALUES (p_owner, now() + p_lease, v_ids, v_keys)
    RETURNING l.id INTO v_lease;
    RETURN QUERY SELECT v_lease, v_ids;
END
$$;
