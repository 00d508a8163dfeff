/**
 * A notification per target per round (issue 30 §1), as words: the e-mail and the webhook body of a
 * group of alert events, from one event to a 1,000-domain incident; user text that stays quoted;
 * every condition's value in its unit; the dashboard link that the dashboard itself parses back.
 * Pure: no app, no database.
 */
import { describe, expect, it } from 'vitest';
import {
  dashboardUrl,
  emailOfGroup,
  formatValue,
  FULL_EVENTS,
  groupKeyOf,
  quoted,
  webhookBodyOfGroup,
  type AlertEvent,
  type EventKind,
  type NotificationGroup,
} from '../../../src/alerts/notifications.js';
import { CONDITIONS, queryFiltersOf, type Condition, type FilterTuple } from '../../../src/alerts/schemas.js';
import type { QueryFilter } from '../../../src/stats/query/filters.js';
import { filtersOf } from '../../../web/src/filters.js';

const BASE_URL = 'https://tailhouse.example.com/';
const SERVICE = 'https://tailhouse.example.com';
const WINDOW = { start: '2026-11-21T10:00:00.000Z', end: '2026-11-21T10:05:00.000Z' };
const JANE = { name: 'Jane Doe', email: 'jane@example.com' };

function event(over: Partial<Omit<AlertEvent, 'alert'>> & { alert?: Partial<AlertEvent['alert']> } = {}): AlertEvent {
  const alert = { id: 1, name: 'High errors', condition: 'errorRate' as Condition, operator: 'greaterThan' as const, threshold: 0.05, duration: 300, filters: [], ...over.alert };
  const domain = over.domain ?? { id: 7, name: 'shop.example.com' };
  const kind: EventKind = over.kind ?? 'firing';
  return {
    value: 0.0712,
    requests: 1234,
    window: WINDOW,
    startsAt: '2026-11-21T09:55:00.000Z',
    endsAt: kind === 'resolved' ? WINDOW.end : null,
    dashboardUrl: dashboardUrl(BASE_URL, domain.id, WINDOW, queryFiltersOf(alert.filters)),
    configuredBy: JANE,
    ...over,
    kind,
    alert,
    domain,
  };
}

const group = (events: AlertEvent[], over: Partial<NotificationGroup> = {}): NotificationGroup => ({
  id: '901',
  groupKey: groupKeyOf('email', 'oncall@example.com'),
  events,
  heldSince: null,
  perTargetPerHour: 20,
  service: SERVICE,
  ...over,
});

const bodyOf = (g: NotificationGroup) => JSON.parse(webhookBodyOfGroup(g)) as { status: string; text: string; alerts: Record<string, unknown>[]; configuredBy: unknown[]; [k: string]: unknown };

/** The e-mail's entries shown in full: `12. FIRING: …`. */
const fullEntries = (text: string) => text.split('\n').filter((line) => /^\d+\. /.test(line));

describe('one event', () => {
  it('names the alert quoted, the domain, condition, value and threshold in their unit, since when, the dashboard and who configured it', () => {
    const e = event();
    const { subject, text } = emailOfGroup(group([e]));
    expect(subject).toBe('[tailhouse] FIRING: alert "High errors" on shop.example.com');
    expect(text.split('\n')[0]).toBe('The alert "High errors" on shop.example.com is FIRING.');
    expect(text).toContain('1. FIRING: shop.example.com, alert "High errors"');
    expect(text).toContain('   Condition: errorRate > 0.05 (greaterThan)');
    expect(text).toContain('   Value:     0.0712 (7.12 % of requests with status ≥ 500)');
    expect(text).toContain('   Threshold: 0.05 (5.00 %)');
    expect(text).toContain('   Since:     2026-11-21T09:55:00.000Z');
    expect(text).toContain(`   Dashboard: ${e.dashboardUrl}\n`);
    expect(text).toContain(
      `This alert was configured on ${SERVICE} by "Jane Doe" <jane@example.com>, for the domain shop.example.com, with this address as the recipient of its notifications.`,
    );
    expect(text).not.toContain('By condition:');
    expect(emailOfGroup(group([event({ configuredBy: null })])).text).toContain(
      `This alert was configured on ${SERVICE} by a user of this service (not recorded: the alert predates that record), for the domain shop.example.com`,
    );
    expect(emailOfGroup(group([event({ kind: 'resolved' })])).subject).toBe('[tailhouse] RESOLVED: alert "High errors" on shop.example.com');
    expect(emailOfGroup(group([event({ kind: 'reminder' })])).subject).toBe('[tailhouse] FIRING (reminder): alert "High errors" on shop.example.com');
  });

  it('says why a value is missing, and that a held-back notification is sent late', () => {
    const { text } = emailOfGroup(group([event({ value: null, requests: 3, minRequests: 20 })], { heldSince: '2026-11-21T09:00:00.000Z' }));
    expect(text).toContain('   Value:     no data (3 requests, fewer than the 20 a rate needs)');
    expect(text).toContain(
      'Sent late: this notification was held back from 2026-11-21T09:00:00.000Z, because this address had received 20 notifications from this service in the hour before, the most it may.',
    );
    expect(emailOfGroup(group([event()])).text).not.toContain('Sent late');
    expect(bodyOf(group([event()], { heldSince: '2026-11-21T09:00:00.000Z' })).heldSince).toBe('2026-11-21T09:00:00.000Z');
  });
});

