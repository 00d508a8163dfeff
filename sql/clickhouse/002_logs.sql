-- Access and error logs and the rejected lines (docs/reference/logs.md, docs/reference/ingest.md). Written by ingest/sinks/clickhouse.ts.
--
-- Sorting key (domain_id, timestamp, id): every read is one domain over a time range, newest
-- first with ties by higher id, which ClickHouse serves in key order (optimize_read_in_order).
-- The primary index leaves id out: it never narrows a range, and a smaller index stays in memory.
--
-- Daily partitions with ttl_only_drop_parts: retention drops whole days (a file removal) instead
-- of rewriting parts row by row. At the default 90 days that is about 90 partitions per table,
-- far below the point where the count of parts hurts, and a day is the unit a retention change moves by.
--
-- non_replicated_deduplication_window: each insert carries insert_deduplication_token (a hash of
-- its source's identity and byte range), and the last 10,000 inserts are remembered, far more
-- than can be in flight between a crash and the replay of its last batch.
--
-- Vertical merges from the first row: a merge then holds one column of its parts at a time, not
-- all of them, which keeps the embedded engine's memory during a bulk import about 70 MB lower
-- (bench/insert-path). The defaults start them only at 11 non-key columns and 131,072 rows.
--
-- Ids (ingest/ids.ts) are below 2^53, unique per domain; they rise with the line's position in
-- its file, so Delta shrinks them. Times are milliseconds, UTC.

CREATE TABLE IF NOT EXISTS access_logs
(
    domain_id UInt32,
    id UInt64 CODEC(Delta(8), ZSTD(1)),
    timestamp DateTime64(3, 'UTC') CODEC(Delta(8), ZSTD(1)),
    -- The client address as logged (returned and searched as text), and the same as IPv6
    -- (IPv4 mapped to ::ffff:a.b.c.d; :: when the text is no address) for CIDR filters as ranges.
    ip_address String CODEC(ZSTD(1)),
    ip IPv6 MATERIALIZED toIPv6OrDefault(ip_address) CODEC(ZSTD(1)),
    method LowCardinality(String),
    url String CODEC(ZSTD(1)),
    protocol LowCardinality(String),
    status_code UInt16 CODEC(ZSTD(1)),
    response_size UInt64 CODEC(ZSTD(1)),
    -- '' when nginx logged '-'.
    referrer String CODEC(ZSTD(1)),
    user_agent String CODEC(ZSTD(1)),
    -- Milliseconds ($request_time has millisecond resolution); NULL when the format has no $request_time.
    response_time Nullable(UInt32) CODEC(ZSTD(1))
)
ENGINE = MergeTree
PARTITION BY toDate(timestamp)
PRIMARY KEY (domain_id, timestamp)
ORDER BY (domain_id, timestamp, id)
TTL toDateTime(timestamp) + INTERVAL {{LOG_RETENTION_DAYS}} DAY
SETTINGS non_replicated_deduplication_window = 10000, ttl_only_drop_parts = 1,
    vertical_merge_algorithm_min_rows_to_activate = 1, vertical_merge_algorithm_min_columns_to_activate = 1;

CREATE TABLE IF NOT EXISTS error_logs
(
    domain_id UInt32,
    id UInt64 CODEC(Delta(8), ZSTD(1)),
    timestamp DateTime64(3, 'UTC') CODEC(Delta(8), ZSTD(1)),
    -- error, warn, info or debug (nginx's levels folded, docs/reference/logs.md#error-entries).
    level LowCardinality(String),
    message String CODEC(ZSTD(1)),
    -- Whichever of client, server, request, upstream, host, referrer the line carries.
    context Map(LowCardinality(String), String) CODEC(ZSTD(1))
)
ENGINE = MergeTree
PARTITION BY toDate(timestamp)
PRIMARY KEY (domain_id, timestamp)
ORDER BY (domain_id, timestamp, id)
TTL toDateTime(timestamp) + INTERVAL {{LOG_RETENTION_DAYS}} DAY
SETTINGS non_replicated_deduplication_window = 10000, ttl_only_drop_parts = 1,
    vertical_merge_algorithm_min_rows_to_activate = 1, vertical_merge_algorithm_min_columns_to_activate = 1;

-- A line that is no entry (it does not parse, names an unknown domain, or is too long) is kept
-- with where it came from and why. time is when it was rejected: the line's own time is unknown.
CREATE TABLE IF NOT EXISTS ingest_rejects
(
    time DateTime64(3, 'UTC') DEFAULT now64(3) CODEC(Delta(8), ZSTD(1)),
    -- 0 when the line has no domain (an unregistered $host); domain ids start at 1.
    domain_id UInt32,
    kind LowCardinality(String),
    source String CODEC(ZSTD(1)),
    identity String CODEC(ZSTD(1)),
    offset UInt64 CODEC(ZSTD(1)),
    reason String CODEC(ZSTD(1)),
    -- The line as read; for an overlong line its head, and length is the whole line's bytes.
    line String CODEC(ZSTD(1)),
    length UInt64 CODEC(ZSTD(1))
)
ENGINE = MergeTree
PARTITION BY toDate(time)
ORDER BY (domain_id, time)
TTL toDateTime(time) + INTERVAL {{LOG_RETENTION_DAYS}} DAY
SETTINGS non_replicated_deduplication_window = 10000, ttl_only_drop_parts = 1,
    vertical_merge_algorithm_min_rows_to_activate = 1, vertical_merge_algorithm_min_columns_to_activate = 1;
