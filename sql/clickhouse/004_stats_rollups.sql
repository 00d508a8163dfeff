-- Rollups of access_logs for GET /api/logs/domains/:domainId/stats (src/stats/window.ts, docs/reference/logs.md#statistics).
--
-- Two tables, each holding every domain's figures per hour AND per day (span), filled by a
-- materialized view on every insert into access_logs:
--
--   access_stats      (domain_id, span, bucket) → requests, errors (status ≥ 500), the sum and count
--                     of the response times that are not NULL, and the distinct client addresses as
--                     a uniqExact state (exact: uniqCombined is not, even at precision 20 it is off
--                     by 0.02 % at 40,000 addresses, and uniqueVisitors is exact).
--   access_stats_top  (domain_id, span, bucket, dim, key) → requests, for the url, status, user agent
--                     and referrer lists; summing keys over buckets gives EXACT top-10s.
--
-- A window (last 1h … 30d up to now) is read as whole days from span 'day', the whole hours around
-- them from span 'hour', and the partial hours at both ends from access_logs itself, so the answer is
-- the one the raw rows give. Each view groups its block by hour first and folds the hours into days,
-- so the day level costs a pass over the hourly groups, not over the rows.
--
-- Deduplication: a batch sent again with the same insert_deduplication_token must not be counted
-- twice. That needs deduplicate_blocks_in_dependent_materialized_views = 1 on the insert (the sink)
-- and a deduplication window on these tables too: with either missing, a retried batch whose first
-- try stored the raw rows but not the view's rows is counted once, then twice on the next retry.
--
-- Partitions by month: the rollups hold a small fraction of the raw rows, and daily partitions would
-- only make more, smaller parts. access_stats has small granules: a visitors state holds 16 bytes per
-- address, and reading a 30-day window must not deserialise the states of the hours beside its days
-- (24 → 9 ms on 3 million rows). access_stats_top is sorted by dimension before time: each top list
-- reads its own rows only, and the status, agent and referrer lists stay cheap beside a large url list. TTL: a bucket goes a day after its raw rows would; the query never
-- reads a bucket older than LOG_RETENTION_DAYS, so rows that expire at different moments in the two
-- tables never change an answer.
--
-- Deleting a domain deletes its rows here too (deleteDomainData in core/db/domain-data.ts): a delete on
-- access_logs does not reach the views' tables.

CREATE TABLE IF NOT EXISTS access_stats
(
    domain_id UInt32,
    span Enum8('hour' = 1, 'day' = 2),
    bucket DateTime('UTC'),
    requests SimpleAggregateFunction(sum, UInt64),
    errors SimpleAggregateFunction(sum, UInt64),
    response_time_sum SimpleAggregateFunction(sum, UInt64),
    response_time_count SimpleAggregateFunction(sum, UInt64),
    visitors AggregateFunction(uniqExact, String)
)
ENGINE = AggregatingMergeTree
PARTITION BY toYYYYMM(bucket)
ORDER BY (domain_id, span, bucket)
TTL bucket + INTERVAL {{LOG_RETENTION_DAYS}} DAY + INTERVAL 1 DAY
SETTINGS non_replicated_deduplication_window = 10000, ttl_only_drop_parts = 1,
    index_granularity = 256, index_granularity_bytes = 1048576;

CREATE TABLE IF NOT EXISTS access_stats_top
(
    domain_id UInt32,
    span Enum8('hour' = 1, 'day' = 2),
    bucket DateTime('UTC'),
    dim Enum8('url' = 1, 'status' = 2, 'agent' = 3, 'referrer' = 4),
    -- The url, user agent or referrer as stored, or the status code as decimal text.
    key String CODEC(ZSTD(1)),
    requests UInt64
)
ENGINE = SummingMergeTree(requests)
PARTITION BY toYYYYMM(bucket)
ORDER BY (domain_id, span, dim, bucket, key)
TTL bucket + INTERVAL {{LOG_RETENTION_DAYS}} DAY + INTERVAL 1 DAY
SETTINGS non_replicated_deduplication_window = 10000, ttl_only_drop_parts = 1;

CREATE MATERIALIZED VIEW IF NOT EXISTS access_stats_mv TO access_stats AS
SELECT
    domain_id,
    CAST(s.1, 'Enum8(\'hour\' = 1, \'day\' = 2)') AS span,
    s.2 AS bucket,
    sum(h_requests) AS requests,
    sum(h_errors) AS errors,
    sum(h_rt_sum) AS response_time_sum,
    sum(h_rt_count) AS response_time_count,
    uniqExactMergeState(h_visitors) AS visitors
FROM
(
    SELECT
        domain_id,
        toStartOfHour(timestamp) AS hour,
        count() AS h_requests,
        countIf(status_code >= 500) AS h_errors,
        sum(ifNull(response_time, 0)) AS h_rt_sum,
        count(response_time) AS h_rt_count,
        uniqExactState(ip_address) AS h_visitors
    FROM access_logs
    GROUP BY domain_id, hour
)
ARRAY JOIN [(1, toDateTime(hour, 'UTC')), (2, toDateTime(toStartOfDay(hour), 'UTC'))] AS s
GROUP BY domain_id, span, bucket;

CREATE MATERIALIZED VIEW IF NOT EXISTS access_stats_top_mv TO access_stats_top AS
SELECT
    domain_id,
    CAST(s.1, 'Enum8(\'hour\' = 1, \'day\' = 2)') AS span,
    s.2 AS bucket,
    dim,
    key,
    sum(h_requests) AS requests
FROM
(
    SELECT
        domain_id,
        toStartOfHour(timestamp) AS hour,
        CAST(k.1, 'Enum8(\'url\' = 1, \'status\' = 2, \'agent\' = 3, \'referrer\' = 4)') AS dim,
        k.2 AS key,
        count() AS h_requests
    FROM access_logs
    ARRAY JOIN [(1, url), (2, toString(status_code)), (3, user_agent), (4, referrer)] AS k
    WHERE NOT (k.1 = 4 AND k.2 = '')
    GROUP BY domain_id, hour, dim, key
)
ARRAY JOIN [(1, toDateTime(hour, 'UTC')), (2, toDateTime(toStartOfDay(hour), 'UTC'))] AS s
GROUP BY domain_id, span, bucket, dim, key;

-- Backfill: the views see only rows inserted from now on. Migrations run before the API or an
-- ingest worker of this version writes (embedded: always; server: stop older workers first).
INSERT INTO access_stats
SELECT
    domain_id,
    CAST(s.1, 'Enum8(\'hour\' = 1, \'day\' = 2)') AS span,
    s.2 AS bucket,
    sum(h_requests) AS requests,
    sum(h_errors) AS errors,
    sum(h_rt_sum) AS response_time_sum,
    sum(h_rt_count) AS response_time_count,
    uniqExactMergeState(h_visitors) AS visitors
FROM
(
    SELECT
        domain_id,
        toStartOfHour(timestamp) AS hour,
        count() AS h_requests,
        countIf(status_code >= 500) AS h_errors,
        sum(ifNull(response_time, 0)) AS h_rt_sum,
        count(response_time) AS h_rt_count,
        uniqExactState(ip_address) AS h_visitors
    FROM access_logs
    GROUP BY domain_id, hour
)
ARRAY JOIN [(1, toDateTime(hour, 'UTC')), (2, toDateTime(toStartOfDay(hour), 'UTC'))] AS s
GROUP BY domain_id, span, bucket;

INSERT INTO access_stats_top
SELECT
    domain_id,
    CAST(s.1, 'Enum8(\'hour\' = 1, \'day\' = 2)') AS span,
    s.2 AS bucket,
    dim,
    key,
    sum(h_requests) AS requests
FROM
(
    SELECT
        domain_id,
        toStartOfHour(timestamp) AS hour,
        CAST(k.1, 'Enum8(\'url\' = 1, \'status\' = 2, \'agent\' = 3, \'referrer\' = 4)') AS dim,
        k.2 AS key,
        count() AS h_requests
    FROM access_logs
    ARRAY JOIN [(1, url), (2, toString(status_code)), (3, user_agent), (4, referrer)] AS k
    WHERE NOT (k.1 = 4 AND k.2 = '')
    GROUP BY domain_id, hour, dim, key
)
ARRAY JOIN [(1, toDateTime(hour, 'UTC')), (2, toDateTime(toStartOfDay(hour), 'UTC'))] AS s
GROUP BY domain_id, span, bucket, dim, key;
