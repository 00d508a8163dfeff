-- Alert evaluation, continued (src/alerts/evaluator.ts, delivery.ts).
--
-- The delivery outcome an alert's API fields show (beyond the specification): `lastDeliveryError`
-- is 005's last_delivery_error; `lastDeliveredAt` is this column.
alter table alerts
  -- When a notification of this alert was last accepted by the mail server or webhook; null: never.
  add column last_delivered_at timestamptz(3);

-- Existing deployments: the outbox still holds the deliveries of the last 30 days.
update alerts a set last_delivered_at = d.delivered_at
from (select alert_id, max(delivered_at) as delivered_at from alert_notifications where status = 'delivered' group by alert_id) d
where a.id = d.alert_id;

-- From this version on, a round writes an alert's row only when something persisted changes (a
-- state change or a notification), or for the first round after the alert was created or changed
-- through the API; an unchanged alert's row is neither updated nor locked. So 005's last_value,
-- last_requests and last_evaluated_at are the figures of the last round that wrote the row, not
-- necessarily of the latest round (the API shows none of them; the outbox payload keeps the
-- figures of each notification).
