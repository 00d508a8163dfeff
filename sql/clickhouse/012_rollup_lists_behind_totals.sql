-- Buckets whose total holds more requests than their lists (src/rollups/builder.ts, boundedByLists):
-- the builder wrote a bucket's lists and then its total in two statements, each reading the rows
-- as they were when it started, so lines stored in between counted in the total (the bucket read
-- as built) and in none of the lists, and every top list of a window over it missed them. The
-- status list has a row for every row of a bucket; where its requests differ from the total's, the
-- bucket's rows are deleted here, it is unbuilt (read from access_logs, exact), and the builder's
-- next rounds build it again (its short lists in access_tops too: a newer build replaces them).
DELETE FROM access_rollups
WHERE (domain_id, span, bucket) IN (
    SELECT domain_id, span, bucket
    FROM access_rollups
    GROUP BY domain_id, span, bucket
    HAVING sumIf(requests, dim = 'status') != sumIf(requests, dim = 'total')
)
SETTINGS lightweight_deletes_sync = 2;
