-- A run of a handler that met a message newer than the consumer knows (the
-- producer was deployed first) is recorded, but does not count toward the
-- consumer's MaxDeliveries: the first one's time says how long the message
-- has waited for the consumer's deploy.
ALTER TABLE courier_inbox_failures ADD COLUMN counted BOOLEAN NOT NULL DEFAULT TRUE;
