-- An access row's user agent class as one number instead of five strings (ingest/transforms/user-agent.ts).
--
-- 008 stored browser, os, device, bot_name and bot_kind with every row: ClickHouse then parsed,
-- stored and merged five more strings per row, which cost the import 11 % of its rate (bench/README,
-- issue 14; the target was 5 %). A log has a few thousand distinct classes at most, so each row now
-- holds its class's number (agent_class, the first 48 bits of the SHA-1 of the five values, plus 1;
-- 0 = not classified yet), and agent_classes holds each class's values once. A query reads a
-- value as joinGet('agent_classes', 'browser', agent_class) (src/stats/registry.ts): a lookup in a
-- hash table of a few thousand numbers, little beside reading a column. (Not as ALIAS columns of
-- access_logs: a mutation evaluates those outside any database, where the unqualified table name
-- does not resolve.)
--
-- agent_classes is a Join table (a hash table in memory, kept on disk): the sink writes each class
-- there before the first rows that carry it (storeAgentClasses in ingest/sinks/clickhouse.ts); a
-- class written twice, by two processes, keeps its first row, which is the same.
--
-- Rows stored before read agent_class 0 (the five columns dropped here): `serve` and `migrate`
-- classify them again from their user agents (ingest/user-agent-backfill.ts), as after 008.
ALTER TABLE access_logs ADD COLUMN IF NOT EXISTS agent_class UInt64;

CREATE TABLE IF NOT EXISTS agent_classes
(
    id UInt64,
    browser String,
    os String,
    device String,
    bot_name String,
    bot_kind String
)
ENGINE = Join(ANY, LEFT, id);

ALTER TABLE access_logs
    DROP COLUMN IF EXISTS browser,
    DROP COLUMN IF EXISTS os,
    DROP COLUMN IF EXISTS device,
    DROP COLUMN IF EXISTS bot_name,
    DROP COLUMN IF EXISTS bot_kind;

-- The backfill's mapping from user agent to class number, filled for the rows it classifies and
-- emptied once they are.
DROP TABLE IF EXISTS user_agent_classes;

CREATE TABLE IF NOT EXISTS user_agent_classes
(
    user_agent String,
    agent_class UInt64
)
ENGINE = Join(ANY, LEFT, user_agent);
