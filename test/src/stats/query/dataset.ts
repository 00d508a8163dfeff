/**
 * What the tests of POST /api/logs/query (src/stats/query) share: an app on the embedded stores with
 * alice (alpha, beta), bob (gamma), nora (no logs:read) and a fleet of 40 small domains, rows generated
 * from fixed seeds (test/support/query-rows.ts) inserted as they are, and the answers computed in
 * JavaScript from those rows (the brute force) to hold the endpoint's against.
 */
import { afterAll, beforeAll, expect } from 'vitest';
import { insertDomain } from '../../../../src/domains/store.js';
import { buildRollups } from '../../../../src/rollups/builder.js';
import { dimensionByName, DIMENSION_NAMES, metricByName, METRIC_NAMES } from '../../../../src/stats/registry.js';
import { ADMIN_EMAIL, ADMIN_PASSWORD, call, createUserAndLogin, login, startTestApp, type TestApp } from '../../../support/app.js';
import { bruteForce, generateRows, insertRows, PERCENTILE_METRICS, withinPercentileBound, type ExpectedRow, type Row, type Spec } from '../../../support/query-rows.js';
import { DAY_MS, HOUR_MS, MINUTE_MS } from '../../../../core/durations.js';

export const ALL_METRICS = [...METRIC_NAMES];
/** The metrics whose partials the rollups hold (a raw-only partial, such as uniquePaths', has `rollup` null): those the rollup tests ask for. */
export const HELD_METRICS = ALL_METRICS.filter((m) => metricByName.get(m)!.partials.every((x) => x.rollup !== null));
/** Every dimension but the time ones. */
export const PLAIN_DIMENSIONS = DIMENSION_NAMES.filter((d) => dimensionByName.get(d)!.kind !== 'time');
export const STRING_DIMENSIONS = PLAIN_DIMENSIONS.filter((d) => dimensionByName.get(d)!.ops.includes('contains'));

/** A whole day 20 days back: most rows lie in the week from it; 'custom' windows are fixed times around it. */
export const BASE = Math.floor(Date.now() / DAY_MS) * DAY_MS - 20 * DAY_MS;
export const W_ALL = { start: BASE - 2 * DAY_MS, end: BASE + 8 * DAY_MS };
/** Odd edges, with rows on them and a millisecond outside them. */
export const W_PART = { start: BASE + DAY_MS + 7 * HOUR_MS + 13 * MINUTE_MS + 7_123, end: BASE + 3 * DAY_MS + 5 * HOUR_MS + 2 * MINUTE_MS + 456 };
/** Between the rows far back (up to 30 days before BASE) and the others. */
export const W_EMPTY = { start: BASE - 10 * DAY_MS, end: BASE - 9 * DAY_MS };

export let t: TestApp;
export let admin: string;
export let alice: { id: number; token: string };
export let bob: { id: number; token: string };
export let nora: { id: number; token: string };
/** alice owns alpha and beta, bob gamma; the fleet is nobody's. */
export let alpha: { id: number; name: string };
export let beta: { id: number; name: string };
export let gamma: { id: number; name: string };
export let fleet: { id: number; name: string }[];
export const rows: Row[] = [];
export const names = new Map<number, string>();

export const iso = (ms: number) => new Date(ms).toISOString();

/**
 * An answer's count of groups against the brute force's `expected` groups: exact, or where the
 * answer says it is a lower bound (a page proven from the short lists counts the groups it saw),
 * at least the `seen` rows up to its page and at most the brute force's.
 */
export function expectGroupCount(answer: { pagination: { total: number }; meta: { totalIsLowerBound?: boolean } }, seen: number, expected: number, label: string): void {
  if (answer.meta.totalIsLowerBound) {
    expect(answer.pagination.total, label).toBeGreaterThanOrEqual(seen);
    expect(answer.pagination.total, label).toBeLessThanOrEqual(expected);
  } else expect(answer.pagination.total, label).toBe(expected);
}
export const custom = (w: { start: number; end: number }) => ({ dateRange: 'custom', startDate: iso(w.start), endDate: iso(w.end) });

export async function ask(token: string, body: unknown, status = 200): Promise<any> {
  const res = await call(t.app, 'POST', '/api/logs/query', { token, body });
  expect(res.status, JSON.stringify(res.body).slice(0, 600)).toBe(status);
  return res.body;
}

/** The whole answer in one page. */
export async function askAll(token: string, body: Record<string, unknown>): Promise<any> {
  const { data } = await ask(token, { limit: 10_000, ...body });
  expect(data.pagination.total).toBe(data.results.length);
  return data;
}

/** Percentiles within their bound are replaced by the exact value, so that one toEqual compares everything. */
export function comparable(results: ExpectedRow[], expected: ExpectedRow[], metrics: string[]): ExpectedRow[] {
  return results.map((row, i) => ({
    dimensions: row.dimensions,
    metrics: row.metrics.map((value, j) => {
      const exact = expected[i]?.metrics[j];
      return PERCENTILE_METRICS.has(metrics[j]!) && exact !== undefined && withinPercentileBound(value, exact) ? exact : value;
    }),
  }));
}

