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
