/**
 * POST /api/logs/query's batch form (src/stats/query/service.ts, queryLogsBatch) through the real
 * app on the embedded stores: the dashboard's view (web/src/view.ts) asked in its batches answers
 * what each query asks alone, and what the brute force over the raw rows gives; a failed query
 * answers in its place what the single form answers (another user's domain: 404, leaking nothing;
 * an invalid body: its 422), and the others their figures.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { insertDomain } from '../../../../src/domains/store.js';
import { buildRollups } from '../../../../src/rollups/builder.js';
import { BATCH_QUERIES_MAX } from '../../../../src/stats/query/schemas.js';
import { PANELS } from '../../../../web/src/panels.js';
import { viewQueries } from '../../../../web/src/view.js';
import { ADMIN_EMAIL, ADMIN_PASSWORD, call, createUserAndLogin, login, startTestApp, type TestApp } from '../../../support/app.js';
import { bruteForce, generateRows, HOSTILE, insertRows, PERCENTILE_METRICS, withinPercentileBound, type ExpectedRow, type Row } from '../../../support/query-rows.js';
import { DAY_MS, HOUR_MS, MINUTE_MS } from '../../../../core/durations.js';
import { expectGroupCount } from './dataset.js';

const BASE = Math.floor(Date.now() / DAY_MS) * DAY_MS - 20 * DAY_MS;
/** Odd edges: partly built hours and days on both sides. */
const WINDOW = { start: BASE + 7 * HOUR_MS + 13 * MINUTE_MS, end: BASE + 4 * DAY_MS + 5 * HOUR_MS + 2 * MINUTE_MS };

let t: TestApp;
let alice: { id: number; token: string };
let alpha: { id: number; name: string };
let gamma: { id: number; name: string };
const rows: Row[] = [];
const names = new Map<number, string>();

const iso = (ms: number) => new Date(ms).toISOString();

async function ask(token: string, body: unknown, status = 200): Promise<any> {
  const res = await call(t.app, 'POST', '/api/logs/query', { token, body });
  expect(res.status, JSON.stringify(res.body).slice(0, 600)).toBe(status);
  return res.body;
}

/** Percentiles within their bound replaced by the exact value, so that one toEqual compares everything. */
const comparable = (results: ExpectedRow[], expected: ExpectedRow[], metrics: string[]) =>
  results.map((row, i) => ({
    dimensions: row.dimensions,
    metrics: row.metrics.map((value, j) => {
      const exact = expected[i]?.metrics[j];
      return PERCENTILE_METRICS.has(metrics[j]!) && exact !== undefined && withinPercentileBound(value, exact) ? exact : value;
    }),
  }));

/** `answer` (of `body`, over alpha) against the brute force over the raw rows: its page, and the previous window's figures with compare. */
function expectBruteForce(body: Record<string, any>, answer: any): void {
  const window = { start: Date.parse(answer.meta.startDate), end: Date.parse(answer.meta.endDate) };
  const spec = { domains: [alpha.id], metrics: body.metrics, dimensions: body.dimensions ?? [], filters: body.filters ?? [], interval: answer.meta.interval, orderBy: body.orderBy, names };
  const expected = bruteForce(rows, { ...spec, window });
  const page = expected.slice(0, body.limit ?? 100);
  expectGroupCount(answer, page.length, expected.length, JSON.stringify(body));
  expect(comparable(answer.results, page, body.metrics), JSON.stringify(body)).toEqual(page);
  if (body.compare) {
    const previous = bruteForce(rows, { ...spec, window: { start: 2 * window.start - window.end - 1, end: window.start - 1 } });
    expect(comparable(answer.results.map((r: any) => ({ dimensions: r.dimensions, metrics: r.comparison })), previous, body.metrics)).toEqual(previous);
  }
}

