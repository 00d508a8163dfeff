-- One more list in the rollups: "<status> <path>" of the rows with a status of 400 or above
-- (src/stats/registry.ts, ROLLUP_LISTS), with a short list by requests (SHORT_LISTS), so that the
-- dashboard's not-found panel (the paths of the 404s) is proven from a few hundred listed keys over
-- 30 days, as the pages panels are, instead of grouping every error URL row of the window. The
-- client addresses get a short list by requests too (no schema change: an entry of SHORT_LISTS).
--
-- The rows already built lack the new list, so the rollups are emptied as in 011 and 013: every
-- bucket counted in access_hour_rows is unbuilt now, the builder's first rounds build them all
-- again, and until they have, reads take those buckets from access_logs (slower, not wrong). The
-- short lists kept in access_tops stay: each names the bucket total it was built for, and the
-- builder adds the new list's.
ALTER TABLE access_rollups MODIFY COLUMN dim Enum8('total' = 0, 'url' = 1, 'status' = 2, 'agent' = 3, 'referrer' = 4, 'error_url' = 5, 'referrer_host' = 6, 'path' = 7, 'ip' = 8, 'agent_class' = 9, 'error_path' = 10);

ALTER TABLE access_tops MODIFY COLUMN dim Enum8('url' = 1, 'status' = 2, 'agent' = 3, 'referrer' = 4, 'error_url' = 5, 'referrer_host' = 6, 'path' = 7, 'ip' = 8, 'agent_class' = 9, 'error_path' = 10);

TRUNCATE TABLE access_rollups;
