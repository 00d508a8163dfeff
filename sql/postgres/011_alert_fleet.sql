-- On-call at a fleet's scale (docs/reference/alerts.md, src/alerts/): rules over many domains,
-- conditions with filters, per-domain state, silences, state history, and one notification per
-- target for all the alerts of a round.

-- 1. Rules. A domain's alert (scope 'domain', domain_id set) is what it was; a rule covers a list
-- of domains ('domains', scope_domain_ids) or every domain its creator sees at evaluation ('all').
-- Either kind takes filters in the query endpoint's syntax (src/stats/query/filters.ts).
alter table alerts alter column domain_id drop not null;
alter table alerts
  add column scope text not null default 'domain' check (scope in ('domain', 'domains', 'all')),
  add column scope_domain_ids integer[],
  add column filters jsonb not null default '[]';
alter table alerts add constraint alerts_scope_shape check (
  (scope = 'domain' and domain_id is not null and scope_domain_ids is null)
  or (scope = 'domains' and domain_id is null and scope_domain_ids is not null)
  or (scope = 'all' and domain_id is null and scope_domain_ids is null));
-- A user's rules, counted against their cap and listed for them.
create index alerts_rules_by_creator on alerts (created_by, id) where domain_id is null;

alter table alerts drop constraint alerts_condition_check;
alter table alerts add constraint alerts_condition_check check (condition in (
  'errorRate', 'clientErrorRate', 'requests', 'requestCount', 'bandwidth', 'visitors', 'averageResponseTime',
  'p50ResponseTime', 'p95ResponseTime', 'p99ResponseTime', 'maxResponseTime', 'requestChange'));

-- 2. State per (alert, domain): a rule has one state machine per domain it covers. Written by the
-- evaluator's apply only when something here changes (as the alert row was before).
create table alert_states (
  alert_id integer not null references alerts (id) on delete cascade,
  domain_id integer not null references domains (id) on delete cascade,
  state text not null default 'ok' check (state in ('ok', 'firing')),
  state_changed_at timestamptz(3),
  last_triggered_at timestamptz(3),
  -- What the target was last told ('firing', or 'ok': resolved or never told). A silence holds a
  -- change back; when it ends, a state that differs from this one is notified.
  notified_state text not null default 'ok' check (notified_state in ('ok', 'firing')),
  last_notified_at timestamptz(3),
  primary key (alert_id, domain_id)
);
create index alert_states_firing on alert_states (domain_id) where state = 'firing';

-- An existing alert's state; its target was told that state (a firing one, or a resolution).
insert into alert_states (alert_id, domain_id, state, state_changed_at, last_triggered_at, notified_state, last_notified_at)
select id, domain_id, state, state_changed_at, last_triggered_at, state, last_notified_at
from alerts where state_changed_at is not null or state <> 'ok';

alter table alerts
  drop column state,
  drop column state_changed_at,
  drop column last_triggered_at,
  drop column last_notified_at,
  drop column last_value,
  drop column last_requests,
  drop column last_evaluated_at;

-- The last round's value of every (alert, domain) pair, {"alertId": {"domainId": value}}: what the
-- API shows beside each state. One row written per round, not one per pair.
alter table alert_evaluator add column last_values jsonb not null default '{}';

-- 3. Silences: while one matches an (alert, domain) pair, its state is still evaluated and shown,
-- but nothing is sent. domain_ids null: every domain the creator may update alerts on, at
-- evaluation; alert_ids null: every alert. A fixed window [starts_at, ends_at) or a weekly
-- recurrence (src/alerts/recurrence.ts); ended_at: ended early through the API.
create table alert_silences (
  id integer generated always as identity primary key,
  created_by integer not null references users (id) on delete cascade,
  domain_ids integer[],
  alert_ids integer[],
  starts_at timestamptz(3),
  ends_at timestamptz(3),
  recurrence jsonb,
  comment text not null,
  ended_at timestamptz(3),
  created_at timestamptz(3) not null default now(),
  check ((recurrence is null) = (starts_at is not null and ends_at is not null))
);
create index alert_silences_by_creator on alert_silences (created_by, id);

-- 4. History: every state change of a pair, kept 90 days. No key to the alert: the history of a
-- domain outlives a deleted alert (its name is kept); deleting the domain deletes its history.
create table alert_history (
  id bigint generated always as identity primary key,
  alert_id integer not null,
  alert_name text not null,
  -- A rule's creator (null: a domain's alert): a rule's history is shown to them and administrators.
  rule_owner integer,
  domain_id integer not null references domains (id) on delete cascade,
  from_state text not null check (from_state in ('ok', 'firing')),
  to_state text not null check (to_state in ('ok', 'firing')),
  at timestamptz(3) not null,
  value double precision,
  -- Whether the change went into a notification, or the silence that held it back.
  notified boolean not null,
  silence_id integer
);
create index alert_history_domain on alert_history (domain_id, id desc);
create index alert_history_at on alert_history (at);

-- 5. The outbox holds one notification per target for a round's events (grouping): its target
-- is fixed when it is written, its events are the alerts' facts (src/alerts/notifications.ts),
-- and alert_ids names the alerts whose delivery outcome it updates.
alter table alert_notifications
  add column method text,
  add column target text,
  add column alert_ids integer[],
  add column events jsonb;

-- Pending and past notifications of earlier versions become groups of one event.
update alert_notifications n
set method = a.notification_method,
    target = a.notification_target,
    alert_ids = array[n.alert_id],
    events = jsonb_build_array(jsonb_build_object(
      'kind', n.kind,
      'alert', (n.payload -> 'alert') || '{"filters": []}',
      'domain', n.payload -> 'domain',
      'value', n.payload -> 'value',
      'requests', n.payload -> 'requests',
      'window', n.payload -> 'window',
      'startsAt', coalesce(n.payload -> 'firingSince', n.payload -> 'window' -> 'end'),
      'endsAt', case when n.kind = 'resolved' then n.payload -> 'window' -> 'end' else 'null'::jsonb end,
      'dashboardUrl', n.payload -> 'statsUrl',
      'configuredBy', case when a.configured_by_name is null then 'null'::jsonb
                           else jsonb_build_object('name', a.configured_by_name, 'email', a.configured_by_email) end)
      || case when n.payload ? 'minRequests' then jsonb_build_object('minRequests', n.payload -> 'minRequests') else '{}'::jsonb end)
from alerts a where a.id = n.alert_id;

alter table alert_notifications
  alter column method set not null,
  alter column target set not null,
  alter column alert_ids set not null,
  alter column events set not null,
  add constraint alert_notifications_method check (method in ('email', 'webhook')),
  drop column alert_id,
  drop column kind,
  drop column payload;
-- Per-target order (a target's earlier pending notification goes first) and the open group a
-- round's events join.
create index alert_notifications_target on alert_notifications (method, target, id) where status = 'pending';
