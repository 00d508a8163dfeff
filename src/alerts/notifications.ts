/**
 * What a notification says: one per target (e-mail address or webhook URL) per round, holding
 * every alert event of that round for the target (issue 30 §1), rendered as an e-mail and as a
 * webhook's JSON body. The events are the facts recorded when the states changed; rendering
 * happens at delivery, from those stored facts, so a retry sends the same words.
 *
 * A notification goes to whatever address or URL a user typed, and carries alert names, free
 * text of that user's choosing. So that it cannot pass for a message of the operator or of anyone
 * else, the e-mail says who configured the alerts (their names and e-mail addresses as stored when
 * they created or last changed them: the recipient needs to know whom to ask, and they are the
 * operator's own users, accountable for where they send mail) and on which tailhouse; and it shows
 * names only quoted, with their quotes, line breaks and invisible characters escaped, labelled as
 * text those users chose.
 *
 * An incident can hold an alert on every domain of a fleet: past FULL_EVENTS events, the rest are
 * named by domain only, grouped by alert, so that the message stays readable and still names them all.
 */
import { createHash } from 'node:crypto';
import type { FilterValue, QueryFilter } from '../stats/query/filters.js';
import { queryFiltersOf, type Condition, type FilterTuple, type NotificationMethod, type Operator } from './schemas.js';

export type EventKind = 'firing' | 'resolved' | 'reminder';

/** One alert on one domain, as recorded when its state changed (stored in the outbox, rendered at delivery). */
export interface AlertEvent {
  kind: EventKind;
  alert: { id: number; name: string; condition: Condition; operator: Operator; threshold: number; duration: number; filters: FilterTuple[] };
  domain: { id: number; name: string };
  value: number | null;
  requests: number;
  /** Rates only: the fewest requests for a rate to count. */
  minRequests?: number;
  /** The window evaluated, (start, end], ISO 8601. */
  window: { start: string; end: string };
  /** When this alert started firing on this domain (ISO). */
  startsAt: string;
  /** When it resolved (ISO); null while firing. */
  endsAt: string | null;
  /** The domain's dashboard filtered to the alert's window and filters (dashboardUrl below). */
  dashboardUrl: string;
  /** Who set the alert's current definition, as named then; null: not recorded. */
  configuredBy: { name: string; email: string } | null;
}

export interface NotificationGroup {
  /** The outbox row's id: webhook receivers deduplicate on it. */
  id: string;
  /** Stable for the target (groupKeyOf). */
  groupKey: string;
  events: AlertEvent[];
  /** When the per-target limit first held it back (ISO); null: never. */
  heldSince: string | null;
  perTargetPerHour: number;
  /** BASE_URL's origin, named in the e-mail. */
  service: string;
}

/** The events shown in full; the rest are named by domain only. */
export const FULL_EVENTS = 50;

/**
 * User text as a quoted string that cannot break out of its quotes or fake lines: JSON's escapes
 * (quotes, backslashes, control characters), plus the characters that change how text around
 * them reads without being seen (C1 controls, bidirectional and other format characters, line
 * and paragraph separators), as \u escapes.
 */
export function quoted(text: string): string {
  return JSON.stringify(text).replace(/[\p{Cc}\p{Cf}\p{Zl}\p{Zp}]/gu, unicodeEscape);
}

const unicodeEscape = (c: string) => `\\u${c.codePointAt(0)!.toString(16).padStart(4, '0')}`;

/**
 * User text quoted for a chat's incoming webhook, which renders `text` as markup: also the
 * characters that make links, mentions and emphasis in Slack, Mattermost and Discord (`<url|x>`,
 * `[x](url)`, `@channel`, `*`, `_`, `~`, code) are escaped, so a name shows as the text it is.
 */
