-- Scheduled messages: written in the producer's transaction with a due
-- time, kept here until they fall due. A relay's release (courier_release)
-- then moves each into courier_outbox, where it is published like any
-- message; so a message due next week is not in the outbox, and neither
-- holds its key back nor costs a claim anything until then. Released rows
-- stay, without their payload and headers, so that cancelling one says it
-- was published; `courier cleanup --keep-released` trims them.
CREATE TABLE courier_outbox_scheduled (
    -- The order messages were scheduled in, which breaks ties between
    -- equal due times.
    id            bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    message_id    uuid        NOT NULL UNIQUE,
    due_at        timestamptz NOT NULL,
    topic         text        NOT NULL,
    ordering_key  text        NOT NULL,
    type          text        NOT NULL,
    version       integer     NOT NULL,
    content_type  text        NOT NULL,
    payload       bytea,
    headers       jsonb,
    occurred_at   timestamptz NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    -- Set when the release moved the message into courier_outbox.
    released_at   timestamptz
);

-- The waiting messages by due time: a release reads the first ones, and
-- the next due time is its first entry. Partial: released rows are not in
-- it.
CREATE INDEX courier_outbox_scheduled_due ON courier_outbox_scheduled (due_at, id) WHERE released_at IS NULL;
-- Released rows by release time, for their retention trim.
CREATE INDEX courier_outbox_scheduled_released ON courier_outbox_scheduled (released_at) WHERE released_at IS NOT NULL;

-- A scheduling statement wakes a waiting relay as an outbox write does
-- (0005: the WHEN clause tries the lock a waiting relay holds), on the
-- outbox's channel, so that the relay learns of a due time earlier than
-- the one it waits for.
CREATE FUNCTION courier_outbox_scheduled_wake() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('courier_outbox_' || (quote_ident(TG_TABLE_SCHEMA) || '.courier_outbox')::regclass::oid::text, '');
    RETURN NULL;
END
$$;

CREATE TRIGGER courier_outbox_scheduled_wake AFTER INSERT ON courier_outbox_scheduled
    FOR EACH STATEMENT
    WHEN (NOT pg_try_advisory_xact_lock_shared((1668248946::bigint << 32) | 'courier_outbox'::regclass::oid::bigint))
    EXECUTE FUNCTION courier_outbox_scheduled_wake();

-- courier_release moves up to p_limit scheduled messages due at p_now into
-- courier_outbox, in due order (then scheduling order), created at p_now
-- and occurring at their due time, and marks them released; it returns how many it moved, whether messages
-- still wait and how long until the first of them is due. One server-side
-- call, so that no lock outlives it whatever the client does (a relay
-- frozen while it reads the answer holds nothing). Releases take turns
-- under an advisory lock ("rele" << 32 | the table's OID): a key's due
-- messages get their outbox ids, and so their place in the key's order, in
-- due order. A release that finds the lock taken moves nothing and says
-- busy. Rows a caller's transaction is cancelling (locked by its DELETE)
-- are skipped, and released by a later call if that transaction rolls
-- back.
CREATE FUNCTION courier_release(p_limit integer, p_now timestamptz)
RETURNS TABLE (released integer, waiting boolean, next_in interval, busy boolean)
LANGUAGE plpgsql AS $$
DECLARE
    v_n    integer;
    v_next timestamptz;
BEGIN
    IF NOT pg_try_advisory_xact_lock((1919249509::bigint << 32) | 'courier_outbox_scheduled'::regclass::oid::bigint) THEN
        RETURN QUERY SELECT 0, false, NULL::interval, true;
        RETURN;
    END IF;
    -- Nothing due, the usual case (an idle relay asks every 100 ms): the
    -- index's first entry says so, and the move below, whose plan depends
    -- on p_now and is made afresh each call, is not run.
    SELECT s.due_at INTO v_next FROM courier_outbox_scheduled s
    WHERE s.released_at IS NULL ORDER BY s.due_at, s.id LIMIT 1;
    IF v_next IS NULL OR v_next > p_now THEN
        RETURN QUERY SELECT 0, v_next IS NOT NULL, v_next - p_now, false;
        RETURN;
    END IF;
    WITH due AS MATERIALIZED (
        SELECT s.id, s.message_id, s.topic, s.ordering_key, s.type, s.version, s.content_type, s.payload,
               s.headers, s.occurred_at, s.due_at
        FROM courier_outbox_scheduled s
        WHERE s.released_at IS NULL AND s.due_at <= p_now
        ORDER BY s.due_at, s.id
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    ), moved AS (
        INSERT INTO courier_outbox (message_id, topic, ordering_key, type, version, content_type, payload, headers,
                                    occurred_at, created_at)
        SELECT d.message_id, d.topic, d.ordering_key, d.type, d.version, d.content_type, coalesce(d.payload, ''::bytea),
               d.headers, d.due_at, p_now
        FROM due d
        ORDER BY d.due_at, d.id
    )
    UPDATE courier_outbox_scheduled s SET released_at = p_now, payload = NULL, headers = NULL
    FROM due d WHERE s.id = d.id;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    SELECT s.due_at INTO v_next FROM courier_outbox_scheduled s
    WHERE s.released_at IS NULL ORDER BY s.due_at, s.id LIMIT 1;
    RETURN QUERY SELECT v_n, v_next IS NOT NULL, v_next - p_now, false;
END
$$;
