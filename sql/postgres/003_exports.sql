-- Log exports (docs/reference/logs.md#exports): a record per POST /api/logs/domains/:domainId/export; the download
-- at BASE_URL/api/downloads/<token>.<csv|ndjson> runs the query when it is fetched. The token is
-- random (32 bytes, base64url) and only its SHA-256 is kept, so a copy of this table opens no link.
--
-- Deleting the domain deletes its exports; deleting the user who made one does too (a link must
-- not outlive the account that could read the logs). A record stays past expires_at so that its
-- link answers 410 rather than 404; src/exports/service.ts sweeps records expired a week ago.

create table exports (
  id integer generated always as identity primary key,
  domain_id integer not null references domains (id) on delete cascade,
  user_id integer not null references users (id) on delete cascade,
  type text not null check (type in ('access', 'error')),
  format text not null check (format in ('csv', 'json')),
  -- The request's `filters` as sent (validated); parsed again by src/logs/filters.ts at download.
  filters jsonb not null default '{}',
  start_date timestamptz(3) not null,
  end_date timestamptz(3) not null,
  token_hash text not null,
  created_at timestamptz(3) not null default now(),
  expires_at timestamptz(3) not null,
  constraint exports_token_hash_key unique (token_hash),
  constraint exports_range_check check (end_date >= start_date)
);
create index exports_domain_idx on exports (domain_id);
create index exports_user_created_idx on exports (user_id, created_at);
create index exports_expires_idx on exports (expires_at);
