/**
 * GET /api/logs/domains/:domainId/access and /error: every filter and combinations against an
 * independent computation over the generated lines (loaded through importFiles), pagination,
 * order and ties, date ranges to the millisecond, 422s, and who may read what.
 */
import { BlockList, isIPv4 } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { call, createUserAndLogin, startTestApp, type TestApp } from '../../support/app.js';
import { buildRollups } from '../../../src/rollups/builder.js';
import { importText } from '../../support/ingest.js';
import { accessLogLine, apiShape, generateAccess, LOG_FORMAT, newestFirst, seedLogs, seedTwoOwners, type GeneratedAccess, type GeneratedError, type SeededLogs } from '../../support/logs.js';
import { ISO_MS } from '../../support/auth.js';
import { HOUR_MS } from '../../../core/durations.js';

let t: TestApp;
let admin: string;
let owner: { id: number; token: string };
let other: { id: number; token: string };
let seeded: SeededLogs;
let othersDomain: SeededLogs;

beforeAll(async () => {
  t = await startTestApp();
  ({ admin, owner, other, seeded, othersDomain } = await seedTwoOwners(t, { access: 900, errors: 300 }, { access: 30, errors: 10 }));
});

afterAll(async () => {
  await t?.close();
});

type Query = Record<string, string | number>;
const qs = (query: Query) => new URLSearchParams(Object.entries(query).map(([k, v]) => [k, String(v)])).toString();

async function access(query: Query = {}, token = owner.token, domainId = seeded.domain.id) {
  return call(t.app, 'GET', `/api/logs/domains/${domainId}/access?${qs(query)}`, { token });
}
async function errors(query: Query = {}, token = owner.token, domainId = seeded.domain.id) {
  return call(t.app, 'GET', `/api/logs/domains/${domainId}/error?${qs(query)}`, { token });
}

/** The entries without their ids (which ingest assigns), after checking the ids. */
function withoutIds(logs: { id: number }[]): Record<string, unknown>[] {
  for (const e of logs) expect(Number.isSafeInteger(e.id) && e.id > 0).toBe(true);
  return logs.map(({ id: _id, ...rest }) => rest);
}

/** Asks with limit 1000 and compares with the expected entries, order included. */
async function expectAccess(query: Query, expected: GeneratedAccess[]) {
  const res = await access({ limit: 1000, ...query });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  const want = newestFirst(expected);
  expect(res.body.data.pagination).toEqual({ page: 1, limit: 1000, total: want.length, pages: Math.ceil(want.length / 1000) });
  expect(withoutIds(res.body.data.logs)).toEqual(want.map(apiShape));
  return res.body.data.logs as { id: number; timestamp: string }[];
}

async function expectErrors(query: Query, expected: GeneratedError[]) {
  const res = await errors({ limit: 1000, ...query });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  const want = newestFirst(expected);
  expect(res.body.data.pagination.total).toBe(want.length);
  expect(withoutIds(res.body.data.logs)).toEqual(want.map(apiShape));
}

function expect422(res: { status: number; body: any }, field: string) {
  expect(res.status, JSON.stringify(res.body)).toBe(422);
  expect(res.body.success).toBe(false);
  expect(res.body.error).toBe('Validation failed');
  expect(typeof res.body.details?.[field], JSON.stringify(res.body)).toBe('string');
}

// Independent matchers.
const inCidr = (ip: string, net: string, prefix: number) => {
  const list = new BlockList();
  list.addSubnet(net, prefix, isIPv4(net) ? 'ipv4' : 'ipv6');
  return list.check(ip, isIPv4(ip) ? 'ipv4' : 'ipv6');
};
const globMatch = (glob: string, text: string) =>
  new RegExp(`^${glob.split('*').map((part) => part.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')).join('.*')}$`, 's').test(text);

