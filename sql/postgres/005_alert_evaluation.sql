-- Alert evaluation (docs/reference/alerts.md#evaluation, src/alerts/evaluator.ts): the state each alert's state machine
-- keeps beside `state` and `last_triggered_at` (004), the round ledger that makes one process
-- evaluate per interval, and the outbox of notifications, delivered outside the evaluation
-- transaction (src/alerts/delivery.ts).

alter table alerts
  -- When `state` last changed (ok → firing or firing → ok); null: never evaluated to a change.
  add column state_changed_at timestamptz(3),
  -- When the last notification (firing, reminder or resolved) was enqueued: reminders count from it.
  add column last_notified_at timestamptz(3),
  -- The metric of the last round that evaluated the alert (null: no data, e.g. no response times).
  add column last_value double precision,
  -- Requests in the window of that round.
  add column last_requests bigint,
  add column last_evaluated_at timestamptz(3),
  -- The last failed delivery of a notification of this alert (cleared by the next success).
  add column last_delivery_error text,
  add column last_delivery_error_at timestamptz(3);

-- One row: the round ledger. A round is claimed for the interval its time falls in
-- [floor(t / interval) * interval, + interval) only if the last claimed round is older than that
-- interval's start, so with several `serve` processes one of them evaluates each interval, and
-- whoever ticks first in the next interval takes over from a process that died.
create table alert_evaluator (
  id integer primary key check (id = 1),
  -- The claimed round's time on the claiming process's clock (which dates its windows and state
  -- changes); null: never.
  round_at timestamptz(3),
  -- hostname:pid of the process that claimed it, for the operator.
  holder text,
  -- The claim's time on the database's clock, which alone decides when a ledger nobody claims any
  -- more is stale (a process whose clock ran far ahead must not stop evaluation for long).
  claimed_db_at timestamptz(3)
);
insert into alert_evaluator (id) values (1);

-- The outbox: one row per notification, written in the same transaction as the state change that
-- causes it (so a crash loses neither), delivered and retried by src/alerts/delivery.ts.
-- Deleting an alert (or its domain) deletes its notifications, pending ones included.
create table alert_notifications (
  id bigint generated always as identity primary key,
  alert_id integer not null references alerts (id) on delete cascade,
  kind text not null check (kind in ('firing', 'resolved', 'reminder')),
  -- The facts of the event (alert, domain, value, window, time); the target is read from the
  -- alert at delivery, so a corrected target also serves the notifications still pending.
  payload jsonb not null,
  status text not null default 'pending' check (status in ('pending', 'delivered', 'failed')),
  created_at timestamptz(3) not null,
  attempts integer not null default 0,
  next_attempt_at timestamptz(3) not null,
  -- A delivering process holds the row until then; past it, another process may retry it.
  claimed_until timestamptz(3),
  last_attempt_at timestamptz(3),
  last_error text,
  delivered_at timestamptz(3)
);
-- What the delivery loop scans: pending rows by time.
create index alert_notifications_pending on alert_notifications (next_attempt_at, id) where status = 'pending';
-- Per-alert order (an earlier pending notification of the same alert goes first) and the cascade.
create index alert_notifications_alert on alert_notifications (alert_id, id);