const chatQuoted = (text: string) => quoted(text).replace(/[&<>[\]*_~`|@]/g, unicodeEscape);

/**
 * The domain dashboard (web/src/pages/Dashboard.tsx) on the alert's window and filters, so that the
 * link shows what the alert counted. The dashboard's filters (web/src/filters.ts) are
 * `f=is|isNot:dimension:value` on the dimensions below, combined with AND, one value each: a
 * filter with several `isNot` values becomes one parameter per value (none of them, the same
 * thing), but `is` with several values (any of them), `contains`, `glob` and `cidr` have no form
 * there and are left out; the link then shows more than the alert counted, and the e-mail says so.
 */
export function dashboardUrl(baseUrl: string, domainId: number, window: { start: string; end: string }, filters: readonly QueryFilter[]): string {
  const query = new URLSearchParams({ period: 'custom', from: window.start, to: window.end });
  for (const f of filters) for (const param of dashboardParams(f) ?? []) query.append('f', param);
  return `${baseUrl.replace(/\/+$/, '')}/domains/${domainId}?${query}`;
}

/** The dimensions web/src/filters.ts parses (its DIMENSION_LABELS); the domain is the dashboard's own. */
const DASHBOARD_DIMENSIONS: ReadonlySet<string> = new Set([
  'url', 'path', 'statusCode', 'statusClass', 'method', 'ipAddress', 'userAgent', 'referrer', 'referrerHost', 'browser', 'os', 'device', 'bot', 'botName', 'botKind',
]);

type PlainValue = Exclude<FilterValue, object>;
const isPlain = (v: FilterValue): v is PlainValue => typeof v !== 'object';

/** A filter's `f` parameters on the dashboard; undefined: the dashboard cannot apply it. */
function dashboardParams(f: QueryFilter): string[] | undefined {
  if (!DASHBOARD_DIMENSIONS.has(f.dimension) || !f.values.every(isPlain)) return undefined;
  if (f.op === 'isNot') return f.values.map((v) => `isNot:${f.dimension}:${String(v)}`);
  if (f.op === 'is' && f.values.length === 1) return [`is:${f.dimension}:${String(f.values[0])}`];
  return undefined;
}

/** A target's key: the same for every notification to it, without the address or URL in clear (sha256, 16 hex digits). */
export function groupKeyOf(method: NotificationMethod, target: string): string {
  return createHash('sha256').update(`${method}:${target}`).digest('hex').slice(0, 16);
}

const OPERATOR_TEXT: Record<Operator, string> = {
  greaterThan: '>',
  greaterThanOrEqual: '≥',
  lessThan: '<',
  lessThanOrEqual: '≤',
};

const integer = new Intl.NumberFormat('en', { maximumFractionDigits: 0 });
/** A sign as the text reads: U+2212 for minus, + for a rise. */
const signed = (text: string) => (text.startsWith('-') ? `−${text.slice(1)}` : `+${text}`);

/** Bytes as the dashboard shows them (web/src/format.ts: powers of 1000). */
function readableBytes(n: number): string {
  const units = ['B', 'KB', 'MB', 'GB', 'TB', 'PB'];
  let value = n;
  let unit = 0;
  while (value >= 1000 && unit < units.length - 1) {
    value /= 1000;
    unit++;
  }
  return `${unit === 0 ? value : value.toFixed(value >= 100 ? 0 : 1)} ${units[unit]}`;
}

const rate = (what: string) => ({
  value: (v: number) => `${v.toFixed(4)} (${(v * 100).toFixed(2)} % of requests with ${what})`,
  threshold: (t: number) => `${t} (${(t * 100).toFixed(2)} %)`,
});
const counted = (unit: string) => ({ value: (v: number) => `${integer.format(v)} ${unit}`, threshold: (t: number) => `${integer.format(t)} ${unit}` });
const milliseconds = (what: string) => ({ value: (v: number) => `${v.toFixed(2)} ms${what}`, threshold: (t: number) => `${t} ms` });
const bytes = (n: number) => `${readableBytes(n)} (${integer.format(n)} bytes)`;
const change = (v: number) => `${signed((v * 100).toFixed(1))} %`;

/** How each condition's value and threshold read, in their unit. */
const UNITS: Record<Condition, { value: (v: number) => string; threshold: (t: number) => string }> = {
  errorRate: rate('status ≥ 500'),
  clientErrorRate: rate('status 400–499'),
  requests: counted('requests'),
  requestCount: counted('requests'),
  bandwidth: { value: bytes, threshold: bytes },
  visitors: counted('visitors'),
  averageResponseTime: milliseconds(' (average)'),
  p50ResponseTime: milliseconds(' (50th percentile)'),
  p95ResponseTime: milliseconds(' (95th percentile)'),
  p99ResponseTime: milliseconds(' (99th percentile)'),
  maxResponseTime: milliseconds(' (the longest)'),
  requestChange: {
    value: (v) => `${change(v)} against the same window 7 days earlier (value ${signed(String(Number(v.toFixed(4))))})`,
    threshold: (t) => `${signed(String(t))} (${change(t)})`,
  },
};

/** A metric value in its unit. */
export const formatValue = (condition: Condition, value: number | null): string => (value === null ? 'no data' : UNITS[condition].value(value));

/** Why an event's value is null, as its condition measures it. */
function noDataReason(e: AlertEvent): string {
  if (e.minRequests !== undefined) return ` (${e.requests} requests, fewer than the ${e.minRequests} a rate needs)`;
  if (e.alert.condition === 'requestChange') return ' (no requests in the same window 7 days earlier to compare with)';
  return e.alert.condition.endsWith('ResponseTime') ? ' (no request in the window carries a response time)' : '';
}

function windowText(seconds: number): string {
  if (seconds % 3_600 === 0) return `${seconds / 3_600} h`;
  if (seconds % 60 === 0) return `${seconds / 60} min`;
  return `${seconds} s`;
}

/** Header text without line breaks or other control characters (a name is user input). */
const headerSafe = (text: string) => text.replace(/[\u0000-\u001f\u007f]+/g, ' ').trim();

const plural = (n: number, word: string) => `${integer.format(n)} ${word}${n === 1 ? '' : 's'}`;

/** Firing alerts (new ones and reminders) come before resolved ones. */
const isFiring = (e: AlertEvent) => e.kind !== 'resolved';

const KIND_TEXT: Record<EventKind, string> = { firing: 'FIRING', reminder: 'FIRING (reminder)', resolved: 'RESOLVED' };

const conditionText = (a: AlertEvent['alert']) => `${a.condition} ${OPERATOR_TEXT[a.operator]} ${a.threshold}`;

/** An alert as a heading: its name (user text, through `quote`) and its condition. */
const alertHeading = (a: AlertEvent['alert'], quote: (text: string) => string) => `alert ${quote(a.name)} (${conditionText(a)})`;

/** The events in the order they are told: firing first, then by alert, then by domain. */
function ordered(events: readonly AlertEvent[]): AlertEvent[] {
  const key = (e: AlertEvent) => [isFiring(e) ? 0 : 1, e.alert.name, e.alert.condition, e.alert.operator, e.alert.threshold, e.domain.name, e.alert.id] as const;
  return [...events].sort((a, b) => {
    const [ka, kb] = [key(a), key(b)];
    for (let i = 0; i < ka.length; i++) if (ka[i] !== kb[i]) return ka[i]! < kb[i]! ? -1 : 1;
    return 0;
  });
}

/** `[tailhouse] FIRING: …`: one event by its alert's name and domain, more by their counts. */
function subjectOf(events: readonly AlertEvent[], quote: (text: string) => string): string {
  const [only] = events;
  if (events.length === 1 && only) return `[tailhouse] ${KIND_TEXT[only.kind]}: alert ${quote(only.alert.name)} on ${only.domain.name}`;
  const firing = events.filter(isFiring).length;
  const resolved = events.length - firing;
  if (firing > 0 && resolved > 0) return `[tailhouse] FIRING: ${plural(firing, 'alert')}, RESOLVED: ${integer.format(resolved)}`;
  const conditions = new Set(events.map((e) => conditionText(e.alert)));
  const domains = new Set(events.map((e) => e.domain.id)).size;
  const what = conditions.size === 1 ? [...conditions][0]! : plural(conditions.size, 'condition');
  const kind = events.every((e) => e.kind === 'reminder') ? KIND_TEXT.reminder : firing > 0 ? 'FIRING' : 'RESOLVED';
  return `[tailhouse] ${kind}: ${plural(events.length, 'alert')} (${what} on ${plural(domains, 'domain')})`;
}

/** Names joined into lines of at most about 76 characters, indented. */
function wrapped(names: readonly string[], indent: string): string[] {
  const lines: string[] = [];
  let line = '';
  for (const [i, name] of names.entries()) {
    const item = i < names.length - 1 ? `${name},` : name;
    if (line !== '' && line.length + 1 + item.length > 76 - indent.length) {
      lines.push(indent + line);
      line = item;
    } else line = line === '' ? item : `${line} ${item}`;
  }
  if (line !== '') lines.push(indent + line);
  return lines;
}

/**
 * The events as a list, firing ones first, then resolved ones: the first FULL_EVENTS through
 * `full`, every other one by its domain's name, under its alert's heading.
 */
function eventList(events: readonly AlertEvent[], full: (e: AlertEvent, n: number) => string[], quote: (text: string) => string): string[] {
  const all = ordered(events);
  const firing = all.filter(isFiring);
  const lines: string[] = [];
  for (const [title, section, offset] of [['FIRING', firing, 0], ['RESOLVED', all.slice(firing.length), firing.length]] as const) {
    if (section.length === 0) continue;
    const shown = Math.max(0, Math.min(section.length, FULL_EVENTS - offset));
    lines.push(`${title}: ${plural(section.length, 'alert')}`, '');
    for (const [i, e] of section.slice(0, shown).entries()) lines.push(...full(e, offset + i + 1));
    const rest = section.slice(shown);
    if (rest.length === 0) continue;
    lines.push(shown > 0 ? `${title}, the other ${integer.format(rest.length)}, by domain:` : `${title}, by domain:`);
    const byAlert = new Map<string, string[]>();
    for (const e of rest) {
      const heading = alertHeading(e.alert, quote);
      const domains = byAlert.get(heading) ?? [];
      domains.push(e.domain.name);
      byAlert.set(heading, domains);
    }
    for (const [heading, domains] of byAlert) lines.push(`  ${heading} on ${plural(domains.length, 'domain')}:`, ...wrapped(domains, '    '));
    lines.push('');
  }
  return lines;
}

/** Events by condition: `errorRate: 600 firing, 400 resolved`. */
function countsByCondition(events: readonly AlertEvent[]): string[] {
  const counts = new Map<Condition, { firing: number; resolved: number }>();
  for (const e of events) {
    const count = counts.get(e.alert.condition) ?? { firing: 0, resolved: 0 };
    count[isFiring(e) ? 'firing' : 'resolved']++;
    counts.set(e.alert.condition, count);
  }
  return [...counts].map(([condition, c]) => `  ${condition}: ${[c.firing > 0 ? `${integer.format(c.firing)} firing` : '', c.resolved > 0 ? `${integer.format(c.resolved)} resolved` : ''].filter(Boolean).join(', ')}`);
}

/** A filter as its author wrote it: strings quoted (user text), numbers and booleans as they are. */
const filterText = ([op, dimension, values]: FilterTuple) => `${dimension} ${op} ${values.map((v) => (typeof v === 'string' ? quoted(v) : String(v))).join(' or ')}`;

/** One event in full, for the e-mail. */
function emailEntry(e: AlertEvent, n: number): string[] {
  const since = e.kind === 'resolved' ? `Fired:     from ${e.startsAt} to ${e.endsAt ?? 'the end of the window'}` : `Since:     ${e.startsAt}`;
  const filters = e.alert.filters;
  const unshown = queryFiltersOf(filters).filter((f) => dashboardParams(f) === undefined).length;
  return [
    `${n}. ${KIND_TEXT[e.kind]}: ${e.domain.name}, alert ${quoted(e.alert.name)}`,
    `   Condition: ${conditionText(e.alert)} (${e.alert.operator})`,
    `   Value:     ${formatValue(e.alert.condition, e.value)}${e.value === null ? noDataReason(e) : ''}`,
    `   Threshold: ${UNITS[e.alert.condition].threshold(e.alert.threshold)}`,
    `   Window:    the last ${windowText(e.alert.duration)} (${e.alert.duration} s): ${e.window.start} to ${e.window.end}`,
    `   Requests:  ${integer.format(e.requests)}`,
    `   ${since}`,
    ...(filters.length > 0 ? [`   Filters:   ${filters.map(filterText).join('; ')}`] : []),
    `   Dashboard: ${e.dashboardUrl}${unshown > 0 ? ` (without ${plural(unshown, 'filter')} it cannot apply: it shows more than the alert counted)` : ''}`,
    '',
  ];
}

/** One event on one line, for a chat's `text`. */
function chatLine(e: AlertEvent): string {
  const since = e.kind === 'resolved' ? `fired from ${e.startsAt}` : `since ${e.startsAt}`;
  return `${KIND_TEXT[e.kind]} ${e.domain.name}: alert ${chatQuoted(e.alert.name)}, ${conditionText(e.alert)}, value ${formatValue(e.alert.condition, e.value)}, ${since} ${e.dashboardUrl}`;
}

const personOf = (p: { name: string; email: string }) => (p.name.trim() === '' ? p.email : `${quoted(p.name.trim())} <${p.email}>`);

/** The distinct configurers of the events' alerts, in order of appearance; `unrecorded`: some alert predates that record. */
function configurersOf(events: readonly AlertEvent[]): { people: { name: string; email: string }[]; unrecorded: boolean } {
  const people = new Map<string, { name: string; email: string }>();
  for (const e of events) if (e.configuredBy) people.set(JSON.stringify([e.configuredBy.name, e.configuredBy.email]), e.configuredBy);
  return { people: [...people.values()], unrecorded: events.some((e) => e.configuredBy === null) };
}

function listed(items: readonly string[]): string {
  return items.length <= 1 ? (items[0] ?? '') : `${items.slice(0, -1).join(', ')} and ${items[items.length - 1]}`;
}

export function emailOfGroup(g: NotificationGroup): { subject: string; text: string } {
  const events = ordered(g.events);
  const only = events.length === 1 ? events[0] : undefined;
  const firing = events.filter(isFiring).length;
  const resolved = events.length - firing;
  const domains = new Set(events.map((e) => e.domain.id)).size;
  const headline = only
    ? `The alert ${quoted(only.alert.name)} on ${only.domain.name} is ${
        only.kind === 'firing' ? 'FIRING' : only.kind === 'reminder' ? `STILL FIRING (since ${only.startsAt})` : `RESOLVED (it fired from ${only.startsAt} to ${only.endsAt ?? 'the end of its window'})`
      }.`
    : `${[firing > 0 ? `${plural(firing, 'alert')} ${firing === 1 ? 'is' : 'are'} FIRING` : '', resolved > 0 ? `${plural(resolved, 'alert')} RESOLVED` : ''].filter(Boolean).join(' and ')}, on ${plural(domains, 'domain')}.`;
  const { people, unrecorded } = configurersOf(events);
  const who = listed([...people.map(personOf), ...(unrecorded ? [`a user of this service (not recorded: ${only ? 'the alert predates' : 'some alerts predate'} that record)`] : [])]);
  const lines = [
    headline,
    '',
    ...(only ? [] : ['By condition:', ...countsByCondition(events), '']),
    ...(g.heldSince
      ? [
          `Sent late: this notification was held back from ${g.heldSince}, because this address had received ${g.perTargetPerHour} notifications from this service in the hour before, the most it may.`,
          '',
        ]
      : []),
    ...eventList(events, emailEntry, quoted),
    'Why you receive this',
    ...(only
      ? [
          `This alert was configured on ${g.service} by ${who}, for the domain ${only.domain.name}, with this address as the recipient of its notifications.`,
          `The alert's name, ${quoted(only.alert.name)}, is text that user chose; this service did not write or check it.`,
          `If you do not want these messages, ask ${who} to remove this address from the alert, or write to the operator of ${g.service}.`,
        ]
      : [
          `These alerts were configured on ${g.service} by ${who}, for the domains named above, with this address as the recipient of their notifications.`,
          "The alerts' names, shown quoted, are text those users chose; this service did not write or check them.",
          `If you do not want these messages, ask ${who} to remove this address from their alerts, or write to the operator of ${g.service}.`,
        ]),
    '',
    `-- tailhouse (notification ${g.id}, group ${g.groupKey})`,
    '',
  ];
  return { subject: headerSafe(subjectOf(events, quoted)), text: lines.join('\n') };
}

