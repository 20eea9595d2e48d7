-- Continuous audits (courier audit --watch, audit.Watcher): one row per
-- watch, its window, its counts since it started and its latest findings,
-- so that courier status, the dashboard and health checks see every watch,
-- whichever process runs it. Rows are replaced, never trimmed.
CREATE TABLE courier_audit_watches (
    name          text        PRIMARY KEY,
    broker        text        NOT NULL DEFAULT '',
    window_from   timestamptz,
    window_to     timestamptz,
    passes        bigint      NOT NULL DEFAULT 0,
    failed        bigint      NOT NULL DEFAULT 0,
    lost          bigint      NOT NULL DEFAULT 0,
    phantoms      bigint      NOT NULL DEFAULT 0,
    duplicates    bigint      NOT NULL DEFAULT 0,
    order_breaks  bigint      NOT NULL DEFAULT 0,
    interval_ns   bigint      NOT NULL DEFAULT 0,
    last_error    text        NOT NULL DEFAULT '',
    findings      jsonb,
    started_at    timestamptz,
    updated_at    timestamptz NOT NULL
);

-- End-to-end latency (package latency): each consumer's histogram of each
-- topic's latency from commit to effect, a row every few seconds per
-- consumer and topic, trimmed by age (Operations.Trim, courier cleanup
-- --keep-latency).
CREATE TABLE courier_latency (
    id           bigint           GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    consumer     text             NOT NULL,
    topic        text             NOT NULL,
    recorded_at  timestamptz      NOT NULL,
    period_ns    bigint           NOT NULL DEFAULT 0,
    messages     bigint           NOT NULL DEFAULT 0,
    sum_seconds  double precision NOT NULL DEFAULT 0,
    skewed       bigint           NOT NULL DEFAULT 0,
    -- A JSON array of counts, one per bucket of package latency.
    buckets      text             NOT NULL DEFAULT '[]'
);

-- The samples of a time range, oldest first (Delivery.Latency), and the
-- oldest ones, which trimming deletes.
CREATE INDEX courier_latency_recorded_at ON courier_latency (recorded_at, id);

-- A continuous audit reads the published copies of its last seconds through
-- this BRIN index, which reads every block range not yet summarized whole.
-- With autosummarize, autovacuum summarizes each range as it fills, instead
-- of at the table's next VACUUM: a pass then reads its window and the range
-- being filled, not every copy added since the last VACUUM.
ALTER INDEX courier_outbox_published_at SET (autosummarize = on);
