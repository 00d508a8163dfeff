/**
 * The search on `userAgent` and `referrer`, which have no text index: the access rows are read only
 * in the built days and hours whose rollup keys match and in the raw part of the range
 * (src/logs/search-fields.ts); `url` has its text index (sql/clickhouse/003) and is read over the
 * whole range. Every answer is compared with a brute-force scan of
 * access_logs and error_logs (positionCaseInsensitiveUTF8, not the search's escaped LIKE), page by
 * page: needles in built days and hours, in hours not built yet, in late lines, only in the raw
 * edges, with SQL and LIKE metacharacters, in any case, nowhere, and in several fields at once.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { call, type TestApp } from '../../support/app.js';
import { importText, newDomain, select } from '../../support/ingest.js';
import { accessLogLine, errorLogLine, generateAccess, generateErrors, LOG_FORMAT, type GeneratedAccess, type GeneratedError } from '../../support/logs.js';
import { appWithAdmin } from '../../support/auth.js';
import { buildRollups } from '../../../src/rollups/builder.js';
import { searchScope } from '../../../src/logs/search-fields.js';
import { planWindow, queryBuildState } from '../../../src/rollups/plan.js';
import { SEARCH_COLUMNS, searchEntries, type SearchField } from '../../../src/logs/store.js';
import { DAY_MS, HOUR_MS } from '../../../core/durations.js';
/** Three days ago (UTC): D is a whole day of the window below, with whole and partial hours on both sides. */
const D = Math.floor(Date.now() / DAY_MS) * DAY_MS - 3 * DAY_MS;
const START = D - 2 * HOUR_MS + 17_000;
const END = D + DAY_MS + 5 * HOUR_MS + 1_800_000;
/** An hour of D without rows until the test stores some: an hour never built. */
const GAP = D + 12 * HOUR_MS;

let t: TestApp;
let admin: string;

beforeAll(async () => ({ t, admin } = await appWithAdmin()));

afterAll(() => t?.close());

const build = () => buildRollups(t.runtime.clickhouse, { lookbackS: null, settleS: 1, budgetMs: 60_000, retentionDays: 90 });

let seq = 0;
/** An access entry at `at` with the generator's fields and `patch` over them. */
const accessAt = (at: number, patch: Partial<GeneratedAccess>): GeneratedAccess => ({ ...generateAccess(1, { seed: 1000 + ++seq })[0]!, timestamp: at, ...patch });

async function store(domain: string, access: GeneratedAccess[], errors: GeneratedError[] = []): Promise<void> {
  if (access.length > 0) expect((await importText(t, domain, access.map((e) => `${accessLogLine(e)}\n`).join(''), { format: LOG_FORMAT })).inserted).toBe(access.length);
  if (errors.length > 0) expect((await importText(t, domain, errors.map((e) => `${errorLogLine(e)}\n`).join(''), { type: 'error' })).inserted).toBe(errors.length);
}

/** The matches a scan of both tables finds, newest first (ties: higher id), as "type:id". */
async function bruteForce(domainId: number, query: string, fields: SearchField[], start: number, end: number): Promise<string[]> {
  const scan = (table: 'access_logs' | 'error_logs', type: string) => {
    const columns = [...new Set(fields.flatMap((f) => SEARCH_COLUMNS[table][f] ?? []))];
    const match = columns.length > 0 ? columns.map((c) => `positionCaseInsensitiveUTF8(${c}, {q:String}) > 0`).join(' OR ') : '0';
    return `SELECT '${type}' AS type, id, timestamp FROM ${table} WHERE domain_id = {d:UInt32}
      AND timestamp >= fromUnixTimestamp64Milli({s:Int64}, 'UTC') AND timestamp <= fromUnixTimestamp64Milli({e:Int64}, 'UTC') AND (${match})`;
  };
  const rows = await select<{ type: string; id: string }>(
    t.runtime.clickhouse,
    `SELECT type, id FROM (${scan('access_logs', 'access')} UNION ALL ${scan('error_logs', 'error')}) ORDER BY timestamp DESC, id DESC`,
    { d: domainId, q: query, s: start, e: end },
  );
  return rows.map((r) => `${r.type}:${Number(r.id)}`);
}