describe('access listing', () => {
  it('returns every entry with the specification fields, newest first, ties by higher id', async () => {
    const logs = await expectAccess({}, seeded.access);
    for (const e of logs) expect(e.timestamp).toMatch(ISO_MS);
    // Ties: entries sharing a timestamp come by descending id.
    for (let i = 1; i < logs.length; i++) {
      const [a, b] = [logs[i - 1]!, logs[i]!];
      expect(a.timestamp > b.timestamp || (a.timestamp === b.timestamp && a.id > b.id)).toBe(true);
    }
    expect(logs.some((e, i) => i > 0 && e.timestamp === logs[i - 1]!.timestamp)).toBe(true);
    // responseTime null where the line had no $request_time, a number of ms otherwise.
    expect(seeded.access.some((e) => e.responseTime === null)).toBe(true);
  });

  it('defaults: page 1, limit 20', async () => {
    const res = await access();
    expect(res.status).toBe(200);
    expect(res.body.success).toBe(true);
    expect(res.body.data.pagination).toEqual({ page: 1, limit: 20, total: 900, pages: 45 });
    expect(withoutIds(res.body.data.logs)).toEqual(newestFirst(seeded.access).slice(0, 20).map(apiShape));
  });

  it('statusCode: exact or class', async () => {
    await expectAccess({ statusCode: 404 }, seeded.access.filter((e) => e.statusCode === 404));
    await expectAccess({ statusCode: '5xx' }, seeded.access.filter((e) => e.statusCode >= 500 && e.statusCode < 600));
    await expectAccess({ statusCode: '2XX' }, seeded.access.filter((e) => e.statusCode >= 200 && e.statusCode < 300));
    await expectAccess({ statusCode: 418 }, []);
    for (const bad of ['600', '5x', 'abc', '99', '5xxx', '404.0', '']) expect422(await access({ statusCode: bad }), 'statusCode');
  });

  it('ipAddress: an address, or a CIDR range of IPv4 or IPv6', async () => {
    const v4 = seeded.access.find((e) => isIPv4(e.ipAddress))!.ipAddress;
    await expectAccess({ ipAddress: v4 }, seeded.access.filter((e) => e.ipAddress === v4));
    const v6 = seeded.access.find((e) => e.ipAddress.startsWith('2001:db8::'))!.ipAddress;
    await expectAccess({ ipAddress: v6 }, seeded.access.filter((e) => e.ipAddress === v6));
    // Another spelling of the same IPv6 address.
    const expanded = `2001:0db8:0000:0000:0000:0000:0000:${v6.split('::')[1]!.padStart(4, '0')}`;
    await expectAccess({ ipAddress: expanded.toUpperCase() }, seeded.access.filter((e) => e.ipAddress === v6));
    for (const [net, prefix] of [
      ['10.0.0.0', 16],
      ['10.0.2.0', 23],
      ['192.168.1.128', 25],
      ['0.0.0.0', 0],
      ['2001:db8::', 48],
      ['2001:db8::', 32],
      ['fe80::', 10],
    ] as const) {
      const expected = seeded.access.filter((e) => isIPv4(e.ipAddress) === isIPv4(net) && inCidr(e.ipAddress, net, prefix));
      expect(expected.length).toBeGreaterThan(0);
      await expectAccess({ ipAddress: `${net}/${prefix}` }, expected);
    }
    // IPv4 addresses are stored as IPv4-mapped IPv6 (::ffff:a.b.c.d): ::/0 holds every address.
    await expectAccess({ ipAddress: '::/0' }, seeded.access);
    await expectAccess({ ipAddress: '::ffff:10.0.0.0/112' }, seeded.access.filter((e) => isIPv4(e.ipAddress) && inCidr(e.ipAddress, '10.0.0.0', 16)));
    // Host bits of the given address are ignored.
    await expectAccess({ ipAddress: '10.0.1.77/16' }, seeded.access.filter((e) => isIPv4(e.ipAddress) && inCidr(e.ipAddress, '10.0.0.0', 16)));
    for (const bad of ['10.0.0.0/33', 'abc', '2001:db8::/129', '1.2.3', '10.0.0.0/', '10.0.0.0/-1', '1.2.3.4/8/8', "1.2.3.4' OR 1=1"]) {
      expect422(await access({ ipAddress: bad }), 'ipAddress');
    }
  });

  it('url: a case-sensitive substring, metacharacters taken literally', async () => {
    for (const needle of ['/api/v1', "it's", '100%_off', '%', '_', 'a\\b', '{x:String}', 'Main.JS', 'main.js', 'café', '?q=3', '\\']) {
      await expectAccess({ url: needle }, seeded.access.filter((e) => e.url.includes(needle)));
    }
    expect(seeded.access.some((e) => e.url.includes('Main.JS'))).toBe(true);
    await expectAccess({ url: 'nothing-like-this' }, []);
  });

  it('url with *: a glob over the whole URL, * matching anything including /', async () => {
    for (const glob of ['/item/*', '*?q=3', '/files/a\\b/*', '/search?q=100%_off*', '/star/*literal*/*', '*', '/api/*/orders/*', '*/1?q=*', '/item/1*', '*_*', '*%*', "/quote/it's/*", '/tpl/{x:String}/*', '/Static/*']) {
      const expected = seeded.access.filter((e) => globMatch(glob, e.url));
      await expectAccess({ url: glob }, expected);
    }
    // Whole URL: a glob without a leading * is anchored at the start, without a trailing one at the end.
    await expectAccess({ url: 'item/*' }, []);
    await expectAccess({ url: '/item/1' + '*' + '?q' }, []);
  });

  it('method: case-insensitive', async () => {
    await expectAccess({ method: 'get' }, seeded.access.filter((e) => e.method === 'GET'));
    await expectAccess({ method: 'Post' }, seeded.access.filter((e) => e.method === 'POST'));
    for (const bad of ['G E T', '', 'GET;DROP', 'x'.repeat(40)]) expect422(await access({ method: bad }), 'method');
  });

  it('combinations of filters', async () => {
    await expectAccess(
      { statusCode: '4xx', method: 'GET', ipAddress: '10.0.0.0/8', url: '/item/*' },
      seeded.access.filter((e) => e.statusCode >= 400 && e.statusCode < 500 && e.method === 'GET' && isIPv4(e.ipAddress) && inCidr(e.ipAddress, '10.0.0.0', 8) && globMatch('/item/*', e.url)),
    );
    await expectAccess(
      { statusCode: 200, url: '/', ipAddress: '2001:db8::/32' },
      seeded.access.filter((e) => e.statusCode === 200 && e.url.includes('/') && !isIPv4(e.ipAddress) && inCidr(e.ipAddress, '2001:db8::', 32)),
    );
  });

  it('dates: both ends included to the millisecond; a returned timestamp round-trips as startDate and endDate', async () => {
    const sorted = newestFirst(seeded.access);
    const from = sorted[600]!.timestamp;
    const to = sorted[100]!.timestamp;
    const between = (a: number, b: number) => seeded.access.filter((e) => e.timestamp >= a && e.timestamp <= b);
    await expectAccess({ startDate: new Date(from).toISOString(), endDate: new Date(to).toISOString() }, between(from, to));
    // Each returned timestamp, as both ends, gives its own entry (and its ties).
    const page = (await access({ limit: 5 })).body.data.logs as { id: number; timestamp: string }[];
    for (const e of page) {
      const res = await access({ startDate: e.timestamp, endDate: e.timestamp });
      expect(res.body.data.logs.map((x: { id: number }) => x.id)).toContain(e.id);
      expect(res.body.data.logs.every((x: { timestamp: string }) => x.timestamp === e.timestamp)).toBe(true);
    }
    // One millisecond past an entry leaves it out.
    await expectAccess({ startDate: new Date(to + 1).toISOString(), endDate: new Date(to + 1).toISOString() }, []);
    // Other ISO 8601 forms: an offset, a comma, no seconds, a date alone (the whole day).
    const shifted = new Date(from + 2 * 3_600_000).toISOString().replace('Z', '+02:00');
    await expectAccess({ startDate: shifted }, seeded.access.filter((e) => e.timestamp >= from));
    const day = new Date(from).toISOString().slice(0, 10);
    const dayStart = Date.parse(`${day}T00:00:00Z`);
    await expectAccess({ endDate: day }, seeded.access.filter((e) => e.timestamp <= dayStart + 86_400_000 - 1));
    await expectAccess({ startDate: new Date(from).toISOString().replace('.', ',') }, seeded.access.filter((e) => e.timestamp >= from));
    for (const bad of ['yesterday', '2026-02-30', '2026-13-01T00:00:00Z', '1763709330']) expect422(await access({ startDate: bad }), 'startDate');
    expect422(await access({ startDate: new Date(to).toISOString(), endDate: new Date(from).toISOString() }), 'endDate');
  });
});

