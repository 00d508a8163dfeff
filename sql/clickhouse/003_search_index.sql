-- Data-skipping indexes for POST /api/logs/domains/:domainId/search (docs/reference/logs.md#search): a
-- case-insensitive substring of `url` (access) or `message` (error), the default search fields.
--
-- The search matches `lowerUTF8(column) LIKE lowerUTF8('%…%')` (the query escaped for LIKE), the
-- expression these indexes are built on. A `text` index (GA since ClickHouse 26.2; chDB 3.4 is
-- 26.7) with the `ngrams(3)` tokenizer maps each 3-gram of the lower-cased text to its rows, and
-- serves LIKE patterns of 4 or more characters: granules that lack one of the needle's 3-grams
-- are skipped. Measured on 3 million generated access rows (bench/README, "Figures behind the reads' design"): a rare URL
-- substring counted in about 15 ms instead of about 115 ms; the old ngrambf_v1 Bloom filter (3,
-- 8192, 3) skipped nothing there and was no faster than a scan, so it is not used.
--
-- Cost: the url index is about as large as the whole compressed table (69 MB for 71 MB of rows)
-- and inserts take about 15 % longer. user_agent and referrer get no index: they repeat a few
-- hundred values, a typical needle matches most granules, and their indexes (29 MB, 24 MB) did
-- not pay for themselves; ip_address is short text, scanned.
--
-- MATERIALIZE builds the index for rows stored before this migration (a background mutation);
-- parts without it are scanned, so results never depend on it.

ALTER TABLE access_logs ADD INDEX IF NOT EXISTS search_url lowerUTF8(url) TYPE text(tokenizer = ngrams(3));

ALTER TABLE access_logs MATERIALIZE INDEX search_url;

ALTER TABLE error_logs ADD INDEX IF NOT EXISTS search_message lowerUTF8(message) TYPE text(tokenizer = ngrams(3));

ALTER TABLE error_logs MATERIALIZE INDEX search_message;