beforeAll(async () => {
  // 0: every built hour read from the rollups, so that both ways are compared with the raw rows.
  t = await startTestApp({ LOG_RETENTION_DAYS: '3650', STATS_ROLLUP_MIN_ROWS: '0' });
  const admin = (await login(t.app, ADMIN_EMAIL, ADMIN_PASSWORD)).accessToken;
  alice = await createUserAndLogin(t.app, admin, { email: 'alice@example.com' });
  const bob = await createUserAndLogin(t.app, admin, { email: 'bob@example.com' });
  const domain = async (name: string, ownerId: number) => {
    const row = await insertDomain(t.runtime.db, { name, ownerId });
    names.set(row.id, name);
    return { id: row.id, name };
  };
  alpha = await domain('alpha.example.com', alice.id);
  gamma = await domain('gamma-secret.example.com', bob.id);
  rows.push(...generateRows({ seed: 11, domain: alpha.id, count: 3000, from: BASE - DAY_MS, to: BASE + 6 * DAY_MS }));
  rows.push(...generateRows({ seed: 12, domain: gamma.id, count: 600, from: BASE - DAY_MS, to: BASE + 6 * DAY_MS }));
  await insertRows(t.runtime.clickhouse, rows);
  // The first days built, the rest read raw: a view reads both.
  await buildRollups(t.runtime.clickhouse, { lookbackS: null, settleS: 1, budgetMs: 120_000, retentionDays: 3650 });
  await insertRows(t.runtime.clickhouse, generateRows({ seed: 13, domain: alpha.id, count: 200, from: BASE + 2 * DAY_MS, to: BASE + 3 * DAY_MS, firstId: 50_001 }).map((r) => (rows.push(r), r)));
}, 400_000);

afterAll(async () => {
  await t?.close();
});

