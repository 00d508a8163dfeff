/**
 * POST /api/logs/query over access rows stored without their user agent's class (agent_class 0: a
 * writer other than the sink, before the backfill classifies them, ingest/user-agent-backfill.ts):
 * the agent class dimensions read them as no class, grouped (Dimension.byColumn) and filtered
 * (the set of matching classes holds 0 where the empty value matches) alike.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../../../core/log.js';
import { backfillUserAgentClasses } from '../../../../ingest/user-agent-backfill.js';
import { insertDomain } from '../../../../src/domains/store.js';
import { buildRollups } from '../../../../src/rollups/builder.js';
import { planWindow, queryDomainsBuildState } from '../../../../src/rollups/plan.js';
import { call, type TestApp } from '../../../support/app.js';
import { generateRows, insertRows } from '../../../support/query-rows.js';
import { appWithAdmin } from '../../../support/auth.js';
import { DAY_MS } from '../../../../core/durations.js';

const BASE = Math.floor(Date.now() / DAY_MS) * DAY_MS - 5 * DAY_MS;
const COUNT = 400;
let t: TestApp;
let admin: string;
let domainId: number;

beforeAll(async () => {
  ({ t, admin } = await appWithAdmin({ LOG_RETENTION_DAYS: '3650' }));
  domainId = (await insertDomain(t.runtime.db, { name: 'unclassified.example.com', ownerId: null })).id;
  await insertRows(t.runtime.clickhouse, generateRows({ seed: 7, domain: domainId, count: COUNT, from: BASE, to: BASE + DAY_MS }), false);
}, 60_000);

afterAll(() => t?.close());

/** Each result row as its dimension values and then its requests. */
async function requests(body: Record<string, unknown>): Promise<unknown[][]> {
  const res = await call(t.app, 'POST', '/api/logs/query', {
    token: admin,
    body: { dateRange: 'custom', startDate: new Date(BASE - DAY_MS).toISOString(), endDate: new Date(BASE + 2 * DAY_MS).toISOString(), domains: [domainId], metrics: ['requests'], ...body },
  });
  expect(res.status, JSON.stringify(res.body).slice(0, 300)).toBe(200);
  return res.body.data.results.map((r: { dimensions: unknown[]; metrics: number[] }) => [...r.dimensions, r.metrics[0]]);
}

describe('POST /api/logs/query: rows not classified yet', () => {
  it('have empty class values and are no bot, as dimensions and in filters', async () => {
    for (const dimension of ['browser', 'os', 'device', 'botName', 'botKind']) {
      expect(await requests({ dimensions: [dimension] }), dimension).toEqual([['', COUNT]]);
      // A device filter takes the device classes only.
      if (dimension === 'device') continue;
      expect(await requests({ filters: [['is', dimension, ['']]] }), dimension).toEqual([[COUNT]]);
      expect(await requests({ filters: [['is', dimension, ['', 'Chrome']]] }), dimension).toEqual([[COUNT]]);
      expect(await requests({ filters: [['isNot', dimension, ['']]] }), dimension).toEqual([[0]]);
    }
    expect(await requests({ filters: [['isNot', 'device', ['desktop', 'mobile']]] })).toEqual([[COUNT]]);
    expect(await requests({ filters: [['is', 'device', ['desktop', 'mobile', 'bot']]] })).toEqual([[0]]);
    expect(await requests({ dimensions: ['bot'] })).toEqual([[false, COUNT]]);
    expect(await requests({ filters: [['is', 'bot', [false]]] })).toEqual([[COUNT]]);
    expect(await requests({ filters: [['is', 'bot', [true]]] })).toEqual([[0]]);
  });
});

describe('the rollups over rows not classified yet', () => {
  const window = { start: BASE - DAY_MS, end: BASE + 2 * DAY_MS - 1 };
  const build = () => buildRollups(t.runtime.clickhouse, { lookbackS: null, settleS: 1, budgetMs: 120_000, retentionDays: 3650 });
  /** The hours and days the plan of the window reads from the rollups. */
  const builtBuckets = async () => {
    const { state } = await queryDomainsBuildState(t.runtime.clickhouse, [domainId], window.start, window.end, 'day');
    const plan = planWindow(window.start, window.end, state);
    return plan.days.length + plan.hours.length;
  };

  it('keep their buckets unbuilt, read raw; once the backfill has classified them the builder builds them and the class panels read the rollups', async () => {
    await build();
    expect(await builtBuckets()).toBe(0);
    expect(await requests({ dimensions: ['browser'] })).toEqual([['', COUNT]]);

    const backfill = await backfillUserAgentClasses({ clickhouse: t.runtime.clickhouse, log: createLogger('silent'), claim: async () => true });
    expect(backfill).toMatchObject({ complete: true, rows: COUNT });
    await build();
    expect(await builtBuckets()).toBeGreaterThan(0);
    // The same questions with a filter the rollups do not hold read the raw rows, as the backfill classified them.
    const rawOnly = ['isNot', 'method', ['\u0001 no such method']];
    for (const dimensions of [['browser'], ['os', 'device'], ['botName', 'botKind'], ['bot']]) {
      const answer = await requests({ dimensions, limit: 1000 });
      expect(answer, dimensions.join()).toEqual(await requests({ dimensions, limit: 1000, filters: [rawOnly] }));
      expect(answer.reduce((n, r) => n + Number(r.at(-1)), 0)).toBe(COUNT);
    }
    expect(await requests({ dimensions: ['browser'] })).not.toEqual([['', COUNT]]);
    // Read from the rollups: a mark in the agent class rows of a built hour and of its day shows, once
    // (a plan reads a bucket from its day or from its hours, never both).
    const [classed] = await t.runtime.clickhouse
      .query({ query: 'SELECT toString(agent_class) AS key, toUnixTimestamp(toStartOfHour(timestamp)) AS hour, toUnixTimestamp(toStartOfDay(timestamp)) AS day FROM access_logs WHERE domain_id = {d:UInt32} LIMIT 1', query_params: { d: domainId }, format: 'JSONEachRow' })
      .then((r) => r.json<{ key: string; hour: number; day: number }>());
    await t.runtime.clickhouse.command({
      query: `INSERT INTO access_rollups (domain_id, span, dim, bucket, key, requests) VALUES
        ({d:UInt32}, 'day', 'agent_class', toDateTime({day:UInt32}, 'UTC'), {key:String}, 1000), ({d:UInt32}, 'hour', 'agent_class', toDateTime({hour:UInt32}, 'UTC'), {key:String}, 1000)`,
      query_params: { d: domainId, day: classed!.day, hour: classed!.hour, key: classed!.key },
    });
    // Another window: the answers above are kept, and so is the build state they planned from
    // (known-plans.ts, for REFRESH_MS), and a mark written by hand changes neither.
    const marked = await requests({ dimensions: ['browser'], limit: 1000, startDate: new Date(BASE - DAY_MS + 1000).toISOString() });
    expect(marked.reduce((n, r) => n + Number(r.at(-1)), 0)).toBe(COUNT + 1000);
  });
});
