-- Held keys on the consumer side (inbox.Config.HoldKeys): a parked
-- delivery of a topic that holds its keys stops its key for its consumer;
-- the key's later deliveries are parked behind it until it is replayed or
-- discarded.
ALTER TABLE courier_inbox_dead_letters ADD COLUMN ordering_key text;
ALTER TABLE courier_inbox_dead_letters ADD COLUMN behind bigint;

-- One row per key a consumer holds: the lock that parking a held delivery
-- and releasing the key take turns on.
CREATE TABLE courier_inbox_holds (
    consumer      text        NOT NULL,
    ordering_key  text        NOT NULL,
    cause         bigint      NOT NULL,
    since         timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, ordering_key)
);

CREATE INDEX courier_inbox_dead_letters_behind ON courier_inbox_dead_letters (behind, id) WHERE behind IS NOT NULL;

-- A hold by its cause: the lists of held keys (store.Admin ConsumerHolds)
-- read each cause's hold.
CREATE INDEX courier_inbox_holds_cause ON courier_inbox_holds (cause);
