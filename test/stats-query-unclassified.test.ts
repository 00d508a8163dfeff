/**
 * POST /api/logs/query over access rows stored without their user agent's class (agent_class 0: a
 * writer other than the sink, before the backfill classifies them, ingest/user-agent-backfill.ts):
 * the agent class dimensions read them as no class, grouped (Dimension.byColumn) and filtered
 * (the set of matching classes holds 0 where the empty value matches) alike.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { insertDomain } from '../src/domains/store.js';
import { ADMIN_EMAIL, ADMIN_PASSWORD, call, login, startTestApp, type TestApp } from './support/app.js';
import { DAY, generateRows, insertRows } from './support/query-rows.js';

const BASE = Math.floor(Date.now() / DAY) * DAY - 5 * DAY;
const COUNT = 400;
let t: TestApp;
let admin: string;
let domainId: number;

beforeAll(async () => {
  t = await startTestApp({ LOG_RETENTION_DAYS: '3650' });
  admin = (await login(t.app, ADMIN_EMAIL, ADMIN_PASSWORD)).accessToken;
  domainId = (await insertDomain(t.runtime.db, { name: 'unclassified.example.com', ownerId: null })).id;
  await insertRows(t.runtime.clickhouse, generateRows({ seed: 7, domain: domainId, count: COUNT, from: BASE, to: BASE + DAY }), false);
}, 60_000);

afterAll(async () => {
  await t?.close();
});

/** Each result row as its dimension values and then its requests. */
async function requests(body: Record<string, unknown>): Promise<unknown[][]> {
  const res = await call(t.app, 'POST', '/api/logs/query', {
    token: admin,
    body: { dateRange: 'custom', startDate: new Date(BASE - DAY).toISOString(), endDate: new Date(BASE + 2 * DAY).toISOString(), domains: [domainId], metrics: ['requests'], ...body },
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
