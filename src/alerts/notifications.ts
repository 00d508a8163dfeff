/**
 * What a notification says: the facts recorded when the state changed (the outbox payload), and
 * their renderings as an e-mail and as a webhook's JSON body. Rendering happens at delivery, from
 * the stored facts, so a retry sends the same words.
 *
 * A notification goes to whatever address or URL a user typed, and carries the alert's name,
 * free text of that user's choosing. So that it cannot pass for a message of the operator or of
 * anyone else, the e-mail says who configured the alert (their name and e-mail address as stored
 * when they created or last changed it: the recipient needs to know whom to ask, and they are the
 * operator's own users, accountable for where they send mail), for which domain, and on which
 * tailhouse; and it shows the name only quoted, with its quotes, line breaks and invisible
 * characters escaped, labelled as text that user chose.
 */
import type { Condition, Operator } from './schemas.js';
import type { NotificationKind } from './store.js';

export interface NotificationPayload {
  kind: NotificationKind;
  /** The alert's state after the event. */
  state: 'ok' | 'firing';
  alert: { id: number; name: string; condition: Condition; operator: Operator; threshold: number; duration: number };
  domain: { id: number; name: string };
  /** The metric (a rate a fraction, a response time ms, requestCount requests); null: no data. */
  value: number | null;
  /** Requests in the window. */
  requests: number;
  /** Rates only (errorRate, clientErrorRate): the fewest requests for a rate to count. */
  minRequests?: number;
  /** The window evaluated: (start, end], ISO 8601. */
  window: { start: string; end: string };
  /** When the alert started firing (for a reminder or a resolution), ISO 8601. */
  firingSince: string | null;
  /** BASE_URL/api/logs/domains/<id>/stats?period=…, the smallest period covering the window. */
  statsUrl: string;
}

/** What delivery adds to the stored facts: read when the notification goes out. */
export interface DeliveryFacts {
  /** Who set the alert's current definition, as named then; null: not recorded (an alert older than that record). */
  configuredBy: { name: string; email: string } | null;
  /** When the per-target limit first held this notification back (ISO 8601); null: never. */
  heldSince: string | null;
  /** The per-target limit, for the words about a hold. */
  perTargetPerHour: number;
}

/**
 * User text as a quoted string that cannot break out of its quotes or fake lines: JSON's escapes
 * (quotes, backslashes, control characters), plus the characters that change how text around
 * them reads without being seen (C1 controls, bidirectional and other format characters, line
 * and paragraph separators), as \u escapes.
 */
export function quoted(text: string): string {
  return JSON.stringify(text).replace(/[\p{Cc}\p{Cf}\p{Zl}\p{Zp}]/gu, (c) => `\\u${c.codePointAt(0)!.toString(16).padStart(4, '0')}`);
}

/** The stats endpoint's periods (docs/reference/logs.md#statistics), the smallest one that covers `durationS`. */
export function statsPeriod(durationS: number): '1h' | '24h' | '7d' | '30d' {
  if (durationS <= 3_600) return '1h';
  if (durationS <= 86_400) return '24h';
  return durationS <= 7 * 86_400 ? '7d' : '30d';
}

export const statsUrl = (baseUrl: string, domainId: number, durationS: number) =>
  `${baseUrl.replace(/\/+$/, '')}/api/logs/domains/${domainId}/stats?period=${statsPeriod(durationS)}`;

const OPERATOR_TEXT: Record<Operator, string> = {
  greaterThan: '>',
  greaterThanOrEqual: '≥',
  lessThan: '<',
  lessThanOrEqual: '≤',
};

/** How each condition's value and threshold read, in their unit. */
const UNITS: Record<Condition, { value: (v: number) => string; threshold: (t: number) => string }> = {
  errorRate: { value: (v) => `${v.toFixed(4)} (${(v * 100).toFixed(2)} % of requests with status ≥ 500)`, threshold: (t) => `${t} (${(t * 100).toFixed(2)} %)` },
  clientErrorRate: { value: (v) => `${v.toFixed(4)} (${(v * 100).toFixed(2)} % of requests with status 400–499)`, threshold: (t) => `${t} (${(t * 100).toFixed(2)} %)` },
  averageResponseTime: { value: (v) => `${v.toFixed(2)} ms`, threshold: (t) => `${t} ms` },
  p95ResponseTime: { value: (v) => `${v.toFixed(2)} ms (95th percentile)`, threshold: (t) => `${t} ms` },
  requestCount: { value: (v) => `${v} requests`, threshold: (t) => `${t} requests` },
};

