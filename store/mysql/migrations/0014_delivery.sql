-- Continuous audits (courier audit --watch, audit.Watcher): one row per
-- watch, its window, its counts since it started and its latest findings,
-- so that courier status, the dashboard and health checks see every watch,
-- whichever process runs it. Rows are replaced, never trimmed.
CREATE TABLE IF NOT EXISTS courier_audit_watches (
    name          VARCHAR(255)  NOT NULL,
    broker        TEXT          NOT NULL,
    window_from   DATETIME(6)   NULL,
    window_to     DATETIME(6)   NULL,
    passes        BIGINT        NOT NULL DEFAULT 0,
    failed        BIGINT        NOT NULL DEFAULT 0,
    lost          BIGINT        NOT NULL DEFAULT 0,
    phantoms      BIGINT        NOT NULL DEFAULT 0,
    duplicates    BIGINT        NOT NULL DEFAULT 0,
    order_breaks  BIGINT        NOT NULL DEFAULT 0,
    interval_ns   BIGINT        NOT NULL DEFAULT 0,
    last_error    TEXT          NOT NULL,
    findings      LONGTEXT      NULL CHECK (findings IS NULL OR JSON_VALID(findings)),
    started_at    DATETIME(6)   NULL,
    updated_at    DATETIME(6)   NOT NULL,
    PRIMARY KEY (name)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- End-to-end latency (package latency): each consumer's histogram of each
-- topic's latency from commit to effect, a row every few seconds per
-- consumer and topic, trimmed by age (Operations.Trim, courier cleanup
-- --keep-latency).
CREATE TABLE IF NOT EXISTS courier_latency (
    id           BIGINT       NOT NULL AUTO_INCREMENT,
    consumer     VARCHAR(255) NOT NULL,
    topic        VARCHAR(255) NOT NULL,
    recorded_at  DATETIME(6)  NOT NULL,
    period_ns    BIGINT       NOT NULL DEFAULT 0,
    messages     BIGINT       NOT NULL DEFAULT 0,
    sum_seconds  DOUBLE       NOT NULL DEFAULT 0,
    skewed       BIGINT       NOT NULL DEFAULT 0,
    -- A JSON array of counts, one per bucket of package latency.
    buckets      TEXT         NOT NULL,
    PRIMARY KEY (id),
    -- The samples of a time range, oldest first (Delivery.Latency), and
    -- the oldest ones, which trimming deletes.
    KEY courier_latency_recorded_at (recorded_at, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