/** Every page of the API's answer at `limit`, checked page by page against the brute force; returns how many matched. */
async function expectAsScan(domainId: number, query: string, fields: SearchField[], options: { limit?: number; start?: number; end?: number } = {}): Promise<number> {
  const { limit = 1000, start = START, end = END } = options;
  const want = await bruteForce(domainId, query, fields, start, end);
  const pages = Math.ceil(want.length / limit);
  const got: string[] = [];
  for (let page = 1; page <= Math.max(pages, 1) + 1; page++) {
    const body = { query, fields, startDate: new Date(start).toISOString(), endDate: new Date(end).toISOString(), limit, page };
    const res = await call(t.app, 'POST', `/api/logs/domains/${domainId}/search`, { token: admin, body });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(res.body.data.pagination, `${query} in ${fields}, page ${page}`).toEqual({ page, limit, total: want.length, pages });
    got.push(...res.body.data.logs.map((e: { type: string; id: number }) => `${e.type}:${e.id}`));
  }
  expect(got, `${query} in ${fields}`).toEqual(want);
  return want.length;
}

/** searchScope's answer over the window. */
const scopeOf = (domainId: number, query: string, fields: SearchField[], start = START, end = END) =>
  searchScope(t.runtime.clickhouse, { domainId, query, fields, startDate: new Date(start), endDate: new Date(end) });

