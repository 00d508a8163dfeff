-- Two more lists in the rollups, per bucket:
-- - error_url: the requests of each (status code, URL) whose status is 400 or above, key
--   "<status> <url>" (src/stats/registry.ts, ROLLUP_LISTS). POST /api/logs/query reads the top
--   URLs of the 5xx, the not-found URLs and any drill-down by URL within the 4xx and 5xx from these
--   rows where their buckets are built (the url list holds every URL of a bucket, as many rows as
--   requests where URLs carry ids; the error rows are a few percent of them);
-- - referrer_host: the requests of each referrer host, '' (no referrer, or none readable) too
--   (src/stats/registry.ts, REFERRER_HOST): the referring sites without a regular expression over
--   every referrer of the window (4.8 s for 30 days of the 10M-row benchmark).
-- The status list and the agent list now serve the status code, status class and user agent
-- dimensions too (src/stats/registry.ts, ROLLUP_ROWS).
--
-- Adding a value to the Enum changes no stored row. The rows already built lack the new list, so
-- the rollups are emptied: every bucket counted in access_hour_rows is unbuilt now, the builder's
-- first rounds build them all again (the short lists of access_tops with them), and until they
-- have, reads take those buckets from access_logs (slower, not wrong).
ALTER TABLE access_rollups MODIFY COLUMN dim Enum8('total' = 0, 'url' = 1, 'status' = 2, 'agent' = 3, 'referrer' = 4, 'error_url' = 5, 'referrer_host' = 6);

TRUNCATE TABLE access_rollups;
