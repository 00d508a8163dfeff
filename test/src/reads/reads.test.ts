/**
 * A request's reads under hostile use (src/reads/, issue 29): what the query endpoint refuses
 * before any SQL, the limits every read statement carries and the answers when one is exceeded,
 * and the fair queue between users through the real app and engine.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { selectRows } from '../../../core/db/clickhouse.js';
import { createApp } from '../../../src/app.js';
import { ApiError } from '../../../src/http/errors.js';
import { createReads, limitedClient } from '../../../src/reads/client.js';
import { ADMIN_EMAIL, ADMIN_PASSWORD, call, createUserAndLogin, login, startTestApp, type TestApp } from '../../support/app.js';
import { until } from '../../support/ingest.js';
import { seedLogs, type SeededLogs } from '../../support/logs.js';

let t: TestApp;
let alice: { id: number; token: string };
let bob: { id: number; token: string };
let alicesDomain: SeededLogs;
let bobsDomain: SeededLogs;

beforeAll(async () => {
  t = await startTestApp();
  const admin = (await login(t.app, ADMIN_EMAIL, ADMIN_PASSWORD)).accessToken;
  alice = await createUserAndLogin(t.app, admin, { email: 'alice@example.com' });
  bob = await createUserAndLogin(t.app, admin, { email: 'bob@example.com' });
  alicesDomain = await seedLogs(t, { access: 6000, ownerId: alice.id, tag: 'alice' });
  bobsDomain = await seedLogs(t, { access: 300, ownerId: bob.id, tag: 'bob' });
}, 120_000);

afterAll(async () => {
  await t?.close();
});

const query = (token: string, body: unknown) => call(t.app, 'POST', '/api/logs/query', { token, body });
/** Every row the domains hold: the window from before the retention (clamped to it) to now. */
const retained = { dateRange: 'custom', startDate: '2000-01-01T00:00:00Z' };

/** `n` glob patterns of `chars` characters with `wildcards` `*` each, distinct by `tag`. */
const globs = (n: number, chars: number, wildcards: number, tag = '') =>
  Array.from({ length: n }, (_, i) => {
    const piece = Math.max(1, Math.floor(chars / (wildcards + 1)) - 1);
    return `${tag}${i}${Array.from({ length: wildcards + 1 }, () => 'a'.repeat(piece)).join('*')}`.slice(0, chars);
  });

describe('POST /api/logs/query: what cannot be answered cheaply is refused before any SQL', () => {
  it('an empty orderBy is no ordering given: the default order', async () => {
    const body = { domains: [alicesDomain.domain.id], metrics: ['requests'], dimensions: ['statusCode'], ...retained };
    const empty = await query(alice.token, { ...body, orderBy: [] });
    expect(empty.status, JSON.stringify(empty.body)).toBe(200);
    expect(empty.body.data.results).toEqual((await query(alice.token, body)).body.data.results);
    // Without dimensions too (the first metric, descending).
    expect((await query(alice.token, { domains: [alicesDomain.domain.id], metrics: ['requests'], orderBy: [], ...retained })).status).toBe(200);
  });

  const refused: [string, Record<string, unknown>, string, RegExp][] = [
    ['15 glob filters of 1,000 short patterns each', { filters: Array.from({ length: 15 }, (_, f) => ['glob', 'url', globs(1000, 8, 1, `f${f}-`)]) }, 'filters', /contains, glob and cidr values together, more than 100/],
    ['one glob filter of 14 values of 65,536 characters', { filters: [['glob', 'url', globs(14, 65_536, 3)]] }, 'filters', /characters of contains and glob values together, more than 10000/],
    ['1,000 userAgent globs of 300 characters with 100 wildcards', { filters: [['glob', 'userAgent', globs(1000, 300, 100)]] }, 'filters', /more than 100/],
    ['101 cidr ranges', { filters: [['cidr', 'ipAddress', Array.from({ length: 101 }, (_, i) => `10.${i}.0.0/16`)]] }, 'filters', /more than 100/],
    ['values of 100,001 characters together', { filters: [['is', 'url', Array.from({ length: 4 }, (_, i) => `/${i}${'x'.repeat(25_000)}`)]] }, 'filters', /characters of values together, more than 100000/],
    ['5 dimensions', { dimensions: ['url', 'ipAddress', 'userAgent', 'referrer', 'statusCode'] }, 'dimensions', /at most 4/],
  ];

  for (const [label, fields, field, message] of refused) {
    it(`${label}: 422 on ${field}, at once`, async () => {
      const started = performance.now();
      const res = await query(alice.token, { domains: [alicesDomain.domain.id], metrics: ['requests'], ...retained, ...fields });
      expect(res.status, JSON.stringify(res.body).slice(0, 300)).toBe(422);
      expect(res.body.details[field]).toMatch(message);
      // Refused by validation: no statement reached the engine (a statement of these took seconds).
      expect(t.runtime.reads.scheduler.counts).toEqual({ running: 0, waiting: 0 });
      expect(performance.now() - started).toBeLessThan(5_000);
    });
  }

  it('up to the limits the request is answered: 100 globs of 100 characters in all', async () => {
    const res = await query(alice.token, { domains: [alicesDomain.domain.id], metrics: ['requests'], ...retained, filters: [['glob', 'url', globs(100, 100, 9)]] });
    expect(res.status, JSON.stringify(res.body).slice(0, 300)).toBe(200);
    expect(res.body.data.results).toEqual([{ dimensions: [], metrics: [0] }]);
  });
});

