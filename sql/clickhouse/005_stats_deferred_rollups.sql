-- Stats rollups built beside ingest instead of inside it (src/rollups/builder.ts, src/stats/window.ts).
--
-- Migration 004 filled the rollups with materialized views on every insert into access_logs. Those
-- views cost more CPU than parsing and storing the rows themselves (bench/ingest: 160,850 instead of
-- 286,000 lines/s), on the path every line takes. Now the insert only counts its rows per domain and
-- hour (access_hour_rows, a view that groups two columns), and a background job (the rollup builder,
-- run by `serve`) aggregates the hours and days that are complete into access_rollups.
--
-- Exactness: a bucket's rollup counts as built when its total row holds as many requests as
-- access_hour_rows counted for it (an hour), or for its hours (a day). A bucket not yet built, or
-- written to since, is read from access_logs, so a stats answer is always the raw rows' answer and
-- only its speed depends on the builder keeping up.
--
-- access_hour_rows: rows per (domain, hour), exact under retried inserts (the sink sets
-- deduplicate_blocks_in_dependent_materialized_views, and the window below keeps the tokens), and
-- the time of the last insert that touched the hour, for the builder to find recent work.
--
-- access_rollups: one table for the totals (dim 'total', key '') and the four top lists, so that
-- one INSERT … SELECT writes a bucket's totals and lists from one read of its rows: a builder that
-- dies between two statements cannot leave totals that claim lists they do not match. The builder
-- writes differences (what the rows give now minus what the table holds), so the sums stay plain
-- sums; the visitors state merges as a set union, so writing the whole new set is its difference.
-- Sorted by span and dimension before time: each top list reads its own rows only. TTL: a bucket
-- goes a day after its raw rows; a stats window never reaches past LOG_RETENTION_DAYS.

DROP VIEW IF EXISTS access_stats_mv;

DROP VIEW IF EXISTS access_stats_top_mv;

DROP TABLE IF EXISTS access_stats;

DROP TABLE IF EXISTS access_stats_top;

CREATE TABLE IF NOT EXISTS access_hour_rows
(
    domain_id UInt32,
    hour DateTime('UTC'),
    rows SimpleAggregateFunction(sum, UInt64),
    last_insert SimpleAggregateFunction(max, DateTime64(3, 'UTC'))
)
ENGINE = AggregatingMergeTree
PARTITION BY toYYYYMM(hour)
ORDER BY (domain_id, hour)
TTL hour + INTERVAL {{LOG_RETENTION_DAYS}} DAY + INTERVAL 1 DAY
SETTINGS non_replicated_deduplication_window = 10000, ttl_only_drop_parts = 1;

CREATE MATERIALIZED VIEW IF NOT EXISTS access_hour_rows_mv TO access_hour_rows AS
SELECT domain_id, toStartOfHour(timestamp) AS hour, count() AS rows, now64(3, 'UTC') AS last_insert
FROM access_logs
GROUP BY domain_id, hour;

CREATE TABLE IF NOT EXISTS access_rollups
(
    domain_id UInt32,
    span Enum8('hour' = 1, 'day' = 2),
    dim Enum8('total' = 0, 'url' = 1, 'status' = 2, 'agent' = 3, 'referrer' = 4),
    bucket DateTime('UTC'),
    -- The url, user agent or referrer as stored, the status code as decimal text, '' for totals.
    key String CODEC(ZSTD(1)),
    requests SimpleAggregateFunction(sum, UInt64),
    -- Totals only (zero in list rows): status ≥ 500, and the response times that are not NULL.
    errors SimpleAggregateFunction(sum, UInt64),
    response_time_sum SimpleAggregateFunction(sum, UInt64),
    response_time_count SimpleAggregateFunction(sum, UInt64),
    -- Totals only (an empty set in list rows): the distinct client addresses, exact (uniqueVisitors
    -- is an exact count, docs/reference/logs.md#statistics; uniqCombined is off by 0.02 % at 40,000 addresses).
    visitors AggregateFunction(uniqExact, String)
)
ENGINE = AggregatingMergeTree
PARTITION BY toYYYYMM(bucket)
ORDER BY (domain_id, span, dim, bucket, key)
TTL bucket + INTERVAL {{LOG_RETENTION_DAYS}} DAY + INTERVAL 1 DAY
SETTINGS ttl_only_drop_parts = 1;

-- Rows stored before this migration are counted here; the builder then finds every hour unbuilt.
-- Migrations run before the API or an ingest worker of this version writes.
INSERT INTO access_hour_rows
SELECT domain_id, toStartOfHour(timestamp) AS hour, count() AS rows, now64(3, 'UTC') AS last_insert
FROM access_logs
GROUP BY domain_id, hour;

-- The first TOP_KEYS keys of each built day and list, by requests (then key), and the count of the
-- next key (threshold): what any key outside a day's list has at most on that day. A 30-day top-10
-- then sums these short lists instead of every (day, url) row, proves its answer exact against the
-- thresholds (src/stats/window.ts), and reads the full rows only when it cannot. One row per
-- (domain, list, day), replaced when the day is built again (version: the day's requests then); a
-- reader uses it only while that version equals the day's built total.
CREATE TABLE IF NOT EXISTS access_day_tops
(
    domain_id UInt32,
    dim Enum8('url' = 1, 'status' = 2, 'agent' = 3, 'referrer' = 4),
    day DateTime('UTC'),
    built_requests UInt64,
    keys Array(String) CODEC(ZSTD(1)),
    counts Array(UInt64),
    threshold UInt64
)
ENGINE = ReplacingMergeTree(built_requests)
PARTITION BY toYYYYMM(day)
ORDER BY (domain_id, dim, day)
TTL day + INTERVAL {{LOG_RETENTION_DAYS}} DAY + INTERVAL 1 DAY
SETTINGS ttl_only_drop_parts = 1;
