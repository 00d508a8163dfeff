/**
 * The statistics registry's two merges of every partial (src/stats/registry.ts): in SQL (`merge`,
 * then each metric's `final`) and in JavaScript (JsMerge, then each metric's `value`), which the
 * kept built part of GET …/stats uses. Over the same rows split into sources, every metric gives the
 * same number both ways, and the brute force's (test/support/query-rows.ts): a new metric is
 * checked here as soon as it is in METRICS.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { insertDomain } from '../../../src/domains/store.js';
import { selectRows as select } from '../../../core/db/clickhouse.js';
import { LIST_PARTIALS, mergedPartial, mergedStates, metricValues, METRICS, sentPartial, sourcePartial, statesOf, type Metric, type PartialStates } from '../../../src/stats/registry.js';
import { prng } from '../../support/random.js';
import { startTestApp, type TestApp } from '../../support/app.js';
import { generateRows, insertRows, metricValue, PERCENTILE_METRICS, withinPercentileBound, type Row } from '../../support/query-rows.js';
import { DAY_MS, HOUR_MS } from '../../../core/durations.js';

const BASE = Math.floor(Date.now() / DAY_MS) * DAY_MS - 10 * DAY_MS;
/** Every partial of every metric, each once. */
const PARTIALS = [...new Set(METRICS.flatMap((m) => m.partials))];

let t: TestApp;
const rows: Row[] = [];
const domains: number[] = [];
/** A domain whose 40 rows have response times summing to 23 ms: a mean of exactly 0.575 ms. */
let tie: number;

/** One source: a domain's rows with t in [start, end), aggregated into every partial (p_<name>). */
const sourceSql = (i: number) =>
  `SELECT ${PARTIALS.map((x) => sourcePartial(x, 'raw')).join(', ')} FROM access_logs
   WHERE domain_id = {d:UInt32} AND toUnixTimestamp64Milli(timestamp) >= {s${i}:Int64} AND toUnixTimestamp64Milli(timestamp) < {e${i}:Int64}`;

/** Every metric's value over `parts` of a domain's rows: merged in SQL, and merged in JavaScript. */
async function bothWays(domain: number, parts: [number, number][]): Promise<{ sql: (number | null)[]; js: (number | null)[] }> {
  const params: Record<string, number> = { d: domain };
  parts.forEach(([s, e], i) => Object.assign(params, { [`s${i}`]: s, [`e${i}`]: e }));
  const [merged] = await select<Record<string, unknown>>(
    t.runtime.clickhouse,
    `SELECT ${METRICS.map((m, i) => `${m.final} AS m${i}`).join(', ')}
     FROM (SELECT ${PARTIALS.map((x) => mergedPartial(x)).join(', ')} FROM (${parts.map((_, i) => sourceSql(i)).join(' UNION ALL ')}))`,
    params,
  );
  const states: PartialStates[] = [];
  for (const [i] of parts.entries()) {
    const [sent] = await select<Record<string, unknown>>(t.runtime.clickhouse, `SELECT ${PARTIALS.map(sentPartial).join(', ')} FROM (${sourceSql(i)})`, params);
    const read = statesOf(PARTIALS, sent!);
    expect(read, 'every state reads').not.toBeNull();
    states.push(read!);
  }
  const valueOf = metricValues(states.reduce(mergedStates));
  return {
    sql: METRICS.map((_, i) => (merged![`m${i}`] === null ? null : Number(merged![`m${i}`]))),
    js: METRICS.map(valueOf),
  };
}

