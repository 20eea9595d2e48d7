-- The inbox: one marker per message a consumer applied, inserted in the same
-- transaction as the consumer's effects. A redelivered message finds its
-- marker and is skipped.
CREATE TABLE courier_inbox (
    consumer      text        NOT NULL,
    message_id    uuid        NOT NULL,
    processed_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, message_id)
);

-- Retention deletes markers by age; BRIN suits rows that arrive in time order
-- and costs the hot path almost nothing.
CREATE INDEX courier_inbox_processed_at ON courier_inbox USING brin (processed_at);

-- Consume-side dead letters: deliveries a consumer gave up on, kept as
-- received so that a replay decodes them afresh.
CREATE TABLE courier_inbox_dead_letters (
    id                bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    consumer          text        NOT NULL,
    message_id        text        NOT NULL,
    subject           text        NOT NULL,
    headers           jsonb,
    payload           bytea       NOT NULL,
    reason            text        NOT NULL,
    last_error        text        NOT NULL,
    attempts          integer     NOT NULL,
    history           jsonb,
    parked_at         timestamptz NOT NULL DEFAULT now(),
    replay_requested  timestamptz
);

CREATE INDEX courier_inbox_dead_letters_replay ON courier_inbox_dead_letters (consumer, id)
    WHERE replay_requested IS NOT NULL;