describe('pagination', () => {
  it('pages concatenate to the whole list; total and pages exact; ties split across pages', async () => {
    // limit 2 against three entries per timestamp: page boundaries fall inside ties.
    for (const [query, expected] of [
      [{}, seeded.access],
      [{ statusCode: '2xx' }, seeded.access.filter((e) => e.statusCode < 300)],
    ] as const) {
      for (const limit of [2, 7]) {
        const want = newestFirst(expected).map(apiShape);
        const pages = Math.ceil(want.length / limit);
        for (let page = 1; page <= pages; page++) {
          // limit 2: the first 40 and the last 5 pages (the middle is covered by limit 7).
          if (limit === 2 && page > 40 && page <= pages - 5) continue;
          const res = await access({ ...query, limit, page });
          expect(res.status).toBe(200);
          expect(res.body.data.pagination).toEqual({ page, limit, total: want.length, pages });
          expect(withoutIds(res.body.data.logs)).toEqual(want.slice((page - 1) * limit, page * limit));
        }
      }
    }
  });

  it('deep pages of every kind return the right rows', async () => {
    const want = newestFirst(seeded.access).map(apiShape);
    for (const [page, limit] of [
      [2, 1],
      [450, 2],
      [899, 1],
      [900, 1],
      [9, 100],
      [3, 333],
    ] as const) {
      const res = await access({ page, limit });
      expect(withoutIds(res.body.data.logs)).toEqual(want.slice((page - 1) * limit, page * limit));
    }
    const fives = newestFirst(seeded.access.filter((e) => e.statusCode >= 500)).map(apiShape);
    const res = await access({ statusCode: '5xx', page: 3, limit: 10 });
    expect(withoutIds(res.body.data.logs)).toEqual(fives.slice(20, 30));
  });

  it('a page past the end is empty and still counts', async () => {
    for (const query of [{}, { method: 'get' }] as Query[]) {
      const res = await access({ ...query, page: 1000, limit: 50 });
      expect(res.status).toBe(200);
      expect(res.body.data.logs).toEqual([]);
      const total = query.method ? seeded.access.filter((e) => e.method === 'GET').length : 900;
      expect(res.body.data.pagination).toEqual({ page: 1000, limit: 50, total, pages: Math.ceil(total / 50) });
    }
    const empty = await access({ url: 'no-such-url', page: 3 });
    expect(empty.body.data).toEqual({ logs: [], pagination: { page: 3, limit: 20, total: 0, pages: 0 } });
  });

  it('page and limit out of range → 422', async () => {
    for (const page of ['0', '-1', 'abc', '1.5', '1e3']) expect422(await access({ page }), 'page');
    for (const limit of ['0', '1001', 'abc', '-5']) expect422(await access({ limit }), 'limit');
    expect((await access({ limit: 1000 })).status).toBe(200);
  });
});