describe('POST /api/logs/query: the batch form', () => {
  it("a dashboard view's batches answer what each query answers alone, and the brute force over the raw rows", async () => {
    for (const compare of [false, true]) {
      for (const filters of [[], [['isNot', 'bot', [true]], ['glob', 'url', ['/*']]]]) {
        const view = viewQueries({ domains: [alpha.id], dateRange: 'custom', startDate: iso(WINDOW.start), endDate: iso(WINDOW.end), filters }, compare, PANELS);
        for (const queries of [view.headline, view.panels, [...view.headline, ...view.panels]]) {
          const { data } = await ask(alice.token, { queries });
          expect(data.answers).toHaveLength(queries.length);
          for (const [i, body] of queries.entries()) {
            const alone = await ask(alice.token, body);
            expect(data.answers[i]).toEqual({ success: true, data: alone.data });
            expectBruteForce(body, alone.data);
          }
        }
      }
    }
  }, 240_000);

  it('a view over the relative periods (windows ending now) answers as its queries alone', async () => {
    for (const dateRange of ['1h', '24h', '7d', '30d']) {
      const view = viewQueries({ domains: [alpha.id], dateRange, filters: [] }, true, PANELS);
      const queries = [...view.headline, ...view.panels];
      const { data } = await ask(alice.token, { queries });
      for (const [i, body] of queries.entries()) {
        const alone = await ask(alice.token, body);
        // The same window unless the two requests fell on either side of a 5-second boundary.
        if (alone.data.meta.endDate === data.answers[i].data.meta.endDate) expect(data.answers[i]).toEqual({ success: true, data: alone.data });
        expectBruteForce(body, data.answers[i].data);
      }
    }
  }, 120_000);

  it("another user's domain answers 404 in its place, as the single form, and leaks nothing; the other queries their figures", async () => {
    const mine = { domains: [alpha.id], metrics: ['requests'], dimensions: ['domain'], dateRange: 'custom', startDate: iso(WINDOW.start), endDate: iso(WINDOW.end) };
    const queries = [
      mine,
      { ...mine, domains: [gamma.id] },
      { ...mine, domains: [alpha.id, gamma.id] },
      { ...mine, domains: [2 ** 31 - 1] },
      // Every domain alice sees: hers only.
      { ...mine, domains: undefined },
    ];
    const res = await call(t.app, 'POST', '/api/logs/query', { token: alice.token, body: { queries } });
    expect(res.status).toBe(200);
    expect(JSON.stringify(res.body)).not.toContain('gamma');
    const answers = res.body.data.answers;
    for (const i of [1, 2, 3]) {
      const alone = await ask(alice.token, queries[i], 404);
      expect(answers[i]).toEqual({ success: false, status: 404, error: alone.error });
    }
    expect(answers[0]).toEqual({ success: true, data: (await ask(alice.token, mine)).data });
    expect(answers[4].data.results.map((r: any) => r.dimensions[0])).toEqual([alpha.name]);
    expectBruteForce(mine, answers[0].data);
  });

  it('an invalid query answers its 422 in its place with the details the single form gives; hostile values are bound', async () => {
    const valid = { domains: [alpha.id], metrics: ['requests'], dimensions: ['url'], dateRange: 'custom', startDate: iso(WINDOW.start), endDate: iso(WINDOW.end), limit: 5 };
    const invalid = [
      { ...valid, metrics: ['nope'] },
      { ...valid, dimensions: ['time:hour', 'time:day'] },
      { ...valid, extra: 1 },
      { ...valid, filters: [['is', 'url', ['nul\u0000byte']]] },
      { ...valid, dateRange: '24h' },
    ];
    const hostile = [
      { ...valid, filters: [['contains', 'url', [HOSTILE]]] },
      { ...valid, filters: [['is', 'userAgent', ["'); DROP TABLE access_logs; --"]]] },
    ];
    const { data } = await ask(alice.token, { queries: [valid, ...invalid, ...hostile] });
    expect(data.answers[0]).toEqual({ success: true, data: (await ask(alice.token, valid)).data });
    for (const [i, body] of invalid.entries()) {
      const alone = await ask(alice.token, body, 422);
      expect(data.answers[1 + i], JSON.stringify(body)).toEqual({ success: false, status: 422, error: alone.error, details: alone.details });
    }
    const notAnObject = await ask(alice.token, { queries: ['not an object', valid] });
    expect(notAnObject.data.answers[0]).toEqual({ success: false, status: 422, error: 'Validation failed', details: { body: expect.stringMatching(/object/) } });
    expect(notAnObject.data.answers[1]).toEqual(data.answers[0]);
    for (const [i, body] of hostile.entries()) {
      const answer = data.answers[1 + invalid.length + i];
      expect(answer).toEqual({ success: true, data: (await ask(alice.token, body)).data });
      expectBruteForce(body, answer.data);
    }
  });

  it('the batch itself is validated: not empty, at most BATCH_QUERIES_MAX, no other field; the single form keeps its 422s', async () => {
    const one = { metrics: ['requests'] };
    expect((await ask(alice.token, { queries: [] }, 422)).details).toEqual({ queries: 'must not be empty' });
    expect((await ask(alice.token, { queries: Array(BATCH_QUERIES_MAX + 1).fill(one) }, 422)).details).toEqual({ queries: `must have at most ${BATCH_QUERIES_MAX} entries` });
    expect((await ask(alice.token, { queries: [one], limit: 5 }, 422)).details).toEqual({ limit: 'Unknown field' });
    expect((await ask(alice.token, { queries: 'x' }, 422)).details).toEqual({ queries: 'must be an array' });
    expect((await ask(alice.token, { metrics: [] }, 422)).details).toEqual({ metrics: 'must not be empty' });
    expect((await ask(alice.token, { metrics: ['requests'], dimensions: ['nope'] }, 422)).details.dimensions).toMatch(/^\[0\]: must be one of /);
    expect((await ask(alice.token, { queries: Array(BATCH_QUERIES_MAX).fill(one) })).data.answers).toHaveLength(BATCH_QUERIES_MAX);
  });
});
