-- Each domain's ingest health (docs/reference/ingest.md#health, src/domains/ingest-store.ts): when
-- its last access and error lines were stored, lines stored and rejected in the last hour and day,
-- its rejects by cause.
--
-- ingest_rejects.cause: why a line became a reject, in the few fixed words of RejectCause
-- (ingest/transforms/rows.ts), written by the sink; '' for the rows stored before this migration.
-- The reason's text names the line's own host or parse error, too many values to count by.
--
-- ingest_domain_minutes: lines stored per domain, kind and minute of storing, and the last insert
-- of the minute; the counts of the last hour and day are sums of its rows. The views count each
-- insert as it lands (now(), not the lines' own times: an import of last year's log is stored
-- today), exact under retried inserts like access_hour_rows (005): the sink sets
-- deduplicate_blocks_in_dependent_materialized_views, and the window below keeps the tokens. Two
-- days of minutes are kept, a few thousand rows per domain at most.
--
-- ingest_domain_last: the last insert per domain and kind, kept as long as the domain: the fleet's
-- "last log line" of a domain silent for longer than the minutes are kept. Filled from the minutes
-- (a view of a view: one small block per insert, whatever its rows); a maximum needs no deduplication.

ALTER TABLE ingest_rejects ADD COLUMN IF NOT EXISTS cause LowCardinality(String);

CREATE TABLE IF NOT EXISTS ingest_domain_minutes
(
    domain_id UInt32,
    kind Enum8('access' = 1, 'error' = 2),
    minute DateTime('UTC'),
    lines SimpleAggregateFunction(sum, UInt64),
    last_stored SimpleAggregateFunction(max, DateTime64(3, 'UTC'))
)
ENGINE = AggregatingMergeTree
PARTITION BY toDate(minute)
ORDER BY (domain_id, kind, minute)
TTL minute + INTERVAL 2 DAY
SETTINGS non_replicated_deduplication_window = 10000, ttl_only_drop_parts = 1;

CREATE TABLE IF NOT EXISTS ingest_domain_last
(
    domain_id UInt32,
    kind Enum8('access' = 1, 'error' = 2),
    last_stored SimpleAggregateFunction(max, DateTime64(3, 'UTC'))
)
ENGINE = AggregatingMergeTree
ORDER BY (domain_id, kind);

CREATE MATERIALIZED VIEW IF NOT EXISTS ingest_domain_minutes_access_mv TO ingest_domain_minutes AS
SELECT domain_id, 'access' AS kind, toStartOfMinute(now('UTC')) AS minute, count() AS lines, now64(3, 'UTC') AS last_stored
FROM access_logs
GROUP BY domain_id;

CREATE MATERIALIZED VIEW IF NOT EXISTS ingest_domain_minutes_error_mv TO ingest_domain_minutes AS
SELECT domain_id, 'error' AS kind, toStartOfMinute(now('UTC')) AS minute, count() AS lines, now64(3, 'UTC') AS last_stored
FROM error_logs
GROUP BY domain_id;

CREATE MATERIALIZED VIEW IF NOT EXISTS ingest_domain_last_mv TO ingest_domain_last AS
SELECT domain_id, kind, max(last_stored) AS last_stored
FROM ingest_domain_minutes
GROUP BY domain_id, kind;

-- The lines stored before this migration: access_hour_rows knows when an insert last touched each
-- of a domain's hours (since 005; 007's rows carry the epoch); for error lines the newest line's
-- own time is the best known (a followed log's line is stored within seconds of it). Run again
-- after an interruption, the maxima are the same.
INSERT INTO ingest_domain_last (domain_id, kind, last_stored)
SELECT domain_id, 'access', max(last_insert)
FROM access_hour_rows
GROUP BY domain_id
HAVING max(last_insert) > toDateTime64(0, 3, 'UTC');

INSERT INTO ingest_domain_last (domain_id, kind, last_stored)
SELECT domain_id, 'error', max(timestamp)
FROM error_logs
GROUP BY domain_id;
