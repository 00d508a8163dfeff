-- Alert definitions per domain (docs/reference/alerts.md) and the state the evaluator keeps for each.
-- Deleting a domain deletes its alerts.

create table alerts (
  id integer generated always as identity primary key,
  domain_id integer not null references domains (id) on delete cascade,
  name text not null,
  condition text not null check (condition in ('errorRate', 'requestCount', 'averageResponseTime')),
  operator text not null check (operator in ('greaterThan', 'greaterThanOrEqual', 'lessThan', 'lessThanOrEqual')),
  threshold double precision not null,
  -- The trailing window, in seconds.
  duration integer not null check (duration between 60 and 86400),
  notification_method text not null check (notification_method in ('email', 'webhook')),
  notification_target text not null,
  enabled boolean not null default true,
  -- ok → firing → ok, written by the evaluator.
  state text not null default 'ok' check (state in ('ok', 'firing')),
  -- When it last went from ok to firing.
  last_triggered_at timestamptz(3),
  created_by integer references users (id) on delete set null,
  created_at timestamptz(3) not null default now(),
  updated_at timestamptz(3) not null default now()
);

create index alerts_domain_id on alerts (domain_id, id);
