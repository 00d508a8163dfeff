-- What the user agent of a row is (src/stats/registry.ts reads these columns: browser, os, device,
-- bot_name; bot = device 'bot'). The ingest's user-agent classification fills them; rows stored
-- before it hold ''.

ALTER TABLE access_logs ADD COLUMN IF NOT EXISTS browser LowCardinality(String) DEFAULT '';

ALTER TABLE access_logs ADD COLUMN IF NOT EXISTS os LowCardinality(String) DEFAULT '';

ALTER TABLE access_logs ADD COLUMN IF NOT EXISTS device LowCardinality(String) DEFAULT '';

ALTER TABLE access_logs ADD COLUMN IF NOT EXISTS bot_name LowCardinality(String) DEFAULT '';