describe('search on userAgent and referrer from the rollups’ keys (src/logs/search-fields.ts)', () => {
  let domain: { id: number; name: string };
  const plan = async () => planWindow(START, END, await queryBuildState(t.runtime.clickhouse, domain.id, START, END));

  beforeAll(async () => {
    domain = await newDomain(t.runtime.db, 'url-keys');
    // The generator's entries (mostly one URL each: 150 distinct URLs an hour, beyond the 100 keys
    // of the short top lists) every 24 s from 3 hours before D to 8 hours after the next day began,
    // none in GAP; error entries every 10 minutes.
    const base = generateAccess(35 * 150, { seed: 17 })
      .map((e, i) => ({ ...e, timestamp: D - 3 * HOUR_MS + i * 24_000 + (i % 997) }))
      .filter((e) => e.timestamp < GAP || e.timestamp >= GAP + HOUR_MS);
    const errors = generateErrors(35 * 6, { seed: 17 }).map((e, i) => ({ ...e, timestamp: D - 3 * HOUR_MS + i * 600_000 + 5_000 }));
    const needles = [
      accessAt(D + 5 * HOUR_MS + 2_000, { userAgent: 'needle-day/A (x=1)' }), // in the built day
      accessAt(D + DAY_MS + 2 * HOUR_MS + 3_000, { userAgent: 'needle-hour/B' }), // in a built hour after it
      accessAt(D - 2 * HOUR_MS + 1_800_000, { userAgent: 'Needle-Edge-Start' }), // the partial hour at the start
      accessAt(D + DAY_MS + 5 * HOUR_MS + 600_000, { userAgent: 'needle-edge-end' }), // the partial hour at the end
      accessAt(D - 2 * HOUR_MS + 10_000, { userAgent: 'needle-outside/before' }), // before the start, in its hour
      accessAt(D + DAY_MS + 7 * HOUR_MS, { userAgent: 'needle-outside/after' }), // after the end
      // SQL and LIKE metacharacters, in one built hour only.
      accessAt(D + DAY_MS + 3 * HOUR_MS + 7_000, { userAgent: "meta/50%_Off\\x'q{y:String}" }),
      // An agent in an hour of the built day.
      accessAt(D + 8 * HOUR_MS + 2_000, { userAgent: 'zz-DayHour-agent' }),
      // One needle in three fields, each in another bucket; and one in url and an address.
      accessAt(D + 8 * HOUR_MS + 1_000, { url: '/ZZ-Multi/url' }),
      accessAt(D + DAY_MS + 1 * HOUR_MS + 2_000, { userAgent: 'zz-multi-agent/1.0' }),
      accessAt(D - 2 * HOUR_MS + 2_400_000, { referrer: 'https://zz-multi.example/' }),
      accessAt(D + 9 * HOUR_MS + 1_000, { url: '/ip/198.51.100.7' }),
      accessAt(D + 15 * HOUR_MS + 1_000, { ipAddress: '198.51.100.7' }),
      accessAt(D + DAY_MS + 4 * HOUR_MS + 1_000, { ipAddress: '198.51.100.7' }),
    ];
    const errorNeedle: GeneratedError = { ...errors[0]!, index: 9_999, timestamp: D + 20 * HOUR_MS, message: 'upstream zz-multi timed out' };
    await store(domain.name, [...base, ...needles].sort((a, b) => a.timestamp - b.timestamp), [...errors, errorNeedle]);
    await build();
  }, 120_000);

  // The referrer list leaves out the empty referrer, which no search needle (never empty) matches.
  it.each([
    ['agent', 'user_agent', '1'],
    ['referrer', 'referrer', "referrer != ''"],
    ['url', 'url', '1'],
  ])('a built bucket’s %s keys are every distinct %s of its rows, as stored (not a top list)', async (dim, column, kept) => {
    const keys = await select<{ span: string; bucket: string; keys: string[] }>(
      t.runtime.clickhouse,
      `SELECT toString(span) AS span, toString(toUnixTimestamp(bucket)) AS bucket, arraySort(groupUniqArray(key)) AS keys
       FROM access_rollups WHERE domain_id = {d:UInt32} AND dim = {dim:String} GROUP BY span, bucket`,
      { d: domain.id, dim },
    );
    const values = await select<{ span: string; bucket: string; keys: string[] }>(
      t.runtime.clickhouse,
      `SELECT s.1 AS span, toString(s.2) AS bucket, arraySort(groupUniqArray(${column})) AS keys FROM access_logs
       ARRAY JOIN [('hour', toUnixTimestamp(toStartOfHour(timestamp))), ('day', toUnixTimestamp(toStartOfDay(timestamp)))] AS s
       WHERE domain_id = {d:UInt32} AND ${kept} GROUP BY span, bucket`,
      { d: domain.id },
    );
    const byBucket = (rows: typeof keys) => new Map(rows.map((r) => [`${r.span} ${r.bucket}`, r.keys]));
    const built = byBucket(keys);
    const stored = byBucket(values);
    // Every hour and day with rows is built (the builder ran over all of them) …
    expect([...built.keys()].sort()).toEqual([...stored.keys()].sort());
    for (const [bucket, list] of stored) expect(built.get(bucket), bucket).toEqual(list);
    // … and, for the url of this data, holds more keys than a short top list would.
    if (dim === 'url') expect(Math.max(...keys.filter((r) => r.span === 'hour').map((r) => r.keys.length))).toBeGreaterThan(100);
  });

  it('built days and hours: only the buckets holding the needle are read, and the answer is the scan’s', async () => {
    expect(await plan()).toMatchObject({ days: [D], raw: [[START, D - HOUR_MS], [D + DAY_MS + 5 * HOUR_MS, END + 1]] });
    expect((await plan()).hours).toHaveLength(6);
    expect(await expectAsScan(domain.id, 'needle-day', ['userAgent'])).toBe(1);
    expect(await scopeOf(domain.id, 'needle-day', ['userAgent'])).toEqual({ fields: ['userAgent'], accessRanges: [[D, D + DAY_MS]] });
    expect(await expectAsScan(domain.id, 'needle-hour', ['userAgent'])).toBe(1);
    expect(await scopeOf(domain.id, 'needle-hour', ['userAgent'])).toEqual({ fields: ['userAgent'], accessRanges: [[D + DAY_MS + 2 * HOUR_MS, D + DAY_MS + 3 * HOUR_MS]] });
    // The store reads access rows in the ranges given only.
    const entries = (accessRanges: [number, number][]) =>
      searchEntries(t.runtime.clickhouse, { domainId: domain.id, query: 'needle', fields: ['userAgent'], startDate: new Date(START), endDate: new Date(END), accessRanges }, { offset: 0, limit: 100 });
    expect((await entries([[D, D + DAY_MS]])).rows.map((e) => (e.type === 'access' ? e.userAgent : e.message))).toEqual(['needle-day/A (x=1)']);
    expect(await entries([])).toEqual({ rows: [], total: 0 });
    // A needle in every bucket: pages across the buckets and the raw ranges.
    expect(await expectAsScan(domain.id, 'needle', ['userAgent'], { limit: 2 })).toBe(4);
    expect(await expectAsScan(domain.id, 'Chrome/1', ['userAgent'], { limit: 300 })).toBeGreaterThan(300);
  });

  it('a needle only in the raw edges: the partial hours at both ends are read', async () => {
    const raw = (await plan()).raw;
    expect(await expectAsScan(domain.id, 'needle-edge-start', ['userAgent'])).toBe(1);
    expect(await scopeOf(domain.id, 'needle-edge-start', ['userAgent'])).toEqual({ fields: ['userAgent'], accessRanges: raw });
    expect(await expectAsScan(domain.id, 'needle-edge-end', ['userAgent'])).toBe(1);
    expect(await expectAsScan(domain.id, 'needle-edge', ['userAgent'], { limit: 1 })).toBe(2);
    // Outside the range, in the start's own hour or after the end: not found.
    expect(await expectAsScan(domain.id, 'needle-outside', ['userAgent'])).toBe(0);
  });

  it('case-insensitive, in the keys as in the rows', async () => {
    for (const query of ['NEEDLE-DAY', 'needle-edge-START', 'zz-dayhour', 'ÜNÏCODE-agent', 'chrome/1']) {
      expect(await expectAsScan(domain.id, query, ['userAgent']), query).toBeGreaterThan(0);
    }
    expect((await scopeOf(domain.id, 'NEEDLE-HOUR/b', ['userAgent'])).accessRanges).toEqual([[D + DAY_MS + 2 * HOUR_MS, D + DAY_MS + 3 * HOUR_MS]]);
  });

  it('SQL and LIKE metacharacters are literal in the keys as in the rows', async () => {
    for (const query of ["50%_off\\x'q{y:string}", '%_OFF', "\\x'", '{y:String}', "'", '\\', '%', '_']) {
      expect(await expectAsScan(domain.id, query, ['userAgent']), query).toBeGreaterThan(0);
    }
    expect((await scopeOf(domain.id, "50%_off\\x'q", ['userAgent'])).accessRanges).toEqual([[D + DAY_MS + 3 * HOUR_MS, D + DAY_MS + 4 * HOUR_MS]]);
    // As LIKE syntax these would match that agent (or every agent); literally, none.
    for (const query of ['50_%', '50%\\_', '%%%', '____off', "x''q", '\\\\x']) {
      expect(await expectAsScan(domain.id, query, ['userAgent']), query).toBe(0);
      expect(await scopeOf(domain.id, query, ['userAgent']), query).toEqual({ fields: [], accessRanges: [] });
    }
  });

  it('a needle matching nothing reads nothing', async () => {
    expect(await expectAsScan(domain.id, 'zq7-nowhere', ['userAgent'])).toBe(0);
    expect(await scopeOf(domain.id, 'zq7-nowhere', ['userAgent'])).toEqual({ fields: [], accessRanges: [] });
    expect(await expectAsScan(domain.id, 'zq7-nowhere', ['userAgent', 'message'])).toBe(0);
    expect(await scopeOf(domain.id, 'zq7-nowhere', ['userAgent', 'message'])).toEqual({ fields: ['message'], accessRanges: [] });
    // url is searched through its index, over the whole range.
    expect(await scopeOf(domain.id, 'zq7-nowhere', ['url', 'message'])).toEqual({ fields: ['url', 'message'], accessRanges: null });
  });

  it('several fields: the buckets of each keyed field together; with url, ipAddress or message every matching row still found', async () => {
    // url in the day, userAgent in an hour after it, referrer in the raw edge, message in an error entry.
    expect(await expectAsScan(domain.id, 'zz-multi', ['userAgent', 'referrer'], { limit: 1 })).toBe(2);
    expect(await scopeOf(domain.id, 'zz-multi', ['userAgent', 'referrer'])).toEqual({
      fields: ['userAgent', 'referrer'],
      accessRanges: [[START, D - HOUR_MS], [D + DAY_MS + HOUR_MS, D + DAY_MS + 2 * HOUR_MS], [D + DAY_MS + 5 * HOUR_MS, END + 1]],
    });
    // url has its own index and may match in any hour: with it the whole range is read.
    expect(await expectAsScan(domain.id, 'zz-multi', ['url', 'userAgent', 'referrer'], { limit: 1 })).toBe(3);
    expect(await scopeOf(domain.id, 'zz-multi', ['url', 'userAgent', 'referrer'])).toEqual({ fields: ['url', 'userAgent', 'referrer'], accessRanges: null });
    expect(await expectAsScan(domain.id, 'zz-multi', ['url', 'message'])).toBe(2);
    expect(await expectAsScan(domain.id, 'zz-multi', ['message', 'userAgent'])).toBe(2);
    expect(await expectAsScan(domain.id, 'zz-multi', ['url', 'userAgent', 'referrer', 'message', 'ipAddress'], { limit: 2 })).toBe(4);
    // An address matches in any hour: with ipAddress the access rows of the whole range are read.
    expect(await expectAsScan(domain.id, '198.51.100.7', ['userAgent', 'ipAddress'], { limit: 1 })).toBe(2);
    expect(await scopeOf(domain.id, '198.51.100.7', ['userAgent', 'ipAddress'])).toEqual({ fields: ['ipAddress'], accessRanges: null });
    expect(await expectAsScan(domain.id, '198.51.100.7', ['url'])).toBe(1);
    // Common needles in several fields, page by page.
    expect(await expectAsScan(domain.id, 'e', ['url', 'userAgent', 'message'], { limit: 1000 })).toBeGreaterThan(2000);
    expect(await expectAsScan(domain.id, 'o', ['referrer', 'userAgent'], { limit: 700 })).toBeGreaterThan(1000);
  });

  it('an hour never built and late lines in built hours are read raw until built, then from the keys', async () => {
    await store(domain.name, [
      accessAt(GAP + 1_000, { userAgent: 'needle-unbuilt/C' }),
      accessAt(GAP + 2_000, { userAgent: 'plain' }),
      accessAt(D + DAY_MS + 2 * HOUR_MS + 600_000, { userAgent: 'needle-late/D' }), // the built hour of needle-hour
      accessAt(D + 5 * HOUR_MS + 900_000, { userAgent: 'needle-late/E', referrer: 'https://late-referrer.example/' }), // the built day
    ]);
    expect(await expectAsScan(domain.id, 'needle-unbuilt', ['userAgent'])).toBe(1);
    expect(await expectAsScan(domain.id, 'needle-late', ['userAgent'])).toBe(2);
    expect(await expectAsScan(domain.id, 'late-referrer', ['userAgent', 'referrer'])).toBe(1);
    expect(await expectAsScan(domain.id, 'needle', ['userAgent'], { limit: 3 })).toBe(7);
    const now = await plan();
    // The day is read hour by hour now: its new hour and the late lines' hours raw, the others built.
    expect(now.days).toEqual([]);
    expect(now.raw).toEqual(expect.arrayContaining([[GAP, GAP + HOUR_MS], [D + 5 * HOUR_MS, D + 6 * HOUR_MS], [D + DAY_MS + 2 * HOUR_MS, D + DAY_MS + 3 * HOUR_MS]]));
    // The day's other hours come from their keys: needle-day's hour is raw now, zz-dayhour's is built.
    expect((await scopeOf(domain.id, 'zz-dayhour', ['userAgent'])).accessRanges).toEqual([[D + 8 * HOUR_MS, D + 9 * HOUR_MS]]);
    expect(await expectAsScan(domain.id, 'zz-dayhour', ['userAgent'])).toBe(1);

    await build();
    expect(await plan()).toMatchObject({ days: [D], raw: [[START, D - HOUR_MS], [D + DAY_MS + 5 * HOUR_MS, END + 1]] });
    expect(await scopeOf(domain.id, 'needle-unbuilt', ['userAgent'])).toEqual({ fields: ['userAgent'], accessRanges: [[D, D + DAY_MS]] });
    expect(await expectAsScan(domain.id, 'needle-unbuilt', ['userAgent'])).toBe(1);
    expect(await expectAsScan(domain.id, 'needle-late', ['userAgent'])).toBe(2);
    expect(await expectAsScan(domain.id, 'needle', ['userAgent'], { limit: 3 })).toBe(7);
  });

  it('the API reads access rows only where the keys say: keys taken out of a built hour (the builder never does) hide its rows', async () => {
    expect(await expectAsScan(domain.id, 'needle', ['userAgent'])).toBe(7);
    // Both needles of the hour D + 1 day + 2 h; the other needles keep the userAgent field searched.
    await t.runtime.clickhouse.command({
      query: "DELETE FROM access_rollups WHERE domain_id = {d:UInt32} AND dim = 'agent' AND key IN ('needle-hour/B', 'needle-late/D') SETTINGS lightweight_deletes_sync = 2",
      query_params: { d: domain.id },
    });
    const res = await call(t.app, 'POST', `/api/logs/domains/${domain.id}/search`, {
      token: admin,
      body: { query: 'needle', fields: ['userAgent'], startDate: new Date(START).toISOString(), endDate: new Date(END).toISOString() },
    });
    expect(res.body.data.pagination.total).toBe(5);
    expect(res.body.data.logs.map((e: { userAgent: string }) => e.userAgent)).not.toContain('needle-hour/B');
  });
});

