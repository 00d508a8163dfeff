-- Ledger of applied ClickHouse migrations (the runner reads it; see core/db/clickhouse.ts).
CREATE TABLE IF NOT EXISTS schema_migrations
(
    version UInt32,
    name String,
    applied_at DateTime64(3, 'UTC') DEFAULT now64(3)
)
ENGINE = ReplacingMergeTree
ORDER BY version;
