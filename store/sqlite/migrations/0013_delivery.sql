-- Continuous audits (courier audit --watch, audit.Watcher): one row per
-- watch, its window, its counts since it started and its latest findings,
-- so that courier status, the dashboard and health checks see every watch,
-- whichever process runs it. Rows are replaced, never trimmed. Times are
-- Unix microseconds, as everywhere.
CREATE TABLE courier_audit_watches (
    name          TEXT    PRIMARY KEY,
    broker        TEXT    NOT NULL DEFAULT '',
    window_from   INTEGER,
    window_to     INTEGER,
    passes        INTEGER NOT NULL DEFAULT 0,
    failed        INTEGER NOT NULL DEFAULT 0,
    lost          INTEGER NOT NULL DEFAULT 0,
    phantoms      INTEGER NOT NULL DEFAULT 0,
    duplicates    INTEGER NOT NULL DEFAULT 0,
    order_breaks  INTEGER NOT NULL DEFAULT 0,
    interval_ns   INTEGER NOT NULL DEFAULT 0,
    last_error    TEXT    NOT NULL DEFAULT '',
    findings      TEXT,
    started_at    INTEGER,
    updated_at    INTEGER NOT NULL
);

-- End-to-end latency (package latency): each consumer's histogram of each
-- topic's latency from commit to effect, a row every few seconds per
-- consumer and topic, trimmed by age (Operations.Trim, courier cleanup
-- --keep-latency).
CREATE TABLE courier_latency (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    consumer     TEXT    NOT NULL,
    topic        TEXT    NOT NULL,
    recorded_at  INTEGER NOT NULL,
    period_ns    INTEGER NOT NULL DEFAULT 0,
    messages     INTEGER NOT NULL DEFAULT 0,
    sum_seconds  REAL    NOT NULL DEFAULT 0,
    skewed       INTEGER NOT NULL DEFAULT 0,
    -- A JSON array of counts, one per bucket of package latency.
    buckets      TEXT    NOT NULL DEFAULT '[]'
);

-- The samples of a time range, oldest first (Delivery.Latency), and the
-- oldest ones, which trimming deletes.
CREATE INDEX courier_latency_recorded_at ON courier_latency (recorded_at, id);