/**
 * The webhook's JSON body: the group's facts per event, the notification's id for deduplication,
 * who configured the alerts, any hold, and `text`, a short summary for chats' incoming webhooks
 * (Slack, Mattermost), which show it as it is.
 */
export function webhookBodyOfGroup(g: NotificationGroup): string {
  const events = ordered(g.events);
  const text = [headerSafe(subjectOf(events, chatQuoted)), ...eventList(events, (e) => [chatLine(e)], chatQuoted).filter((line) => line !== '')].join('\n');
  return JSON.stringify({
    id: g.id,
    groupKey: g.groupKey,
    status: events.some(isFiring) ? 'firing' : 'resolved',
    heldSince: g.heldSince,
    configuredBy: configurersOf(events).people,
    text,
    alerts: events.map((e) => ({
      status: isFiring(e) ? 'firing' : 'resolved',
      event: e.kind,
      domain: e.domain.name,
      domainId: e.domain.id,
      alertId: e.alert.id,
      name: e.alert.name,
      condition: e.alert.condition,
      operator: e.alert.operator,
      value: e.value,
      threshold: e.alert.threshold,
      requests: e.requests,
      window: e.window,
      startsAt: e.startsAt,
      endsAt: e.endsAt,
      dashboardUrl: e.dashboardUrl,
      filters: e.alert.filters,
    })),
  });
}
