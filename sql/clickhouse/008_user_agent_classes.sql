-- What each access row's user agent is (ingest/transforms/user-agent.ts): written by the sink with
-- the row, so a query groups or filters by them without parsing user agents.
--
--   browser   the browser (or app) as ua-parser-js names it; '' for bots and agents it does not know
--   os        the operating system; '' for bots
--   device    desktop | mobile | tablet | bot | other; a row is a bot's when device = 'bot'
--   bot_name  the bot's name (Googlebot, GPTBot, …); '' when no bot
--   bot_kind  ai | search | other for bots ('ai': a crawler or assistant gathering data for AI); '' otherwise
--
-- Plain String, not LowCardinality(String): the import's budget for this is 5 % of its rate, and
-- five LowCardinality columns cost ClickHouse 1.2–1.4 s of CPU per million rows inserted and
-- merged (a dictionary per column and granule, merged again by every merge), plain ones 0.4–0.9 s
-- (bench/user-agent-columns; bench/README, issue 14). Their few distinct values compress to almost
-- nothing either way; a GROUP BY over them is slower as String (186 ms against 102 ms a million rows).
--
-- Rows stored before this migration read '' in every one of them (device '' is never written by
-- the sink): `serve` and `migrate` classify them afterwards (ingest/user-agent-backfill.ts).
ALTER TABLE access_logs
    ADD COLUMN IF NOT EXISTS browser String,
    ADD COLUMN IF NOT EXISTS os String,
    ADD COLUMN IF NOT EXISTS device String,
    ADD COLUMN IF NOT EXISTS bot_name String,
    ADD COLUMN IF NOT EXISTS bot_kind String;

-- The backfill's mapping from user agent to class, filled for the rows it classifies and emptied
-- once they are: the mutation looks each row's agent up with joinGet.
CREATE TABLE IF NOT EXISTS user_agent_classes
(
    user_agent String,
    browser String,
    os String,
    device String,
    bot_name String,
    bot_kind String
)
ENGINE = Join(ANY, LEFT, user_agent);
