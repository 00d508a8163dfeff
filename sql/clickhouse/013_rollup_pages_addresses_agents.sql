-- Three more lists in the rollups: paths (the URL up to its first "?"), client addresses and agent
-- class numbers; and the sums in every list row:
-- beside its requests, a list row now holds its 5xx and 4xx counts, its bytes and its response-time
-- sum and count (src/stats/registry.ts, ROLLUP_LISTS and LIST_PARTIALS), so that the dashboard's
-- pages panels (requests and 5xx by path, time spent by path, the not-found paths), its client
-- addresses and its browser, system, device and bot panels read the rollups over 30 days instead
-- of grouping every row of the window. A bucket holding rows not classified yet stays unbuilt
-- until the backfill has classified them (src/rollups/builder.ts, boundedByLists).
--
-- The rows already built lack the three lists and the sums, so the rollups are emptied as in 011:
-- every bucket counted in access_hour_rows is unbuilt now, the builder's first rounds build them
-- all again, and until they have, reads take those buckets from access_logs (slower, not wrong).
ALTER TABLE access_rollups MODIFY COLUMN dim Enum8('total' = 0, 'url' = 1, 'status' = 2, 'agent' = 3, 'referrer' = 4, 'error_url' = 5, 'referrer_host' = 6, 'path' = 7, 'ip' = 8, 'agent_class' = 9);

TRUNCATE TABLE access_rollups;