/** Asks `body` as `token` and compares the whole answer with the brute force over `domains`. */
export async function expectBruteForce(token: string, domains: number[], body: Record<string, any>, window = W_PART): Promise<any> {
  const data = await askAll(token, { ...custom(window), ...body });
  const spec: Spec = {
    domains,
    metrics: body.metrics,
    dimensions: body.dimensions ?? [],
    filters: body.filters ?? [],
    window: { start: Date.parse(data.meta.startDate), end: Date.parse(data.meta.endDate) },
    interval: data.meta.interval,
    orderBy: body.orderBy,
    names,
  };
  const expected = bruteForce(rows, spec);
  expect(comparable(data.results, expected, spec.metrics), JSON.stringify(body).slice(0, 300)).toEqual(expected);
  return data;
}

export const aliceDomains = () => [alpha.id, beta.id];
export const everyDomain = () => [...names.keys()];
/**
 * The builder's whole backlog of the last 40 days, as `serve` runs it (settled a second after a
 * bucket ends): the rows far back stay unbuilt, read raw beside the built ones.
 */
export const buildAll = () => buildRollups(t.runtime.clickhouse, { lookbackS: null, settleS: 1, budgetMs: 120_000, retentionDays: 40 });

/** The app for the file's tests (every built hour on the rollups: STATS_ROLLUP_MIN_ROWS 0), its users and domains, and the generated rows inserted; closed after the file. */
export function useDataset(): void {
  beforeAll(async () => {
    // The test's hours hold a few rows each, which the query endpoint would read raw (STATS_ROLLUP_MIN_ROWS):
    // 0 keeps every built hour on the rollups, so the tests compare them with the raw rows.
    t = await startTestApp({ LOG_RETENTION_DAYS: '3650', STATS_ROLLUP_MIN_ROWS: '0' });
    admin = (await login(t.app, ADMIN_EMAIL, ADMIN_PASSWORD)).accessToken;
    alice = await createUserAndLogin(t.app, admin, { email: 'alice@example.com' });
    bob = await createUserAndLogin(t.app, admin, { email: 'bob@example.com' });
    nora = await createUserAndLogin(t.app, admin, { email: 'nora@example.com' });
    const revoked = await call(t.app, 'PUT', `/api/users/${nora.id}/permissions`, { token: admin, body: { permissions: [{ resource: 'alerts', actions: ['read'] }] } });
    expect(revoked.status).toBe(200);
    const domain = async (name: string, ownerId: number | null) => {
      const row = await insertDomain(t.runtime.db, { name, ownerId });
      names.set(row.id, name);
      return { id: row.id, name };
    };
    alpha = await domain('alpha.example.com', alice.id);
    beta = await domain('beta.example.com', alice.id);
    gamma = await domain('gamma.example.com', bob.id);
    await domain('noras.example.com', nora.id);
    fleet = [];
    for (let i = 0; i < 40; i++) fleet.push(await domain(`fleet-${String(i).padStart(2, '0')}.example.net`, null));

    rows.push(...generateRows({ seed: 1, domain: alpha.id, count: 3000, from: BASE - DAY_MS, to: BASE + 6 * DAY_MS }));
    // Far back (weeks and months), and in the last hour (the relative date ranges).
    rows.push(...generateRows({ seed: 2, domain: alpha.id, count: 300, from: BASE - 400 * DAY_MS, to: BASE - 30 * DAY_MS, firstId: 10_001 }));
    rows.push(...generateRows({ seed: 3, domain: alpha.id, count: 20, from: Date.now() - 30 * MINUTE_MS, to: Date.now() - 10 * MINUTE_MS, firstId: 20_001 }));
    // On W_PART's edges and a millisecond outside them.
    const edges = generateRows({ seed: 4, domain: alpha.id, count: 4, from: 0, to: 1, firstId: 30_001 });
    [W_PART.start - 1, W_PART.start, W_PART.end, W_PART.end + 1].forEach((at, i) => (edges[i]!.t = at));
    rows.push(...edges);
    rows.push(...generateRows({ seed: 5, domain: beta.id, count: 800, from: BASE - DAY_MS, to: BASE + 6 * DAY_MS }));
    rows.push(...generateRows({ seed: 6, domain: gamma.id, count: 500, from: BASE - DAY_MS, to: BASE + 6 * DAY_MS }));
    fleet.forEach((d, i) => rows.push(...generateRows({ seed: 100 + i, domain: d.id, count: 3 + ((i * 7) % 30), from: BASE + DAY_MS, to: BASE + 2 * DAY_MS })));
    await insertRows(t.runtime.clickhouse, rows);
  }, 120_000);
  afterAll(async () => {
    await t?.close();
  });
}
