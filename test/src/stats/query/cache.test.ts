/**
 * POST /api/logs/query's answer cache (src/stats/query/cache.ts, versions.ts) through the real app
 * on the embedded stores: a reused answer is the one computed afresh; rows stored through the real
 * import path show in the next answer, also while readers ask at the same time (each answer counts
 * at least the rows stored before its request); identical questions in flight are computed once
 * (counted by the metrics' ClickHouse reads of kind "query"); the byte bound evicts.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { derivedClient } from '../../../../core/db/clickhouse.js';
import { createApp, type App } from '../../../../src/app.js';
import { Metrics } from '../../../../src/metrics/registry.js';
import { QueryCache } from '../../../../src/stats/query/cache.js';
import type { QueryAnswer } from '../../../../src/stats/query/shape.js';
import { PANELS } from '../../../../web/src/panels.js';
import { viewQueries } from '../../../../web/src/view.js';
import { call, type TestApp } from '../../../support/app.js';
import { accessLines, importText, newDomain, T0 } from '../../../support/ingest.js';
import { appWithAdmin } from '../../../support/auth.js';

let t: TestApp;
let admin: string;
/** A fixed window over the test lines (T0 + n seconds), so that every request of a test asks the same questions. */
const WINDOW = { dateRange: 'custom', startDate: new Date(T0 - 3_600_000).toISOString(), endDate: new Date(T0 + 6 * 3_600_000).toISOString() };

async function ask(app: App, body: unknown): Promise<any> {
  const res = await call(app, 'POST', '/api/logs/query', { token: admin, body });
  expect(res.status, JSON.stringify(res.body).slice(0, 600)).toBe(200);
  return res.body.data;
}

/** An app on the test's stores whose ClickHouse reads of kind "query" (each query computed) are counted. */
function countedApp(queryCacheMb: number): { app: App; computed: () => Promise<number> } {
  const metrics = new Metrics();
  const app = createApp({ ...t.runtime, config: { ...t.runtime.config, queryCacheMb }, metrics });
  const computed = async () => Number(/^tailhouse_clickhouse_query_duration_seconds_count\{kind="query"\} (\d+)$/m.exec((await metrics.scrape()).text)?.[1] ?? 0);
  return { app, computed };
}

beforeAll(async () => {
  ({ t, admin } = await appWithAdmin());
}, 240_000);

afterAll(() => t?.close());