describe('status filters counted per hour (src/logs/hour-counts.ts)', () => {
  /** Entries in bursts over many hours: 120 per burst, bursts 50 minutes apart, from 30 hours ago. */
  const bursts = (seed: number, count: number, from: number) =>
    Array.from({ length: count }, (_, i) => generateAccess(120, { seed: seed + i, start: from + i * 50 * 60_000 })).flat();

  it('totals and pages of status filters are exact with the rollups unbuilt, built, and after late lines', async () => {
    const from = Math.floor((Date.now() - 30 * HOUR_MS) / HOUR_MS) * HOUR_MS + 7_000;
    const entries = bursts(100, 30, from);
    const domain = await seedLogs(t, { access: entries, ownerId: owner.id, tag: 'hourly' });
    const list = (query: Query) => access(query, owner.token, domain.domain.id);
    const check = async (all: GeneratedAccess[]) => {
      for (const [query, keep] of [
        [{ statusCode: '5xx' }, (e: GeneratedAccess) => e.statusCode >= 500],
        [{ statusCode: '2xx' }, (e: GeneratedAccess) => e.statusCode >= 200 && e.statusCode < 300],
        [{ statusCode: 404 }, (e: GeneratedAccess) => e.statusCode === 404],
        // A range with partial hours at both ends.
        [
          { statusCode: '2xx', startDate: new Date(from + 5 * HOUR_MS + 1234).toISOString(), endDate: new Date(from + 20 * HOUR_MS - 999).toISOString() },
          (e: GeneratedAccess) => e.statusCode < 300 && e.timestamp >= from + 5 * HOUR_MS + 1234 && e.timestamp <= from + 20 * HOUR_MS - 999,
        ],
      ] as const) {
        const want = newestFirst(all.filter(keep)).map(apiShape);
        expect(want.length).toBeGreaterThan(30);
        // Pages of 37: every page, their starts falling all over the hours, plus one past the end.
        const limit = 37;
        const pages = Math.ceil(want.length / limit);
        for (const page of [...Array.from({ length: pages }, (_, i) => i + 1), pages + 1]) {
          const res = await list({ ...query, limit, page });
          expect(res.status).toBe(200);
          expect(res.body.data.pagination, `${JSON.stringify(query)} page ${page}`).toEqual({ page, limit, total: want.length, pages });
          expect(withoutIds(res.body.data.logs), `${JSON.stringify(query)} page ${page}`).toEqual(want.slice((page - 1) * limit, page * limit));
        }
      }
    };
    await check(entries);
    const built = await buildRollups(t.runtime.clickhouse, { lookbackS: null, settleS: 1, budgetMs: 60_000, retentionDays: 90 });
    expect(built.hours).toBeGreaterThan(20);
    await check(entries);
    // Late lines into hours already built: those hours are counted from the raw rows again.
    const late = bursts(500, 5, from + 3 * HOUR_MS + 60_000);
    const summary = await importText(t, domain.domain.name, late.map((e) => `${accessLogLine(e)}\n`).join(''), { format: LOG_FORMAT });
    expect(summary.inserted).toBe(late.length);
    await check([...entries, ...late]);
  }, 180_000);
});

