-- The search on `url` no longer uses the text index of 003_search_index.sql (issue 17): every insert
-- into access_logs paid for it (about 70 % more time: 1 million rows in 1.25 s without, 2.1–2.3 s
-- with, README "Reading logs") and it was about as large as the table's compressed rows. A search
-- now finds the hours and days that can hold a matching url from the keys of the rollups
-- (access_rollups' url list holds every distinct url of a built bucket) and reads access_logs
-- there and in the parts of its range not built (src/logs/search-fields.ts).
--
-- The index on error_logs.message stays: error lines are a small share of the rows, so it costs
-- the inserts little, and the rollups hold no messages.
--
-- Dropping an index removes its files from every part; the rows are not rewritten.

ALTER TABLE access_logs DROP INDEX IF EXISTS search_url;