describe('firing and resolved together', () => {
  const events = [
    event({ kind: 'resolved', domain: { id: 1, name: 'a.example.com' } }),
    event({ kind: 'firing', domain: { id: 2, name: 'b.example.com' } }),
    event({ kind: 'resolved', domain: { id: 3, name: 'c.example.com' } }),
    event({ kind: 'reminder', domain: { id: 4, name: 'd.example.com' } }),
    event({ kind: 'firing', domain: { id: 5, name: 'e.example.com' } }),
  ];

  it('lists the firing alerts (new and reminders) first, then the resolved ones, in the e-mail and the webhook', () => {
    const { subject, text } = emailOfGroup(group(events));
    expect(subject).toBe('[tailhouse] FIRING: 3 alerts, RESOLVED: 2');
    expect(fullEntries(text)).toEqual([
      '1. FIRING: b.example.com, alert "High errors"',
      '2. FIRING (reminder): d.example.com, alert "High errors"',
      '3. FIRING: e.example.com, alert "High errors"',
      '4. RESOLVED: a.example.com, alert "High errors"',
      '5. RESOLVED: c.example.com, alert "High errors"',
    ]);
    expect(text).toContain('   Fired:     from 2026-11-21T09:55:00.000Z to 2026-11-21T10:05:00.000Z');
    const body = bodyOf(group(events));
    expect(body.status).toBe('firing');
    expect(body.alerts.map((a) => [a.domain, a.status, a.event])).toEqual([
      ['b.example.com', 'firing', 'firing'],
      ['d.example.com', 'firing', 'reminder'],
      ['e.example.com', 'firing', 'firing'],
      ['a.example.com', 'resolved', 'resolved'],
      ['c.example.com', 'resolved', 'resolved'],
    ]);
  });

  it('a group of resolved alerts only is resolved', () => {
    const resolved = events.filter((e) => e.kind === 'resolved');
    expect(bodyOf(group(resolved)).status).toBe('resolved');
    expect(emailOfGroup(group(resolved)).subject).toBe('[tailhouse] RESOLVED: 2 alerts (errorRate > 0.05 on 2 domains)');
  });
});

describe('a 1,000-domain incident', () => {
  const domainName = (i: number) => `d${i}.fleet.example`;
  const slow = { id: 2, name: 'Slow', condition: 'p95ResponseTime' as const, threshold: 800 };
  const events = Array.from({ length: 1000 }, (_, i) =>
    event({
      kind: i % 10 < 6 ? 'firing' : 'resolved',
      domain: { id: 1000 + i, name: domainName(i) },
      ...(i % 4 === 0 ? { alert: slow, value: 912.5 } : {}),
    }),
  );
  const { subject, text } = emailOfGroup(group(events));

  it(`shows the first ${FULL_EVENTS} events in full and names every other domain, grouped by alert, with a count by condition`, () => {
    expect(FULL_EVENTS).toBe(50);
    expect(subject).toBe('[tailhouse] FIRING: 600 alerts, RESOLVED: 400');
    expect(fullEntries(text)).toHaveLength(FULL_EVENTS);
    expect(text.match(/^ {3}Dashboard: /gm)).toHaveLength(FULL_EVENTS);
    for (let i = 0; i < 1000; i++) expect(text).toMatch(new RegExp(`[ ,]${domainName(i).replaceAll('.', '\\.')}[,\\n]`));
    expect(text).toContain('By condition:\n  errorRate: 450 firing, 300 resolved\n  p95ResponseTime: 150 firing, 100 resolved\n');
    expect(text).toContain('FIRING, the other 550, by domain:\n  alert "High errors" (errorRate > 0.05) on 400 domains:\n');
    expect(text).toContain('  alert "Slow" (p95ResponseTime > 800) on 150 domains:\n');
    expect(text).toContain('RESOLVED, by domain:\n  alert "High errors" (errorRate > 0.05) on 300 domains:\n');
    expect(Buffer.byteLength(text)).toBeLessThan(200_000);
    expect(Math.max(...text.split('\n').filter((l) => !l.includes('://')).map((l) => l.length))).toBeLessThan(400);
  });

  it('one condition on every domain reads as such in the subject', () => {
    const firing = events.map((e) => ({ ...e, kind: 'firing' as const, alert: { ...e.alert, ...(e.alert.id === 2 ? { id: 1, name: 'High errors', condition: 'errorRate' as const, threshold: 0.05 } : {}) } }));
    expect(emailOfGroup(group(firing)).subject).toBe('[tailhouse] FIRING: 1,000 alerts (errorRate > 0.05 on 1,000 domains)');
  });

  it("the webhook carries every event, and its text the same list as the e-mail's, one line per event", () => {
    const body = bodyOf(group(events));
    expect(body.alerts).toHaveLength(1000);
    const lines = body.text.split('\n');
    expect(lines[0]).toBe(subject);
    expect(lines.filter((l) => / https:\/\/tailhouse\.example\.com\/domains\/\d+\?/.test(l))).toHaveLength(FULL_EVENTS);
    for (let i = 0; i < 1000; i++) expect(body.text).toContain(domainName(i));
    expect(Buffer.byteLength(body.text)).toBeLessThan(40_000);
  });
});