beforeAll(async () => {
  t = await startTestApp({ LOG_RETENTION_DAYS: '3650' });
  for (const name of ['one.example.com', 'two.example.com', 'tie.example.com']) domains.push((await insertDomain(t.runtime.db, { name, ownerId: null })).id);
  tie = domains.pop()!;
  rows.push(...generateRows({ seed: 11, domain: domains[0]!, count: 1500, from: BASE, to: BASE + 3 * DAY_MS }));
  rows.push(...generateRows({ seed: 12, domain: domains[1]!, count: 300, from: BASE, to: BASE + 3 * DAY_MS, firstId: 5_001 }));
  const tied = generateRows({ seed: 13, domain: tie, count: 40, from: BASE, to: BASE + HOUR_MS, firstId: 9_001 });
  tied.forEach((r, i) => (r.rt = i < 23 ? 1 : 0));
  rows.push(...tied);
  await insertRows(t.runtime.clickhouse, rows);
}, 120_000);

afterAll(async () => {
  await t?.close();
});

describe('the registry merges every partial in SQL and in JavaScript alike', () => {
  it('every metric over rows split into sources: the same value both ways, and the brute force’s', async () => {
    const rnd = prng(5);
    let compared = 0;
    for (let round = 0; round < 40; round++) {
      const domain = domains[round % 2]!;
      // Windows of minutes to days; some sources hold no row, or rows without response times.
      const start = BASE + Math.floor(rnd() * 3 * DAY_MS);
      const end = start + Math.floor(rnd() ** 3 * 2 * DAY_MS);
      const cuts = Array.from({ length: Math.floor(rnd() * 3) }, () => start + Math.floor(rnd() * (end - start))).sort((a, b) => a - b);
      const bounds = [start, ...cuts, end];
      const parts = bounds.slice(1).map((e, i): [number, number] => [bounds[i]!, e]);
      const { sql, js } = await bothWays(domain, parts);
      expect(js, JSON.stringify(parts)).toEqual(sql);
      const inWindow = rows.filter((r) => r.domain === domain && r.t >= start && r.t < end);
      METRICS.forEach((m, i) => {
        const exact = metricValue(inWindow, m.name);
        if (PERCENTILE_METRICS.has(m.name)) expect(withinPercentileBound(js[i] ?? null, exact), `${m.name}: ${js[i]}, exact ${exact}`).toBe(true);
        else expect(js[i], m.name).toBe(exact);
      });
      compared += inWindow.length;
    }
    expect(compared).toBeGreaterThan(5_000);
  });

  it('a mean or share whose exact value ends in 5 rounds up both ways (23 ÷ 40 = 0.575 → 0.58)', async () => {
    const { sql, js } = await bothWays(tie, [
      [BASE, BASE + HOUR_MS / 2],
      [BASE + HOUR_MS / 2, BASE + HOUR_MS],
    ]);
    const at = METRICS.findIndex((m) => m.name === 'averageResponseTime');
    expect([sql[at], js[at]]).toEqual([0.58, 0.58]);
    expect(metricValue(rows.filter((r) => r.domain === tie), 'averageResponseTime')).toBe(0.58);
  });

  it('a metric ranked by a sum (rankedBy, what short lists prove its tops by) is that sum wherever the sum is positive, in every group', async () => {
    const ranked = (METRICS as readonly Metric[]).filter((m) => m.rankedBy);
    expect(ranked.map((m) => m.name)).toEqual(['requests', 'bandwidth', 'totalResponseTime']);
    for (const m of ranked) {
      const by = m.rankedBy!;
      expect(m.partials).toContain(by);
      expect(LIST_PARTIALS).toContain(by);
      const groups = await select<{ value: unknown; sum: unknown }>(
        t.runtime.clickhouse,
        `SELECT ${m.final} AS value, ${by.name} AS sum FROM (SELECT ${m.partials.map((x) => `${x.raw} AS ${x.name}`).join(', ')} FROM access_logs GROUP BY domain_id, url, status_code)`,
        {},
      );
      expect(groups.filter((g) => Number(g.sum) > 0).length).toBeGreaterThan(100);
      for (const g of groups) if (Number(g.sum) > 0) expect(Number(g.value), m.name).toBe(Number(g.sum));
    }
  });
});