describe('search on userAgent over many matching buckets', () => {
  it('more runs of matching hours than ranges read: neighbouring ones are read together, nothing is lost', async () => {
    const domain = await newDomain(t.runtime.db, 'url-runs');
    const first = D - 7 * DAY_MS;
    const days = 6;
    // Every hour of six days holds a row; every even hour a needle too.
    const lines: GeneratedAccess[] = [];
    for (let h = 0; h < days * 24; h++) {
      lines.push(accessAt(first + h * HOUR_MS + 60_000, { url: `/h/${h}` }));
      if (h % 2 === 0) lines.push(accessAt(first + h * HOUR_MS + 120_000, { userAgent: `zz-even/${h}` }));
    }
    await store(domain.name, lines);
    await build();
    // A late line in an odd hour of each day: each day is then read hour by hour.
    await store(domain.name, Array.from({ length: days }, (_, d) => accessAt(first + d * DAY_MS + HOUR_MS + 180_000, { url: '/late' })));
    const [start, end] = [first - 1_800_000, first + days * DAY_MS + 1_800_000];
    expect(await expectAsScan(domain.id, 'zz-even', ['userAgent'], { start, end, limit: 10 })).toBe(days * 12);
    expect(await expectAsScan(domain.id, 'zz-even/1', ['userAgent'], { start, end })).toBeGreaterThan(0);
    const plan = planWindow(start, end, await queryBuildState(t.runtime.clickhouse, domain.id, start, end));
    expect(plan.days).toEqual([]);
    expect(plan.hours).toHaveLength(days * 23);
    // 72 runs of one hour, read as 64 ranges.
    expect((await scopeOf(domain.id, 'ZZ-EVEN', ['userAgent'], start, end)).accessRanges).toHaveLength(64);
  });
});
