-- Indexes for the operators' tools (courier status, reconcile and cleanup;
-- store.Operations), so that each of their queries reads only the rows it
-- reports or deletes. Writers of the outbox and the inbox pay nothing: none
-- is on a table they write on the hot path.

-- Retention of dead letters and listing them oldest first.
CREATE INDEX courier_outbox_dead_letters_dead_at ON courier_outbox_dead_letters (dead_at);
CREATE INDEX courier_inbox_dead_letters_parked_at ON courier_inbox_dead_letters (parked_at);

-- Keys left in flight (status counts them, reconcile finds those whose lock
-- has expired). Partial: a key leaves it when its request completes.
CREATE INDEX courier_idempotency_keys_in_flight ON courier_idempotency_keys (locked_until)
    WHERE state = 'in_flight';

-- Unfinished sagas by type and state (status), and finished ones by the time
-- they finished (retention, oldest first).
CREATE INDEX courier_sagas_active ON courier_sagas (saga_type, state)
    WHERE phase IN ('running', 'compensating');
CREATE INDEX courier_sagas_finished ON courier_sagas (updated_at)
    WHERE phase IN ('completed', 'cancelled');