/** A metric value in its unit. */
export const formatValue = (condition: Condition, value: number | null): string => (value === null ? 'no data' : UNITS[condition].value(value));

const thresholdText = (condition: Condition, threshold: number) => UNITS[condition].threshold(threshold);

function windowText(seconds: number): string {
  if (seconds % 3_600 === 0) return `${seconds / 3_600} h`;
  if (seconds % 60 === 0) return `${seconds / 60} min`;
  return `${seconds} s`;
}

/** Header text without line breaks or other control characters (a name is user input). */
const headerSafe = (text: string) => text.replace(/[\u0000-\u001f\u007f]+/g, ' ').trim();

const SUBJECT_PREFIX: Record<NotificationKind, string> = {
  firing: 'FIRING',
  reminder: 'FIRING (reminder)',
  resolved: 'RESOLVED',
};

/** `Jane Doe <jane@example.com>`, or the address alone when the user has no name. */
const personOf = (p: { name: string; email: string }) => (p.name.trim() === '' ? p.email : `${quoted(p.name.trim())} <${p.email}>`);

export function emailOf(p: NotificationPayload, delivery: DeliveryFacts): { subject: string; text: string } {
  const name = quoted(p.alert.name);
  const subject = headerSafe(`[tailhouse] ${SUBJECT_PREFIX[p.kind]}: alert ${name} on ${p.domain.name}`);
  const headline = {
    firing: `The alert ${name} on ${p.domain.name} is FIRING.`,
    reminder: `The alert ${name} on ${p.domain.name} is STILL FIRING (since ${p.firingSince ?? 'an earlier round'}).`,
    resolved: `The alert ${name} on ${p.domain.name} is RESOLVED${p.firingSince ? ` (it fired from ${p.firingSince})` : ''}.`,
  }[p.kind];
  const noData =
    p.value === null
      ? p.minRequests !== undefined
        ? ` (${p.requests} requests, fewer than the ${p.minRequests} a rate needs)`
        : ' (no request in the window carries a response time)'
      : '';
  const service = new URL(p.statsUrl).origin;
  const who = delivery.configuredBy ? personOf(delivery.configuredBy) : 'a user of this service (not recorded: the alert predates that record)';
  const lines = [
    headline,
    '',
    `Condition: ${p.alert.condition} ${OPERATOR_TEXT[p.alert.operator]} ${p.alert.threshold} (${p.alert.operator})`,
    `Value:     ${formatValue(p.alert.condition, p.value)}${noData}`,
    `Threshold: ${thresholdText(p.alert.condition, p.alert.threshold)}`,
    `Operator:  ${p.alert.operator}`,
    `Window:    the last ${windowText(p.alert.duration)} (${p.alert.duration} s): ${p.window.start} to ${p.window.end}`,
    `Requests:  ${p.requests}`,
    `Time:      ${p.window.end}`,
    '',
    `Statistics: ${p.statsUrl}`,
    '',
    ...(delivery.heldSince
      ? [
          `Sent late: this notification was held back from ${delivery.heldSince}, because this address had received ${delivery.perTargetPerHour} notifications from this service in the hour before, the most it may.`,
          '',
        ]
      : []),
    'Why you receive this',
    `This alert was configured on ${service} by ${who}, for the domain ${p.domain.name}, with this address as the recipient of its notifications.`,
    `The alert's name, ${name}, is text that user chose; this service did not write or check it.`,
    `If you do not want these messages, ask ${who} to remove this address from the alert, or write to the operator of ${service}.`,
    '',
    `-- tailhouse (alert ${p.alert.id}, domain ${p.domain.id})`,
    '',
  ];
  return { subject, text: lines.join('\n') };
}

/** The webhook's JSON body: the same facts, plus the notification's id for deduplication, who configured it and any hold. */
export function webhookBodyOf(notificationId: string, p: NotificationPayload, delivery: DeliveryFacts): string {
  return JSON.stringify({
    id: notificationId,
    event: p.kind,
    state: p.state,
    alert: p.alert,
    domain: p.domain,
    value: p.value,
    threshold: p.alert.threshold,
    operator: p.alert.operator,
    requests: p.requests,
    window: { ...p.window, seconds: p.alert.duration },
    firingSince: p.firingSince,
    time: p.window.end,
    statsUrl: p.statsUrl,
    configuredBy: delivery.configuredBy,
    heldSince: delivery.heldSince,
  });
}
