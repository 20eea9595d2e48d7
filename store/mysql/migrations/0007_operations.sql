-- Indexes for the operators' tools (courier status, reconcile and cleanup;
-- store.Operations), so that each of their queries reads only the rows it
-- reports or deletes. None is on a table the outbox's or the inbox's writers
-- write on the hot path. MySQL has no partial indexes: the condition's
-- column leads instead. Each statement adds one index; a
-- rerun after a failure skips the indexes that exist (Migrate ignores
-- ER_DUP_KEYNAME).

-- Retention of dead letters and listing them oldest first.
ALTER TABLE courier_outbox_dead_letters ADD KEY courier_outbox_dead_letters_dead_at (dead_at);
ALTER TABLE courier_inbox_dead_letters ADD KEY courier_inbox_dead_letters_parked_at (parked_at);

-- Keys left in flight (status counts them, reconcile finds those whose lock
-- has expired).
ALTER TABLE courier_idempotency_keys ADD KEY courier_idempotency_keys_in_flight (state, locked_until);

-- Unfinished sagas by type and state (status), and finished ones by the time
-- they finished (retention, oldest first).
ALTER TABLE courier_sagas ADD KEY courier_sagas_phase (phase, saga_type, state);
ALTER TABLE courier_sagas ADD KEY courier_sagas_finished (phase, updated_at);