describe('POST /api/logs/query: the answer cache', () => {
  it('answers a question again from the cache, equal to the answer computed afresh; a stored row is a new question', async () => {
    const domain = await newDomain(t.runtime.db, 'cache');
    await importText(t, domain.name, accessLines(0, 300));
    const cached = countedApp(64);
    const uncached = countedApp(0);
    const view = viewQueries({ domains: [domain.id], ...WINDOW, filters: [] }, true, PANELS);
    const queries = [...view.headline, ...view.panels];
    const first = await ask(cached.app, { queries });
    expect(await cached.computed()).toBe(queries.length);
    const again = await ask(cached.app, { queries });
    expect(await cached.computed()).toBe(queries.length);
    const afresh = await ask(uncached.app, { queries });
    expect(await uncached.computed()).toBe(queries.length);
    expect(again).toEqual(first);
    expect(afresh).toEqual(first);
    expect(first.answers[0].data.results[0].metrics[0]).toBe(300);

    await importText(t, domain.name, accessLines(300, 301));
    const after = await ask(cached.app, { queries });
    expect(await cached.computed()).toBe(2 * queries.length);
    expect(after.answers[0].data.results[0].metrics[0]).toBe(301);
    expect(after).toEqual(await ask(uncached.app, { queries }));
  }, 120_000);

  it('rows imported while readers ask show in every answer asked after they were stored', async () => {
    const domain = await newDomain(t.runtime.db, 'fresh');
    const view = viewQueries({ domains: [domain.id], ...WINDOW, filters: [] }, false, PANELS);
    // The tiles, the pages panel (the rollups' lists), the series by status (summed), each asked in the batch and alone.
    const pages = view.panels[0]!;
    const queries = [view.headline[0], pages, view.headline[2]];
    const counts = (answers: QueryAnswer[]) => [
      answers[0]!.results[0]!.metrics[0]!,
      answers[1]!.pagination.total,
      answers[2]!.results.reduce((sum, r) => sum + (r.metrics[0] ?? 0), 0),
    ];
    let stored = 0;
    let importing = true;
    let checked = 0;
    const reader = async (batch: boolean) => {
      while (importing) {
        const before = stored;
        const answers: QueryAnswer[] = batch ? (await ask(t.app, { queries })).answers.map((a: any) => a.data) : await Promise.all(queries.map((q) => ask(t.app, q)));
        // Each line has its own path: rows, paths and the series' sum all count the lines.
        for (const n of counts(answers)) expect(n).toBeGreaterThanOrEqual(before);
        checked++;
      }
    };
    // Caught at once, so that a reader failing while the lines are imported is reported below, not unhandled.
    const readers = [reader(true), reader(true), reader(false), reader(true)].map((r) => r.then(() => null, (err: unknown) => err));
    for (let batch = 0; batch < 12; batch++) {
      const lines = 1 + batch * 7;
      await importText(t, domain.name, accessLines(10_000 + stored, 10_000 + stored + lines));
      stored += lines;
    }
    importing = false;
    for (const failed of await Promise.all(readers)) if (failed) throw failed;
    expect(checked).toBeGreaterThan(4);
    expect(counts((await ask(t.app, { queries })).answers.map((a: any) => a.data))).toEqual([stored, stored, stored]);
  }, 120_000);

  it('a question asked again while it is computed joins the computation only where no row was stored since it read its version', async () => {
    const domain = await newDomain(t.runtime.db, 'join');
    await importText(t, domain.name, accessLines(0, 50));
    // The same store, the answers of its figures statements held at a gate once read (the data version statement passes).
    let open!: () => void;
    const gate = new Promise<void>((resolve) => (open = resolve));
    let held = 0;
    const base = t.runtime.clickhouse;
    const gated = derivedClient(base, {
      query: async (params) => {
        const result = await base.query(params);
        if (!params.query.includes('access_hour_rows')) {
          held++;
          await gate;
        }
        return result;
      },
    });
    const app = createApp({ ...t.runtime, clickhouse: gated, config: { ...t.runtime.config, queryCacheMb: 64 } });
    const body = { domains: [domain.id], metrics: ['requests'], ...WINDOW };
    const first = ask(app, body);
    await expect.poll(() => held, { timeout: 30_000 }).toBeGreaterThan(0);
    // Stored while the first computes: a later identical question must count it.
    await importText(t, domain.name, accessLines(50, 60));
    const heldBefore = held;
    const second = ask(app, body);
    await expect.poll(() => held, { timeout: 30_000 }).toBeGreaterThan(heldBefore);
    // No row stored since the second read its version: a third joins the second.
    const third = ask(app, body);
    open();
    const [a, b, c] = await Promise.all([first, second, third]);
    expect(a.results[0].metrics[0]).toBe(50);
    expect(b.results[0].metrics[0]).toBe(60);
    expect(c).toEqual(b);
  }, 120_000);

  it('identical questions in flight are computed once', async () => {
    const domain = await newDomain(t.runtime.db, 'dedup');
    await importText(t, domain.name, accessLines(0, 50));
    const uncached = countedApp(0);
    const body = { domains: [domain.id], metrics: ['requests', 'p95ResponseTime'], dimensions: ['url'], ...WINDOW, limit: 5 };
    const answers = await Promise.all(Array.from({ length: 10 }, () => ask(uncached.app, body)));
    // The first computes at once; the nine that came while it ran share one computation after it.
    expect(await uncached.computed()).toBeLessThanOrEqual(2);
    for (const answer of answers) expect(answer.pagination.total).toBe(50);
    const cached = countedApp(64);
    const views = await Promise.all(Array.from({ length: 10 }, () => ask(cached.app, { queries: [body, { ...body, limit: 10 }] })));
    expect(await cached.computed()).toBeLessThanOrEqual(4);
    for (const view of views) expect(view).toEqual(views[0]);
  }, 60_000);
});

describe('QueryCache', () => {
  const answer = (n: number): QueryAnswer => ({
    results: Array.from({ length: n }, (_, i) => ({ dimensions: [`/u/${i}`], metrics: [i] })),
    meta: { metrics: ['requests'], dimensions: ['url'], startDate: '', endDate: '', interval: null },
    pagination: { page: 1, limit: n, total: n, pages: 1 },
  });

  it('keeps answers up to its bound in bytes, the least recently used out first, and none larger than the bound', () => {
    const size = JSON.stringify(answer(100)).length + 1;
    const cache = new QueryCache(3 * size);
    for (const key of ['a', 'b', 'c']) cache.set(key, 'v1', answer(100));
    expect(cache.get('a', 'v1')).toEqual(answer(100));
    cache.set('d', 'v1', answer(100));
    // b was the least recently used (a was read).
    expect(cache.get('b', 'v1')).toBeUndefined();
    expect(['a', 'c', 'd'].map((k) => cache.get(k, 'v1') !== undefined)).toEqual([true, true, true]);
    expect(cache.get('a', 'v2')).toBeUndefined();
    cache.set('big', 'v1', answer(400));
    expect(cache.get('big', 'v1')).toBeUndefined();
    expect(cache.get('d', 'v1')).toBeDefined();
    expect(new QueryCache(0).enabled).toBe(false);
  });
});