describe('the limits each read statement carries', () => {
  const limited = (limits: { READ_TIMEOUT_S?: number; READ_MAX_MEMORY_MB?: number }) =>
    createReads({ ...t.runtime.config, readTimeoutS: limits.READ_TIMEOUT_S ?? 30, readMaxMemoryMb: limits.READ_MAX_MEMORY_MB ?? 2048 });

  it('a statement past READ_TIMEOUT_S is stopped and answers 503 naming the limit', async () => {
    const clickhouse = limitedClient(t.runtime.clickhouse, limited({ READ_TIMEOUT_S: 1 }).limits.search);
    const started = performance.now();
    const err = await selectRows(clickhouse, 'SELECT sleepEachRow(0.5) FROM numbers({n:UInt32}) SETTINGS max_block_size = 1', { n: 20 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ApiError);
    expect((err as ApiError).status).toBe(503);
    expect((err as ApiError).message).toMatch(/limit of 1 s \(READ_TIMEOUT_S\)/);
    // Stopped near its limit, not after the 10 s it asked for.
    expect(performance.now() - started).toBeLessThan(8_000);
  });

  it("a statement stopped part way through its rows leaves none of them to the next statement (another user's, a tail's)", async () => {
    // One row a block, half a second each: rows are written out before the time limit stops it.
    // Issued on the store's client, so that the next two queue right behind it.
    const stopped = selectRows(t.runtime.clickhouse, 'SELECT sleepEachRow(0.5) AS leftover FROM numbers({n:UInt32}) SETTINGS max_block_size = 1, max_execution_time = 1', { n: 20 });
    const next = selectRows<Record<string, unknown>>(t.runtime.clickhouse, 'SELECT {x:UInt8} AS x', { x: 7 });
    const plain = selectRows<Record<string, unknown>>(t.runtime.clickhouse, 'SELECT 8 AS x', {});
    await expect(stopped).rejects.toThrow(/Timeout exceeded/);
    expect(await next).toEqual([{ x: 7 }]);
    expect(await plain).toEqual([{ x: 8 }]);
  });

  it('a statement past READ_MAX_MEMORY_MB is stopped and answers 503 naming the limit', async () => {
    const clickhouse = limitedClient(t.runtime.clickhouse, limited({ READ_MAX_MEMORY_MB: 1 }).limits.stats);
    const err = await selectRows(clickhouse, 'SELECT length(groupArray(number)) AS n FROM numbers({n:UInt32})', { n: 10_000_000 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ApiError);
    expect((err as ApiError).status).toBe(503);
    expect((err as ApiError).message).toMatch(/more memory than its limit of 1 MB \(READ_MAX_MEMORY_MB\)/);
    // Within the default the same statement answers.
    expect(await selectRows(limitedClient(t.runtime.clickhouse, t.runtime.reads.limits.stats), 'SELECT length(groupArray(number)) AS n FROM numbers({n:UInt32})', { n: 10_000_000 })).toEqual([{ n: 10_000_000 }]);
  });

  it('a statement longer than ClickHouse parses (max_query_size) answers 422, not 500', async () => {
    const clickhouse = limitedClient(t.runtime.clickhouse, t.runtime.reads.limits.stats);
    const err = await selectRows(clickhouse, `SELECT length('${'x'.repeat(300_000)}') AS n`, {}).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ApiError);
    expect((err as ApiError).status).toBe(422);
    expect((err as ApiError).details).toEqual({ body: expect.stringMatching(/longer than ClickHouse accepts \(max_query_size\)/) });
  });

  it('a request stopped by a limit answers 503 with the envelope, in every class', async () => {
    const reads = limited({});
    for (const limits of Object.values(reads.limits)) limits.timeoutS = 0.001;
    const app = createApp({ ...t.runtime, reads });
    const heavy = { domains: [alicesDomain.domain.id], metrics: ['requests', 'visitors'], dimensions: ['url', 'ipAddress'], ...retained, filters: [['glob', 'url', globs(100, 100, 9, 'limit-')]] };
    const id = alicesDomain.domain.id;
    const requests: [string, string, unknown?][] = [
      ['POST', '/api/logs/query', heavy],
      ['GET', `/api/logs/domains/${id}/stats?period=30d`],
      ['GET', `/api/logs/domains/${id}/access?url=*a*a*a*&limit=1000`],
      ['POST', `/api/logs/domains/${id}/search`, { query: 'zzz-not-there', startDate: '2000-01-01T00:00:00Z', fields: ['url', 'userAgent', 'referrer'] }],
    ];
    for (const [method, path, body] of requests) {
      const res = await call(app, method, path, { token: alice.token, body });
      expect(res.status, `${method} ${path}: ${JSON.stringify(res.body).slice(0, 300)}`).toBe(503);
      expect(res.body).toEqual({ success: false, error: expect.stringMatching(/took longer than its limit of 0.001 s \(READ_TIMEOUT_S\)/) });
    }
  });

  it("the limits stay on their statement: the engine's session keeps its own settings for background work", async () => {
    await selectRows(limitedClient(t.runtime.clickhouse, t.runtime.reads.limits.stats), 'SELECT 1 AS x', {});
    const [settings] = await selectRows<{ timeout: string | number; memory: string | number }>(
      t.runtime.clickhouse,
      "SELECT getSetting('max_execution_time') AS timeout, getSetting('max_memory_usage') AS memory",
      {},
    );
    expect(Number(settings!.timeout)).toBe(0);
    expect(Number(settings!.memory)).not.toBe(t.runtime.config.readMaxMemoryMb * 2 ** 20);
  });
});

describe('the fair queue through the app', () => {
  it("one user's six heavy queries delay another user's query by at most one of them", async () => {
    // Alice's: 100 distinct globs each (their automaton compiled anew for each request), by URL and address.
    const heavy = (i: number) => ({ domains: [alicesDomain.domain.id], metrics: ['requests', 'visitors'], dimensions: ['url', 'ipAddress'], ...retained, filters: [['glob', 'url', globs(100, 100, 9, `r${i}-`)]] });
    const finished: string[] = [];
    const alices = [1, 2, 3, 4, 5, 6].map((i) =>
      query(alice.token, heavy(i)).then((res) => {
        finished.push(`alice${i}`);
        return res;
      }),
    );
    // Bob asks once all of Alice's are in: as many run as READS_PER_USER lets (READS_IN_FLIGHT is more), the others wait.
    await until(() => t.runtime.reads.scheduler.counts.waiting >= 6 - t.runtime.reads.scheduler.limits.perUser, "Alice's six queries to be queued");
    const bobs = query(bob.token, { domains: [bobsDomain.domain.id], metrics: ['requests'], ...retained }).then((res) => {
      finished.push('bob');
      return res;
    });
    const answers = await Promise.all([...alices, bobs]);
    for (const res of answers) expect(res.status, JSON.stringify(res.body).slice(0, 200)).toBe(200);
    expect(answers[6]!.body.data.results[0].metrics).toEqual([bobsDomain.access.length]);
    // Bob's answer came before at least four of Alice's: he waited for the one running when he asked
    // (and at most one more, started while his request was still being authenticated).
    expect(finished.length - finished.indexOf('bob') - 1, finished.join(', ')).toBeGreaterThanOrEqual(4);
  }, 120_000);
});
