-- The rollups' total rows hold every partial state of the statistics' registry
-- (src/stats/registry.ts, PARTIALS): beside the requests, 5xx, response-time sum and count and the
-- visitors set of 005, the 4xx count, the bytes sent, the longest response time and the
-- response-time histogram that the percentiles read. List rows leave them at their defaults.
--
-- rt_hist: the histogram's keys (exact milliseconds below 128, then buckets 2 % wide) with their
-- counts, summed per key when parts merge. Counts are signed: the builder writes a rebuilt bucket
-- as the difference between the fresh histogram and the one held, key by key, as it does for the
-- sums (src/rollups/builder.ts).
-- rt_max: the longest response time, 0 where none (response_time_count says so); a rebuild writes
-- it whole, and merging a maximum again changes nothing.
--
-- The table is built again, as in 006: every bucket counted in access_hour_rows is unbuilt now, the
-- builder's first rounds build them all, and until they have, reads take those buckets from
-- access_logs (slower, not wrong).
DROP TABLE IF EXISTS access_rollups;

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
    visitors AggregateFunction(uniqExact, String),
    client_errors SimpleAggregateFunction(sum, UInt64),
    bytes SimpleAggregateFunction(sum, UInt64),
    rt_max SimpleAggregateFunction(max, UInt32),
    rt_hist SimpleAggregateFunction(sumMap, Tuple(Array(UInt16), Array(Int64))) CODEC(ZSTD(1))
)
ENGINE = AggregatingMergeTree
PARTITION BY toYYYYMM(bucket)
ORDER BY (domain_id, span, dim, bucket, key)
TTL bucket + INTERVAL {{LOG_RETENTION_DAYS}} DAY + INTERVAL 1 DAY
SETTINGS ttl_only_drop_parts = 1, index_granularity_bytes = 262144;
