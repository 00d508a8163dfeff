-- Short top lists per hour as well as per day (src/rollups/builder.ts builds them, src/stats/window.ts
-- proves its lists from them), and access_rollups with smaller granules (at the end).
--
-- The day lists of 005 left the hours at a window's two ends to be read in full: a 30-day window
-- has up to 46 whole hours outside its whole days, a 24-hour window 23, and where nearly every
-- request has its own URL that is about one rollup row per request (330,000 rows for 24 hours of
-- the 10M-row benchmark). With the hours' short lists too, a window's lists read at most 100 keys
-- per bucket and list.
--
-- One row per (domain, span, list, bucket): the first keys by requests (then key), their counts,
-- and the next key's count (threshold), built from the bucket's rollup rows when it has
-- `built_requests` requests. A reader uses the row only while that equals the bucket's built total.
-- The version is the build time, not the requests: a bucket repaired after it was written twice
-- (src/rollups/builder.ts) has fewer requests than before, and its new lists must replace the old.

CREATE TABLE IF NOT EXISTS access_tops
(
    domain_id UInt32,
    span Enum8('hour' = 1, 'day' = 2),
    dim Enum8('url' = 1, 'status' = 2, 'agent' = 3, 'referrer' = 4),
    bucket DateTime('UTC'),
    built_at DateTime64(3, 'UTC'),
    built_requests UInt64,
    keys Array(String) CODEC(ZSTD(1)),
    counts Array(UInt64),
    threshold UInt64
)
ENGINE = ReplacingMergeTree(built_at)
PARTITION BY toYYYYMM(bucket)
ORDER BY (domain_id, span, dim, bucket)
TTL bucket + INTERVAL {{LOG_RETENTION_DAYS}} DAY + INTERVAL 1 DAY
SETTINGS ttl_only_drop_parts = 1, index_granularity_bytes = 262144;


-- The day lists of 005 go: access_tops replaces them.
DROP TABLE IF EXISTS access_day_tops;

-- access_rollups again, with granules of at most 256 KiB instead of 10 MiB. A total row carries its
-- bucket's visitors set (about 50 KiB for 3,400 addresses), so a 10 MiB granule held some 200 of
-- them, and reading the 23 hour totals of a 24-hour window decoded about 10 MB of sets: 28 ms of a
-- 65 ms answer on the 10M-row benchmark, 11 ms with these granules. List rows are small and still
-- fill whole 8,192-row granules. The setting cannot be altered on a table, so the rollups are built
-- again: every hour and day counted in access_hour_rows is unbuilt now, the builder's first round
-- builds them all, and until it has, stats read those buckets from access_logs (slower, not wrong).
DROP TABLE IF EXISTS access_rollups;

-- The columns as in 005, which describes them.
CREATE TABLE IF NOT EXISTS access_rollups
(
    domain_id UInt32,
    span Enum8('hour' = 1, 'day' = 2),
    dim Enum8('total' = 0, 'url' = 1, 'status' = 2, 'agent' = 3, 'referrer' = 4),
    bucket DateTime('UTC'),
    key String CODEC(ZSTD(1)),
    requests SimpleAggregateFunction(sum, UInt64),
    errors SimpleAggregateFunction(sum, UInt64),
    response_time_sum SimpleAggregateFunction(sum, UInt64),
    response_time_count SimpleAggregateFunction(sum, UInt64),
    visitors AggregateFunction(uniqExact, String)
)
ENGINE = AggregatingMergeTree
PARTITION BY toYYYYMM(bucket)
ORDER BY (domain_id, span, dim, bucket, key)
TTL bucket + INTERVAL {{LOG_RETENTION_DAYS}} DAY + INTERVAL 1 DAY
SETTINGS ttl_only_drop_parts = 1, index_granularity_bytes = 262144;