describe('the webhook body', () => {
  it('holds each event’s facts, the notification’s id and key, the distinct configurers and a text', () => {
    const filters: FilterTuple[] = [['is', 'url', ['/cart']]];
    const mallory = { name: 'Mallory', email: 'mallory@example.com' };
    const events = [
      event({ alert: { id: 3, filters }, domain: { id: 9, name: 'shop.example.com' } }),
      event({ kind: 'resolved', domain: { id: 10, name: 'blog.example.com' } }),
      event({ domain: { id: 11, name: 'api.example.com' }, configuredBy: mallory }),
      event({ domain: { id: 12, name: 'old.example.com' }, configuredBy: null }),
    ];
    const body = bodyOf(group(events));
    expect(body).toMatchObject({ id: '901', groupKey: groupKeyOf('email', 'oncall@example.com'), status: 'firing', heldSince: null, configuredBy: [mallory, JANE] });
    expect(body.alerts[2]).toEqual({
      status: 'firing',
      event: 'firing',
      domain: 'shop.example.com',
      domainId: 9,
      alertId: 3,
      name: 'High errors',
      condition: 'errorRate',
      operator: 'greaterThan',
      value: 0.0712,
      threshold: 0.05,
      requests: 1234,
      window: WINDOW,
      startsAt: '2026-11-21T09:55:00.000Z',
      endsAt: null,
      dashboardUrl: `${SERVICE}/domains/9?period=custom&from=2026-11-21T10%3A00%3A00.000Z&to=2026-11-21T10%3A05%3A00.000Z&f=is%3Aurl%3A%2Fcart`,
      filters,
    });
    expect(body.alerts[3]).toMatchObject({ status: 'resolved', event: 'resolved', domain: 'blog.example.com', endsAt: WINDOW.end });
    expect(body.text.split('\n')).toEqual([
      '[tailhouse] FIRING: 3 alerts, RESOLVED: 1',
      'FIRING: 3 alerts',
      `FIRING api.example.com: alert "High errors", errorRate > 0.05, value 0.0712 (7.12 % of requests with status ≥ 500), since 2026-11-21T09:55:00.000Z ${events[2]!.dashboardUrl}`,
      `FIRING old.example.com: alert "High errors", errorRate > 0.05, value 0.0712 (7.12 % of requests with status ≥ 500), since 2026-11-21T09:55:00.000Z ${events[3]!.dashboardUrl}`,
      `FIRING shop.example.com: alert "High errors", errorRate > 0.05, value 0.0712 (7.12 % of requests with status ≥ 500), since 2026-11-21T09:55:00.000Z ${events[0]!.dashboardUrl}`,
      'RESOLVED: 1 alert',
      `RESOLVED blog.example.com: alert "High errors", errorRate > 0.05, value 0.0712 (7.12 % of requests with status ≥ 500), fired from 2026-11-21T09:55:00.000Z ${events[1]!.dashboardUrl}`,
    ]);
    const { text } = emailOfGroup(group(events));
    expect(text).toContain(
      `These alerts were configured on ${SERVICE} by "Mallory" <mallory@example.com>, "Jane Doe" <jane@example.com> and a user of this service (not recorded: some alerts predate that record), for the domains named above`,
    );
  });

  it('the group key is stable per target and method, and names neither', () => {
    expect(groupKeyOf('email', 'oncall@example.com')).toMatch(/^[0-9a-f]{16}$/);
    expect(groupKeyOf('email', 'oncall@example.com')).toBe(groupKeyOf('email', 'oncall@example.com'));
    expect(groupKeyOf('webhook', 'oncall@example.com')).not.toBe(groupKeyOf('email', 'oncall@example.com'));
    expect(groupKeyOf('email', 'other@example.com')).not.toBe(groupKeyOf('email', 'oncall@example.com'));
  });
});