describe('unfiltered pages read from the newest hours that hold them (access_hour_rows as a hint)', () => {

  it('pages stay exact when the hour counts are right, and when they claim rows that do not exist', async () => {
    const from = Math.floor((Date.now() - 20 * HOUR_MS) / HOUR_MS) * HOUR_MS + 11_000;
    const entries = Array.from({ length: 16 }, (_, i) => generateAccess(40, { seed: 900 + i, start: from + i * 70 * 60_000 })).flat();
    const domain = await seedLogs(t, { access: entries, ownerId: owner.id, tag: 'hinted' });
    const list = (query: Query) => access(query, owner.token, domain.domain.id);
    const check = async () => {
      const end = from + 10 * HOUR_MS + 555;
      for (const [query, keep] of [
        [{}, () => true],
        [{ endDate: new Date(end).toISOString() }, (e: GeneratedAccess) => e.timestamp <= end],
      ] as const) {
        const want = newestFirst(entries.filter(keep)).map(apiShape);
        const limit = 23;
        const pages = Math.ceil(want.length / limit);
        for (const page of [...Array.from({ length: pages }, (_, i) => i + 1), pages + 1]) {
          const res = await list({ ...query, limit, page });
          expect(res.body.data.pagination, `${JSON.stringify(query)} page ${page}`).toEqual({ page, limit, total: want.length, pages });
          expect(withoutIds(res.body.data.logs), `${JSON.stringify(query)} page ${page}`).toEqual(want.slice((page - 1) * limit, page * limit));
        }
      }
    };
    await check();
    // Counts of rows that are not there (access_hour_rows is a hint for the listing, never its
    // answer): in the newest hours, so every page's bound comes out too new and must be widened.
    const hours = [...new Set(entries.map((e) => Math.floor(e.timestamp / HOUR_MS) * HOUR_MS))].sort((a, b) => b - a);
    for (const hour of hours.slice(0, 8)) {
      await t.runtime.clickhouse.insert({
        table: 'access_hour_rows',
        values: [{ domain_id: domain.domain.id, hour: new Date(hour).toISOString().slice(0, 19).replace('T', ' '), rows: 500, last_insert: new Date().toISOString().replace('T', ' ').slice(0, 23) }],
        format: 'JSONEachRow',
      });
    }
    await check();
  }, 120_000);
});

