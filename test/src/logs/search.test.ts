/**
 * POST /api/logs/domains/:domainId/search: case-insensitive substring over the chosen fields,
 * access and error entries mixed newest first, against an independent computation over the
 * generated lines (loaded through importFiles); metacharacters; pagination; 422s; access control;
 * the text indexes of sql/clickhouse/003_search_index.sql. Reads narrowed by the rollups' keys:
 * test/src/logs/search-keyed-rollups.test.ts.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { call, createUserAndLogin, startTestApp, type TestApp } from '../../support/app.js';
import { buildRollups } from '../../../src/rollups/builder.js';
import { searchScope } from '../../../src/logs/search-fields.js';
import { planWindow, queryBuildState } from '../../../src/rollups/plan.js';
import type { SearchField } from '../../../src/logs/store.js';
import { importText, newDomain, select, timeLocal } from '../../support/ingest.js';
import { apiShape, generateAccess, generateErrors, newestFirst, seedLogs, seedTwoOwners, type GeneratedAccess, type GeneratedError, type SeededLogs } from '../../support/logs.js';
import { DAY_MS, HOUR_MS } from '../../../core/durations.js';

let t: TestApp;
let admin: string;
let owner: { id: number; token: string };
let other: { id: number; token: string };
let seeded: SeededLogs;
let othersDomain: SeededLogs;
let from: string;

beforeAll(async () => {
  t = await startTestApp();
  ({ admin, owner, other, seeded, othersDomain } = await seedTwoOwners(t, { access: 700, errors: 300 }, { access: 50, errors: 50 }));
  from = new Date(Math.min(seeded.access[0]!.timestamp, seeded.errors[0]!.timestamp) - 1000).toISOString();
});

afterAll(async () => {
  await t?.close();
});

type Field = SearchField;
type Entry = GeneratedAccess | GeneratedError;

function search(body: unknown, token = owner.token, domainId = seeded.domain.id) {
  return call(t.app, 'POST', `/api/logs/domains/${domainId}/search`, { token, body });
}

/** What a search must find: the fields an entry has, lower-cased, containing the lower-cased query. */
function expected(entries: { access: GeneratedAccess[]; errors: GeneratedError[] }, query: string, fields: Field[], range?: [number, number]): Entry[] {
  const q = query.toLowerCase();
  const hit = (value: string | undefined) => value !== undefined && value.toLowerCase().includes(q);
  const all: Entry[] = [...entries.access, ...entries.errors];
  return newestFirst(
    all.filter((e) => {
      if (range && (e.timestamp < range[0] || e.timestamp > range[1])) return false;
      const values = fields.map((f) => (e as unknown as Record<string, string | undefined>)[f]);
      return values.some(hit);
    }),
  );
}

const shaped = (e: Entry) => ({ type: e.kind, ...apiShape(e) });

function withoutIds(logs: { id: number }[]): Record<string, unknown>[] {
  for (const e of logs) expect(Number.isSafeInteger(e.id) && e.id > 0).toBe(true);
  return logs.map(({ id: _id, ...rest }) => rest);
}

async function expectSearch(body: Record<string, unknown>, want: Entry[]) {
  const res = await search({ startDate: from, limit: 1000, ...body });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  expect(res.body.success).toBe(true);
  expect(res.body.data.pagination).toEqual({ page: 1, limit: 1000, total: want.length, pages: Math.ceil(want.length / 1000) });
  expect(withoutIds(res.body.data.logs)).toEqual(want.map(shaped));
  return res.body.data.logs as { id: number; type: string; timestamp: string }[];
}

function expect422(res: { status: number; body: any }, field: string) {
  expect(res.status, JSON.stringify(res.body)).toBe(422);
  expect(res.body).toMatchObject({ success: false, error: 'Validation failed' });
  expect(typeof res.body.details?.[field], JSON.stringify(res.body)).toBe('string');
}