describe('user text', () => {
  const hostile = 'Disk "ok"\r\nFrom: ceo@example.com\n\u2028Subject: pay now\u202Eevil\u200B <https://evil.example|Log in> [here](https://evil.example) @channel *bold* _it_ `code`';
  const events = [
    event({ alert: { name: hostile }, configuredBy: { name: 'Eve"\nFrom: admin@example.com', email: 'eve@example.com' } }),
    event({ kind: 'resolved', alert: { name: hostile }, domain: { id: 8, name: 'b.example.com' } }),
  ];

  it('stays inside its quotes in the e-mail: no line starts with it, no line break or invisible character of it survives', () => {
    for (const g of [group(events), group(events.slice(0, 1)), group(Array.from({ length: 60 }, (_, i) => event({ alert: { name: hostile }, domain: { id: i, name: `d${i}.example.com` } })))]) {
      const { subject, text } = emailOfGroup(g);
      for (const line of [subject, ...text.split('\n')]) {
        expect(line).not.toMatch(/^(From|Subject):/);
        expect(line).not.toMatch(/^\s*Disk/);
      }
      expect(text).not.toMatch(/[\r\u2028\u202E\u200B]/);
      expect(text).toContain(quoted(hostile));
      expect(text).not.toContain('Disk "ok"');
    }
  });

  it('stays inside its quotes in the webhook text, with no link, mention or emphasis a chat would render', () => {
    const { text } = bodyOf(group(events));
    for (const line of text.split('\n')) expect(line).not.toMatch(/^\s*(From|Subject):|^\s*Disk/);
    // `[tailhouse]` and `>` (errorRate > 0.05) are ours.
    expect(text.replace('[tailhouse]', '')).not.toMatch(/[\r\u2028\u202E\u200B<[\]@*_`]/);
    expect(text).toContain('alert "Disk \\"ok\\"\\r\\nFrom: ceo\\u0040example.com');
    expect(bodyOf(group(events)).alerts[0]!.name).toBe(hostile);
  });

  it('leaves the subject one header line', () => {
    const { subject } = emailOfGroup(group(events.slice(0, 1)));
    expect(subject).toMatch(/^\[tailhouse\] FIRING: alert "Disk /);
    expect(subject).not.toMatch(/[\u0000-\u001f\u007f\u2028\u202E\u200B]/);
    expect(subject).toContain(quoted(hostile));
    // Domain names are host names when stored; a stored one that is not still cannot add a header.
    const forged = emailOfGroup(group([event({ domain: { id: 1, name: 'shop.example.com\r\nBcc: all@example.com' } })])).subject;
    expect(forged).toBe('[tailhouse] FIRING: alert "High errors" on shop.example.com Bcc: all@example.com');
  });
});

describe('values in their unit', () => {
  const EXPECTED: Record<Condition, [number, string]> = {
    errorRate: [0.0712, '0.0712 (7.12 % of requests with status ≥ 500)'],
    clientErrorRate: [0.25, '0.2500 (25.00 % of requests with status 400–499)'],
    requests: [12345, '12,345 requests'],
    requestCount: [0, '0 requests'],
    bandwidth: [1_536_000, '1.5 MB (1,536,000 bytes)'],
    visitors: [42, '42 visitors'],
    averageResponseTime: [123.456, '123.46 ms (average)'],
    p50ResponseTime: [80, '80.00 ms (50th percentile)'],
    p95ResponseTime: [912.5, '912.50 ms (95th percentile)'],
    p99ResponseTime: [1500, '1500.00 ms (99th percentile)'],
    maxResponseTime: [30_000, '30000.00 ms (the longest)'],
    requestChange: [-0.72, '−72.0 % against the same window 7 days earlier (value −0.72)'],
  };

  it('every condition has its unit', () => {
    expect(Object.keys(EXPECTED).sort()).toEqual([...CONDITIONS].sort());
    for (const condition of CONDITIONS) {
      const [value, text] = EXPECTED[condition];
      expect(formatValue(condition, value), condition).toBe(text);
      expect(formatValue(condition, null)).toBe('no data');
    }
  });

  it('edge values and thresholds read right', () => {
    expect(formatValue('requestChange', 0.35)).toBe('+35.0 % against the same window 7 days earlier (value +0.35)');
    expect(formatValue('requestChange', -1)).toBe('−100.0 % against the same window 7 days earlier (value −1)');
    expect(formatValue('bandwidth', 999)).toBe('999 B (999 bytes)');
    expect(formatValue('bandwidth', 2_500_000_000_000)).toBe('2.5 TB (2,500,000,000,000 bytes)');
    const text = (over: Parameters<typeof event>[0]) => emailOfGroup(group([event(over)])).text;
    expect(text({ alert: { condition: 'requestChange', operator: 'lessThan', threshold: -0.7 }, value: -0.72 })).toContain('   Threshold: −0.7 (−70.0 %)');
    expect(text({ alert: { condition: 'requestChange', operator: 'lessThan', threshold: -0.7 }, value: null })).toContain(
      '   Value:     no data (no requests in the same window 7 days earlier to compare with)',
    );
    expect(text({ alert: { condition: 'bandwidth', threshold: 1_000_000 }, value: 1_536_000 })).toContain('   Threshold: 1.0 MB (1,000,000 bytes)');
    expect(text({ alert: { condition: 'p99ResponseTime', threshold: 1000 }, value: null })).toContain('   Value:     no data (no request in the window carries a response time)');
  });
});

describe('dashboardUrl', () => {
  it('opens the domain dashboard on the window, with the filters the dashboard parses back as they are', () => {
    const filters: QueryFilter[] = [
      { op: 'is', dimension: 'url', values: ['/a b?c=1&d=#e:f'] },
      { op: 'isNot', dimension: 'statusClass', values: ['4xx', '5xx'] },
      { op: 'is', dimension: 'statusCode', values: [503] },
      { op: 'is', dimension: 'bot', values: [false] },
      { op: 'is', dimension: 'userAgent', values: ['ü "x" 😀'] },
    ];
    const url = new URL(dashboardUrl('https://tailhouse.example.com/base//', 42, WINDOW, filters));
    expect(url.origin + url.pathname).toBe('https://tailhouse.example.com/base/domains/42');
    expect(url.searchParams.get('period')).toBe('custom');
    expect(url.searchParams.get('from')).toBe(WINDOW.start);
    expect(url.searchParams.get('to')).toBe(WINDOW.end);
    expect(filtersOf(url.searchParams)).toEqual([
      { op: 'is', dimension: 'url', value: '/a b?c=1&d=#e:f' },
      { op: 'isNot', dimension: 'statusClass', value: '4xx' },
      { op: 'isNot', dimension: 'statusClass', value: '5xx' },
      { op: 'is', dimension: 'statusCode', value: 503 },
      { op: 'is', dimension: 'bot', value: false },
      { op: 'is', dimension: 'userAgent', value: 'ü "x" 😀' },
    ]);
  });

  it('leaves out what the dashboard cannot apply, and the e-mail says so', () => {
    const unshowable: QueryFilter[] = [
      { op: 'is', dimension: 'method', values: ['GET', 'POST'] },
      { op: 'contains', dimension: 'url', values: ['cart'] },
      { op: 'glob', dimension: 'path', values: ['/api/*'] },
      { op: 'cidr', dimension: 'ipAddress', values: [{ first: '10.0.0.0', last: '10.0.0.255' }] },
      { op: 'is', dimension: 'domain', values: ['shop.example.com'] },
    ];
    const url = new URL(dashboardUrl(BASE_URL, 1, WINDOW, [...unshowable, { op: 'is', dimension: 'method', values: ['GET'] }]));
    expect(url.searchParams.getAll('f')).toEqual(['is:method:GET']);
    const written: FilterTuple[] = [
      ['is', 'method', ['GET', 'POST']],
      ['contains', 'url', ['cart']],
      ['glob', 'path', ['/api/*']],
      ['cidr', 'ipAddress', ['10.0.0.0/24']],
      ['is', 'domain', ['shop.example.com']],
    ];
    const { text } = emailOfGroup(group([event({ alert: { filters: written } })]));
    expect(text).toContain('(without 5 filters it cannot apply: it shows more than the alert counted)');
    expect(text).toContain('   Filters:   method is "GET" or "POST"; url contains "cart"; path glob "/api/*"; ipAddress cidr "10.0.0.0/24"; domain is "shop.example.com"');
    expect(emailOfGroup(group([event()])).text).not.toContain('it cannot apply');
  });
});
