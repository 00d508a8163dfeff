-- Limits that keep alerts from being a spam or phishing relay (src/alerts/service.ts,
-- delivery.ts, notifications.ts).

-- Who set the alert's current definition, as they were named then: the notification tells its
-- recipient whom to ask. Kept as text so that deleting or renaming the user does not erase it.
alter table alerts
  add column configured_by integer references users (id) on delete set null,
  add column configured_by_name text,
  add column configured_by_email text;

update alerts a set configured_by = u.id, configured_by_name = u.name, configured_by_email = u.email
from users u where u.id = a.created_by;

-- When the per-target hourly limit first held the notification back (null: never); it stays
-- pending, due again when the target's hour has room.
alter table alert_notifications add column held_since timestamptz(3);

-- The notifications sent to each target (e-mail address or webhook URL) in the last hour, counted
-- by the delivery's claim under a per-target advisory lock. A notification counts once, at its
-- first attempt to that target; rows outlive their notification (no foreign key), so deleting and
-- re-creating an alert does not reset the count. Rows older than an hour are pruned.
create table alert_target_sends (
  target text not null,
  notification_id bigint not null,
  sent_at timestamptz(3) not null,
  primary key (target, notification_id)
);
create index alert_target_sends_recent on alert_target_sends (target, sent_at);
