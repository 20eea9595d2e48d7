-- The relay processes that share a set of tenants (package tenant): each
-- one's heartbeat keeps its row alive until expires_at; the tenants are
-- divided among the live rows, and a process that stops beating loses its
-- share once its row expires.
CREATE TABLE IF NOT EXISTS courier_relay_members (
    owner      VARCHAR(255) NOT NULL,
    expires_at DATETIME(6)  NOT NULL,
    PRIMARY KEY (owner)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
