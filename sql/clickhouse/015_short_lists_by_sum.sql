-- Short lists of any rollup list, ordered by any sum a list row holds, each key with all its sums
-- (src/stats/registry.ts, SHORT_LISTS): the stats' four lists by requests as before, and the paths
-- by requests and by response time, so that a multi-day top 10 of paths (POST /api/logs/query,
-- src/stats/query/short-tops.ts) is proven from a few hundred listed keys instead of grouping the
-- millions of path rows of 30 days. Numbered 015: another migration of the same day is 014.
--
-- One row per (domain, span, list, sum, bucket): the first keys by `by` (then key), each key's
-- sums by partial name (the registry's LIST_PARTIALS), and the next key's `by` sum (threshold),
-- built when the bucket had `built_requests` requests; as in 006, a reader uses it only while that
-- equals the bucket's built total.
--
-- The lists built so far lack the new ones and the sums, so the table is made again: every built
-- bucket's short lists read as missing, reads take those buckets' full rows until the builder's
-- first rounds have built their lists (without building the rollups again: src/rollups/builder.ts).
DROP TABLE IF EXISTS access_tops;

CREATE TABLE IF NOT EXISTS access_tops
(
    domain_id UInt32,
    span Enum8('hour' = 1, 'day' = 2),
    dim Enum8('url' = 1, 'status' = 2, 'agent' = 3, 'referrer' = 4, 'error_url' = 5, 'referrer_host' = 6, 'path' = 7, 'ip' = 8, 'agent_class' = 9),
    -- The partial name of the sum the keys are ordered by (requests, rt_sum, …).
    by LowCardinality(String),
    bucket DateTime('UTC'),
    built_at DateTime64(3, 'UTC'),
    built_requests UInt64,
    keys Array(String) CODEC(ZSTD(1)),
    sums Map(LowCardinality(String), Array(UInt64)),
    threshold UInt64
)
ENGINE = ReplacingMergeTree(built_at)
PARTITION BY toYYYYMM(bucket)
ORDER BY (domain_id, span, dim, by, bucket)
TTL bucket + INTERVAL {{LOG_RETENTION_DAYS}} DAY + INTERVAL 1 DAY
SETTINGS ttl_only_drop_parts = 1, index_granularity_bytes = 262144;