describe('error listing', () => {
  it('returns every entry with level, message and context, newest first, ties by higher id', async () => {
    await expectErrors({}, seeded.errors);
    const res = await errors({ limit: 3 });
    for (const e of res.body.data.logs) {
      expect(Object.keys(e).sort()).toEqual(['context', 'id', 'level', 'message', 'timestamp']);
      expect(e.timestamp).toMatch(ISO_MS);
      expect(typeof e.context).toBe('object');
    }
  });

  it('level filter; dates; pagination', async () => {
    for (const level of ['error', 'warn', 'info', 'debug']) await expectErrors({ level }, seeded.errors.filter((e) => e.level === level));
    for (const bad of ['notice', 'ERROR', 'crit', '']) expect422(await errors({ level: bad }), 'level');
    const sorted = newestFirst(seeded.errors);
    const [to, from] = [sorted[10]!.timestamp, sorted[200]!.timestamp];
    await expectErrors(
      { startDate: new Date(from).toISOString(), endDate: new Date(to).toISOString(), level: 'warn' },
      seeded.errors.filter((e) => e.timestamp >= from && e.timestamp <= to && e.level === 'warn'),
    );
    const want = sorted.map(apiShape);
    const page = await errors({ page: 14, limit: 11 });
    expect(page.body.data.pagination).toEqual({ page: 14, limit: 11, total: 300, pages: 28 });
    expect(withoutIds(page.body.data.logs)).toEqual(want.slice(143, 154));
    const warns = sorted.filter((e) => e.level === 'warn').map(apiShape);
    const warnPage = await errors({ level: 'warn', page: 2, limit: 5 });
    expect(withoutIds(warnPage.body.data.logs)).toEqual(warns.slice(5, 10));
    expect422(await errors({ startDate: new Date(to).toISOString(), endDate: new Date(from).toISOString() }), 'endDate');
  });
});