describe('search', () => {
  it('default fields url and message: access and error entries mixed, newest first, each with its type', async () => {
    const want = expected(seeded, 'item', ['url', 'message']);
    expect(want.some((e) => e.kind === 'access') && want.some((e) => e.kind === 'error')).toBe(false); // 'item' is in urls only
    await expectSearch({ query: 'item' }, want);
    const mixed = expected(seeded, 'o', ['url', 'message']);
    expect(mixed.some((e) => e.kind === 'access') && mixed.some((e) => e.kind === 'error')).toBe(true);
    const logs = await expectSearch({ query: 'O' }, mixed);
    for (let i = 1; i < logs.length; i++) expect(logs[i - 1]!.timestamp >= logs[i]!.timestamp).toBe(true);
    const first = logs.find((e) => e.type === 'error') as unknown as Record<string, unknown>;
    expect(Object.keys(first).sort()).toEqual(['context', 'id', 'level', 'message', 'timestamp', 'type']);
    const firstAccess = logs.find((e) => e.type === 'access') as unknown as Record<string, unknown>;
    expect(Object.keys(firstAccess).sort()).toEqual(
      ['id', 'ipAddress', 'method', 'protocol', 'referrer', 'responseSize', 'responseTime', 'statusCode', 'timestamp', 'type', 'url', 'userAgent'].sort(),
    );
  });

  it('case-insensitive, ASCII and beyond', async () => {
    for (const query of ['main.js', 'MAIN.JS', 'TIMED OUT', 'ünïcode', 'ÜNÏCODE', 'CAFÉ']) {
      const fields: Field[] = ['url', 'message', 'userAgent'];
      const want = expected(seeded, query, fields);
      expect(want.length, query).toBeGreaterThan(0);
      await expectSearch({ query, fields }, want);
    }
  });

  it('each field on its own and together', async () => {
    const cases: [string, Field[]][] = [
      ['google', ['userAgent']],
      ['ref2.example', ['referrer']],
      ['page_1', ['referrer']],
      ['2001:db8:1::', ['ipAddress']],
      ['203.0.113.', ['ipAddress']],
      ['refused', ['message']],
      ['/item/1', ['url']],
      ['1', ['url', 'message', 'userAgent', 'referrer', 'ipAddress']],
      ['2', ['message', 'ipAddress']],
    ];
    for (const [query, fields] of cases) {
      const want = expected(seeded, query, fields);
      expect(want.length, `${query} in ${fields}`).toBeGreaterThan(0);
      await expectSearch({ query, fields }, want);
    }
    // A field only error entries have leaves access entries out, and the other way round.
    const onlyErrors = await expectSearch({ query: 'a', fields: ['message'] }, expected(seeded, 'a', ['message']));
    expect(onlyErrors.every((e) => e.type === 'error')).toBe(true);
    const onlyAccess = await expectSearch({ query: 'a', fields: ['userAgent'] }, expected(seeded, 'a', ['userAgent']));
    expect(onlyAccess.every((e) => e.type === 'access')).toBe(true);
    // A repeated field counts once.
    await expectSearch({ query: 'orders', fields: ['url', 'url'] }, expected(seeded, 'orders', ['url']));
  });

  it('metacharacters are matched literally and never reach the SQL', async () => {
    for (const query of ["'", "it's", '\\', 'a\\b', '%', '_', '100%_', '%_off', '{x:String}', '{', '*', '*star*', '*literal*', '"', 'quote"agent', "'; DROP TABLE access_logs; --", '\\x5C', '?q=']) {
      const fields: Field[] = ['url', 'message', 'userAgent'];
      await expectSearch({ query, fields }, expected(seeded, query, fields));
    }
    expect(expected(seeded, '%', ['url']).length).toBeGreaterThan(0);
    expect(expected(seeded, '\\', ['url', 'message']).length).toBeGreaterThan(0);
    // A pattern that would match everything as LIKE syntax matches nothing here.
    await expectSearch({ query: '%%%', fields: ['url', 'message'] }, []);
    await expectSearch({ query: '_____', fields: ['url', 'message'] }, []);
  });

  it('dates: startDate required, endDate defaults to now, both ends included', async () => {
    const all = expected(seeded, 'e', ['url', 'message']);
    await expectSearch({ query: 'e' }, all);
    const sorted = newestFirst([...seeded.access, ...seeded.errors]);
    const [hi, lo] = [sorted[50]!.timestamp, sorted[600]!.timestamp];
    await expectSearch({ query: 'e', startDate: new Date(lo).toISOString(), endDate: new Date(hi).toISOString() }, expected(seeded, 'e', ['url', 'message'], [lo, hi]));
    // A returned timestamp as both ends gives its own entry.
    const res = await search({ query: 'e', startDate: from, limit: 3 });
    for (const e of res.body.data.logs as { id: number; timestamp: string }[]) {
      const again = await search({ query: 'e', startDate: e.timestamp, endDate: e.timestamp });
      expect(again.body.data.logs.map((x: { id: number }) => x.id)).toContain(e.id);
    }
    // A start in the future finds nothing.
    await expectSearch({ query: 'e', startDate: new Date(Date.now() + 60_000).toISOString() }, []);
  });

  it('pagination: pages concatenate to the whole result; total and pages exact; past the end empty', async () => {
    const want = expected(seeded, 'e', ['url', 'message', 'userAgent']).map(shaped);
    const limit = 37;
    const pages = Math.ceil(want.length / limit);
    for (let page = 1; page <= pages; page++) {
      const res = await search({ query: 'e', fields: ['url', 'message', 'userAgent'], startDate: from, limit, page });
      expect(res.status).toBe(200);
      expect(res.body.data.pagination).toEqual({ page, limit, total: want.length, pages });
      expect(withoutIds(res.body.data.logs)).toEqual(want.slice((page - 1) * limit, page * limit));
    }
    const past = await search({ query: 'e', fields: ['url', 'message', 'userAgent'], startDate: from, limit, page: pages + 3 });
    expect(past.body.data).toEqual({ logs: [], pagination: { page: pages + 3, limit, total: want.length, pages } });
    const defaults = await search({ query: 'e', startDate: from });
    expect(defaults.body.data.pagination).toMatchObject({ page: 1, limit: 20 });
    expect(defaults.body.data.logs).toHaveLength(20);
    const none = await search({ query: 'zzz-nothing', startDate: from });
    expect(none.body.data).toEqual({ logs: [], pagination: { page: 1, limit: 20, total: 0, pages: 0 } });
  });

  it('deep pages over matches spread across many hours: the page starts in the right hour, ties at hour starts kept in order', async () => {
    // Three access entries to a timestamp every 20 minutes over 40 hours, on the hour every third
    // time, and error entries 7 s after each: a page's first match lies in any hour, at its start too.
    const hour = 3_600_000;
    const base = Math.floor(Date.now() / hour) * hour - 41 * hour;
    const access = generateAccess(360, { seed: 77 }).map((e, i) => ({ ...e, timestamp: base + Math.floor(i / 3) * 20 * 60_000 }));
    const errors = generateErrors(120, { seed: 77 }).map((e, i) => ({ ...e, timestamp: base + i * 20 * 60_000 + 7_000 }));
    const spread = await seedLogs(t, { access, errors, ownerId: owner.id, tag: 'spread' });
    const fields: Field[] = ['url', 'message', 'userAgent'];
    const want = expected(spread, 'e', fields).map(shaped);
    expect(want.length).toBeGreaterThan(300);
    const startDate = new Date(base).toISOString();
    for (const limit of [7, 50]) {
      const pages = Math.ceil(want.length / limit);
      const got: Record<string, unknown>[] = [];
      for (let page = 1; page <= pages; page++) {
        const res = await search({ query: 'e', fields, startDate, limit, page }, owner.token, spread.domain.id);
        expect(res.body.data.pagination, `page ${page}`).toEqual({ page, limit, total: want.length, pages });
        got.push(...withoutIds(res.body.data.logs));
      }
      expect(got).toEqual(want);
      const past = await search({ query: 'e', fields, startDate, limit, page: pages + 1 }, owner.token, spread.domain.id);
      expect(past.body.data).toEqual({ logs: [], pagination: { page: pages + 1, limit, total: want.length, pages } });
    }
  });

  it('validation → 422 with details', async () => {
    expect422(await search({ startDate: from }), 'query');
    expect422(await search({ query: '', startDate: from }), 'query');
    expect422(await search({ query: 'x'.repeat(501), startDate: from }), 'query');
    expect((await search({ query: 'x'.repeat(500), startDate: from })).status).toBe(200);
    expect422(await search({ query: 7, startDate: from }), 'query');
    const noStart = await search({ query: 'x' });
    expect422(noStart, 'startDate');
    expect(noStart.body.details.startDate).toBe('is required');
    expect422(await search({ query: 'x', startDate: 'yesterday' }), 'startDate');
    expect422(await search({ query: 'x', startDate: from, endDate: '2000-01-01' }), 'endDate');
    const unknownField = await search({ query: 'x', startDate: from, fields: ['url', 'status'] });
    expect(unknownField.body.details).toEqual({ fields: '[1]: must be one of url, message, userAgent, referrer, ipAddress' });
    expect422(await search({ query: 'x', startDate: from, fields: [] }), 'fields');
    expect422(await search({ query: 'x', startDate: from, fields: 'url' }), 'fields');
    expect422(await search({ query: 'x', startDate: from, limit: 1001 }), 'limit');
    expect422(await search({ query: 'x', startDate: from, limit: 0 }), 'limit');
    expect422(await search({ query: 'x', startDate: from, limit: '20' }), 'limit');
    expect422(await search({ query: 'x', startDate: from, page: 0 }), 'page');
    expect422(await search({ query: 'x', startDate: from, page: 1.5 }), 'page');
    expect422(await search({ query: 'x', startDate: from, type: 'access' }), 'type');
    const notJson = await search('{"query":');
    expect(notJson.status).toBe(400);
  });

  it("access control: 401; another owner's domain 404 exactly like an unknown one; 403 without logs:read", async () => {
    const body = { query: 'e', startDate: from };
    const anonymous = await call(t.app, 'POST', `/api/logs/domains/${seeded.domain.id}/search`, { body });
    expect(anonymous.status).toBe(401);
    expect(anonymous.body).toEqual({ success: false, error: 'Authentication required' });
    const foreign = await search(body, owner.token, othersDomain.domain.id);
    const unknown = await search(body, owner.token, 987654);
    expect(foreign.status).toBe(404);
    expect(foreign.body).toEqual({ success: false, error: 'Domain not found' });
    expect(unknown.body).toEqual(foreign.body);
    expect((await search(body, other.token, othersDomain.domain.id)).status).toBe(200);
    expect((await search(body, admin)).status).toBe(200);
    // The other domain's entries never show up here.
    await expectSearch({ query: othersDomain.domain.name, fields: ['message', 'url'] }, []);
    const reader = await createUserAndLogin(t.app, admin, { email: 'noread@example.com' });
    const own = await seedLogs(t, { access: 2, ownerId: reader.id });
    expect((await call(t.app, 'PUT', `/api/users/${reader.id}/permissions`, { token: admin, body: { permissions: [] } })).status).toBe(200);
    const denied = await search(body, reader.token, own.domain.id);
    expect(denied.status).toBe(403);
    expect(denied.body).toEqual({ success: false, error: 'Insufficient permissions' });
    expect((await search(body, reader.token, seeded.domain.id)).status).toBe(404);
  });

  it('the search text indexes exist (sql/clickhouse/003_search_index.sql)', async () => {
    const rows = await select<{ table: string; name: string; type: string; expr: string }>(
      t.runtime.clickhouse,
      "SELECT table, name, type, expr FROM system.data_skipping_indices WHERE database = currentDatabase() AND name LIKE 'search_%' ORDER BY table",
    );
    expect(rows.map((r) => [r.table, r.name, r.type])).toEqual([
      ['access_logs', 'search_url', 'text'],
      ['error_logs', 'search_message', 'text'],
    ]);
  });
});

