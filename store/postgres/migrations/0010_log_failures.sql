-- Failed publishes of table-less messages (written only to the log, see
-- LogOnly), which have no row of their own to count them on: the CDC relay
-- records each failure here, so that a message's attempts and history
-- survive a relay's restart as a row's do. A message leaves the table when
-- it is published or becomes a dead letter.
CREATE TABLE courier_outbox_log_failures (
    message_id  uuid        PRIMARY KEY,
    attempts    integer     NOT NULL DEFAULT 0,
    last_error  text,
    history     jsonb,
    updated_at  timestamptz NOT NULL DEFAULT now()
);