describe('access control', () => {
  const paths = () => [`/api/logs/domains/${seeded.domain.id}/access`, `/api/logs/domains/${seeded.domain.id}/error`];

  it('401 without or with a bad token', async () => {
    for (const path of paths()) {
      for (const token of [undefined, 'not-a-token']) {
        const res = await call(t.app, 'GET', path, token ? { token } : {});
        expect(res.status).toBe(401);
        expect(res.body).toEqual({ success: false, error: 'Authentication required' });
        expect(res.headers.get('www-authenticate')).toBe('Bearer');
      }
    }
  });

  it("another owner's domain answers 404 exactly like an unknown one; admins see every domain", async () => {
    for (const kind of ['access', 'error']) {
      const foreign = await call(t.app, 'GET', `/api/logs/domains/${othersDomain.domain.id}/${kind}`, { token: owner.token });
      const unknown = await call(t.app, 'GET', `/api/logs/domains/987654/${kind}`, { token: owner.token });
      expect(foreign.status).toBe(404);
      expect(foreign.body).toEqual({ success: false, error: 'Domain not found' });
      expect(unknown.body).toEqual(foreign.body);
      // Even with filters that would fail validation-free lookups, the answer is the same.
      const filtered = await call(t.app, 'GET', `/api/logs/domains/${othersDomain.domain.id}/${kind}?page=2`, { token: owner.token });
      expect(filtered.body).toEqual(foreign.body);
      const mine = await call(t.app, 'GET', `/api/logs/domains/${othersDomain.domain.id}/${kind}`, { token: other.token });
      expect(mine.status).toBe(200);
      const asAdmin = await call(t.app, 'GET', `/api/logs/domains/${seeded.domain.id}/${kind}`, { token: admin });
      expect(asAdmin.status).toBe(200);
    }
    // The other domain's rows never leak into this one.
    const res = await access({ limit: 1000 });
    expect(res.body.data.pagination.total).toBe(900);
    const otherRes = await access({ limit: 1000 }, other.token, othersDomain.domain.id);
    expect(withoutIds(otherRes.body.data.logs)).toEqual(newestFirst(othersDomain.access).map(apiShape));
  });

  it('403 without logs:read on a visible domain; 404 still first for an invisible one', async () => {
    const reader = await createUserAndLogin(t.app, admin, { email: 'noread@example.com' });
    const own = await seedLogs(t, { access: 3, ownerId: reader.id });
    const res = await call(t.app, 'PUT', `/api/users/${reader.id}/permissions`, { token: admin, body: { permissions: [] } });
    expect(res.status).toBe(200);
    for (const kind of ['access', 'error']) {
      const denied = await call(t.app, 'GET', `/api/logs/domains/${own.domain.id}/${kind}`, { token: reader.token });
      expect(denied.status).toBe(403);
      expect(denied.body).toEqual({ success: false, error: 'Insufficient permissions' });
      const hidden = await call(t.app, 'GET', `/api/logs/domains/${seeded.domain.id}/${kind}`, { token: reader.token });
      expect(hidden.status).toBe(404);
    }
  });

  it('a domain id that is no number → 422', async () => {
    for (const id of ['abc', '0', '-1', '99999999999']) {
      const res = await call(t.app, 'GET', `/api/logs/domains/${id}/access`, { token: owner.token });
      expect422(res, 'domainId');
    }
  });
});

describe('responses without $request_time and the OpenAPI document', () => {
  it('lists the routes in /api/openapi.json', async () => {
    const res = await call(t.app, 'GET', '/api/openapi.json');
    expect(res.status).toBe(200);
    const paths = res.body.paths as Record<string, Record<string, unknown>>;
    expect(paths['/api/logs/domains/{domainId}/access']?.get).toBeDefined();
    expect(paths['/api/logs/domains/{domainId}/error']?.get).toBeDefined();
    expect(paths['/api/logs/domains/{domainId}/search']?.post).toBeDefined();
    const params = (paths['/api/logs/domains/{domainId}/access']!.get as { parameters: { name: string }[] }).parameters.map((p) => p.name);
    expect(params).toEqual(expect.arrayContaining(['domainId', 'page', 'limit', 'startDate', 'endDate', 'statusCode', 'ipAddress', 'url', 'method']));
  });
});
