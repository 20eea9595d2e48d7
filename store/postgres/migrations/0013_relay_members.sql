-- The relay processes that share a set of tenants (package tenant): each
-- one's heartbeat keeps its row alive until expires_at; the tenants are
-- divided among the live rows, and a process that stops beating loses its
-- share once its row expires.
CREATE TABLE courier_relay_members (
    owner      text        PRIMARY KEY,
    expires_at timestamptz NOT NULL
);