describe('search on userAgent and referrer with built rollups (src/logs/search-fields.ts)', () => {
  /** The day before yesterday (UTC): the window below holds it whole, whole hours on both sides, and partial edges. */
  const D = Math.floor(Date.now() / DAY_MS) * DAY_MS - 2 * DAY_MS;
  const start = D - 2 * HOUR_MS + 17_000;
  const end = D + DAY_MS + 5 * HOUR_MS + 1_800_000;
  type Line = { t: number; agent: string; referrer: string };
  /** nginx escapes `"` and `\` in logged values as \xHH. */
  const escaped = (value: string) => value.replace(/[\\"]/g, (c) => `\\x${c.charCodeAt(0).toString(16).toUpperCase()}`);
  const lineOf = (l: Line, i: number) =>
    `203.0.113.${i % 250} - - [${timeLocal(l.t)}] "GET /p/${i} HTTP/1.1" 200 512 "${escaped(l.referrer) || '-'}" "${escaped(l.agent)}" 0.010\n`;

  it('a field is left out only where no row of the range can match: built days and hours, raw edges and late lines all count', async () => {
    const domain = await newDomain(t.runtime.db, 'agents');
    const lines: Line[] = [];
    // Common agents and referrers every 10 minutes from 3 hours before D to 8 hours after the next day began.
    for (let at = D - 3 * HOUR_MS + 1_000; at < D + DAY_MS + 8 * HOUR_MS; at += 600_000) {
      lines.push({ t: at, agent: at % 1_200_000 < 600_000 ? 'Mozilla/5.0' : 'curl/8.5.0', referrer: at % 1_800_000 < 600_000 ? 'https://example.org/' : '' });
    }
    const needles: Line[] = [
      { t: D + 5 * HOUR_MS + 2_000, agent: 'Needle-Day/1', referrer: 'https://ref-needle-day.example/' }, // a whole day of the window
      { t: D + DAY_MS + 2 * HOUR_MS + 3_000, agent: 'Needle-Hour/1', referrer: '' }, // a whole hour after it
      { t: D - 2 * HOUR_MS + 1_800_000, agent: 'Needle-Edge/1', referrer: '' }, // the partial hour at the start
      { t: D + DAY_MS + 7 * HOUR_MS, agent: 'Needle-Outside/1', referrer: 'https://ref-outside.example/' }, // after the end
      { t: D + 6 * HOUR_MS + 5_000, agent: `Meta'Agent\\{x:String}%_"q"`, referrer: '' }, // SQL and LIKE metacharacters, in a built day
    ];
    const all = [...lines, ...needles].sort((a, b) => a.t - b.t);
    expect((await importText(t, domain.name, all.map(lineOf).join(''))).inserted).toBe(all.length);
    await buildRollups(t.runtime.clickhouse, { lookbackS: null, settleS: 1, budgetMs: 60_000, retentionDays: 90 });
    const plan = async () => planWindow(start, end, await queryBuildState(t.runtime.clickhouse, domain.id, start, end));
    expect(await plan()).toMatchObject({ days: [D], raw: [[start, D - HOUR_MS], [D + DAY_MS + 5 * HOUR_MS, end + 1]] });
    expect((await plan()).hours).toHaveLength(6);

    const check = async (query: string, fields: SearchField[]) =>
      (await searchScope(t.runtime.clickhouse, { domainId: domain.id, query, fields, startDate: new Date(start), endDate: new Date(end) })).fields;
    /** The API's answer against a count over the lines; the check's answer. */
    const expectFound = async (query: string, fields: SearchField[], stored: Line[]) => {
      const want = stored.filter((l) => l.t >= start && l.t <= end && fields.some((f) => (f === 'userAgent' ? l.agent : f === 'referrer' ? l.referrer : '').toLowerCase().includes(query.toLowerCase())));
      const res = await search({ query, fields, startDate: new Date(start).toISOString(), endDate: new Date(end).toISOString(), limit: 100 }, admin, domain.id);
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      expect(res.body.data.pagination.total, `${query} in ${fields}`).toBe(want.length);
      expect(res.body.data.logs.map((e: { timestamp: string }) => Date.parse(e.timestamp))).toEqual(want.map((l) => l.t).reverse());
      return { found: want.length, fields: await check(query, fields) };
    };
    // In a built day, a built hour, the raw edge: the field stays, and the rows are found.
    expect(await expectFound('needle-day', ['userAgent'], all)).toEqual({ found: 1, fields: ['userAgent'] });
    expect(await expectFound('NEEDLE-HOUR', ['userAgent'], all)).toEqual({ found: 1, fields: ['userAgent'] });
    expect(await expectFound('needle-edge', ['userAgent'], all)).toEqual({ found: 1, fields: ['userAgent'] });
    expect(await expectFound('ref-needle-day', ['referrer', 'ipAddress'], all)).toEqual({ found: 1, fields: ['referrer', 'ipAddress'] });
    // Nowhere in the range (or only outside it): left out; a search without fields reads nothing.
    expect(await expectFound('needle-absent', ['userAgent'], all)).toEqual({ found: 0, fields: [] });
    expect(await expectFound('needle-outside', ['userAgent', 'referrer'], all)).toEqual({ found: 0, fields: [] });
    expect(await expectFound('ref-outside', ['ipAddress', 'referrer', 'userAgent'], all)).toEqual({ found: 0, fields: ['ipAddress'] });
    expect(await expectFound('ref-outside', ['url', 'referrer', 'userAgent'], all)).toEqual({ found: 0, fields: ['url'] });
    // Metacharacters are literal in the check as in the search, and reach it only as a bound parameter.
    expect(await expectFound('needle%', ['userAgent'], all)).toEqual({ found: 0, fields: [] });
    expect(await expectFound('needle_day', ['userAgent'], all)).toEqual({ found: 0, fields: [] });
    expect(await expectFound(`A'AGENT\\{X:STRING}%_"Q`, ['userAgent', 'referrer'], all)).toEqual({ found: 1, fields: ['userAgent'] });
    for (const query of ["it's", '\\\\', '{y:String}', "'; DROP TABLE access_rollups; --", '""', '%%', '__']) {
      expect(await expectFound(query, ['userAgent', 'referrer'], all), query).toEqual({ found: 0, fields: [] });
    }

    // A late line in the built day: that hour is read raw until it is built again, and its agent is found.
    const late: Line = { t: D + 10 * HOUR_MS + 4_000, agent: 'Needle-Late/1', referrer: 'https://ref-late.example/' };
    expect((await importText(t, domain.name, lineOf(late, 9_999))).inserted).toBe(1);
    expect((await plan()).raw).toContainEqual([D + 10 * HOUR_MS, D + 11 * HOUR_MS]);
    const stored = [...all, late].sort((a, b) => a.t - b.t);
    expect(await expectFound('needle-late', ['userAgent'], stored)).toEqual({ found: 1, fields: ['userAgent'] });
    expect(await expectFound('ref-late', ['referrer'], stored)).toEqual({ found: 1, fields: ['referrer'] });
    // Built again: from the rollups' keys.
    await buildRollups(t.runtime.clickhouse, { lookbackS: null, settleS: 1, budgetMs: 60_000, retentionDays: 90 });
    expect((await plan()).days).toEqual([D]);
    expect(await expectFound('needle-late', ['userAgent'], stored)).toEqual({ found: 1, fields: ['userAgent'] });
  });
});
