/**
 * GET /api/logs/domains/:domainId/stats (docs/reference/logs.md#statistics): every period against a
 * brute force over the same generated lines, loaded through the real import path and read through
 * the rollups; filters, custom windows, empty windows, formats without $request_time, who may ask.
 */
import { describe, expect, it } from 'vitest';
import { classifyUserAgent } from '../../../ingest/transforms/user-agent.js';
import { queryWindowStats } from '../../../src/stats/window.js';
import { call } from '../../support/app.js';
import { DAY_MS, HOUR_MS } from '../../../core/durations.js';
import { admin, alice, bob, bruteForce, empty, Entry, nora, noras, NOW, Period, PERIODS, plain, plainEntries, shop, shopEntries, SLACK, stats, t, TIED, useShops } from './shops.js';

useShops();

describe('GET /api/logs/domains/:domainId/stats', () => {
  it.each(Object.keys(PERIODS) as Period[])('period %s equals the brute force over the generated lines', async (period) => {
    const res = await stats(shop.id, alice.token, `?period=${period}`);
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(Date.now() - NOW).toBeLessThan(SLACK);
    expect(res.body).toEqual({ success: true, data: { period, ...bruteForce(shopEntries, NOW - PERIODS[period], NOW) } });
  });

  it('the data covers what the checks need: ties, NULL response times, empty agents and referrers, 5xx', () => {
    const month = bruteForce(shopEntries, NOW - 30 * DAY_MS, NOW);
    expect(month.topUrls.slice(0, 10).every((u) => TIED.includes(u.url))).toBe(true);
    expect(month.topUrls[0]!.requests).toBe(month.topUrls[9]!.requests);
    expect(month.topUserAgents.some((a) => a.userAgent === '')).toBe(true);
    expect(month.errorRate).toBeGreaterThan(0);
    const untimed = shopEntries.filter((e) => e.rt === null && e.t > NOW - DAY_MS).length;
    expect(untimed).toBeGreaterThan(0);
    expect(shopEntries.filter((e) => e.referrer === '').length).toBeGreaterThan(0);
  });

  it('no period means 24h', async () => {
    const res = await stats(shop.id, alice.token);
    expect(res.status).toBe(200);
    expect(res.body.data).toEqual({ period: '24h', ...bruteForce(shopEntries, NOW - DAY_MS, NOW) });
  });

  it('a format without $request_time: averageResponseTime 0, the rest as usual', async () => {
    for (const period of ['24h', '30d'] as const) {
      const res = await stats(plain.id, alice.token, `?period=${period}`);
      expect(res.status).toBe(200);
      expect(res.body.data.averageResponseTime).toBe(0);
      expect(res.body.data.totalRequests).toBeGreaterThan(0);
      expect(res.body.data).toEqual({ period, ...bruteForce(plainEntries, NOW - PERIODS[period], NOW) });
    }
  });

  it('an empty window gives zeros and empty lists', async () => {
    const zero = {
      totalRequests: 0,
      uniqueVisitors: 0,
      averageResponseTime: 0,
      errorRate: 0,
      topUrls: [],
      topStatusCodes: [],
      topUserAgents: [],
      topReferrers: [],
      bandwidth: 0,
      responseTimePercentiles: { p50: null, p95: null, p99: null },
    };
    for (const period of Object.keys(PERIODS)) {
      const res = await stats(empty.id, alice.token, `?period=${period}`);
      expect(res.status).toBe(200);
      expect(res.body).toEqual({ success: true, data: { period, ...zero } });
    }
    // A window between the lines of a domain that has some.
    const gap = await queryWindowStats(t.runtime.clickhouse, shop.id, NOW + HOUR_MS, NOW + 2 * HOUR_MS);
    expect(gap).toEqual(zero);
  });

  it('a bad period is a 422 naming the field', async () => {
    for (const bad of ['2h', '', '24H', '30d ']) {
      const res = await stats(shop.id, alice.token, `?period=${encodeURIComponent(bad)}`);
      expect(res.status, bad).toBe(422);
      expect(res.body).toEqual({ success: false, error: 'Validation failed', details: { period: expect.stringContaining('1h, 24h, 7d, 30d') } });
    }
    const res = await stats(0, alice.token);
    expect(res.status).toBe(422);
    expect(Object.keys(res.body.details)).toEqual(['domainId']);
  });

  it('filters and a custom window: the figures of the rows that pass, as brute force gives them', async () => {
    const isBot = (agent: string) => classifyUserAgent(agent).device === 'bot';
    const cases: [string, (e: Entry) => boolean][] = [
      ['statusCode=404', (e) => e.status === 404],
      ['statusCode=5xx', (e) => e.status >= 500 && e.status < 600],
      ['method=get&statusCode=404', (e) => e.status === 404],
      ['method=POST', () => false],
      ['url=%2Fp%2F', (e) => e.url.includes('/p/')],
      ['url=%2FQ%2F*', (e) => e.url.startsWith('/Q/')],
      ['url=%3Fq%3D', (e) => e.url.includes('?q=')],
      ['ipAddress=10.1.0.0%2F16', (e) => e.ip.startsWith('10.1.')],
      ['ipAddress=2001%3Adb8%3A%3A%2F32', (e) => e.ip.startsWith('2001:db8::')],
      ['userAgent=MOZILLA', (e) => e.agent.toLowerCase().includes('mozilla')],
      ['userAgent=%C3%A4%C3%B6%C3%BC', (e) => e.agent.startsWith('ÄÖÜ')],
      ['referrer=EXAMPLE.org', (e) => e.referrer.includes('example.org')],
      ['bot=true', (e) => isBot(e.agent)],
      ['bot=false&statusCode=2xx', (e) => !isBot(e.agent) && e.status < 300],
      // SQL and LIKE metacharacters match themselves only.
      ["userAgent=%25_'%22%5C", () => false],
      ['url=%25', () => false],
    ];
    for (const [query, passes] of cases) {
      const res = await stats(shop.id, alice.token, `?period=30d&${query}`);
      expect(res.status, query).toBe(200);
      expect(res.body.data, query).toEqual({ period: '30d', ...bruteForce(shopEntries.filter(passes), NOW - 30 * DAY_MS, NOW) });
    }
    // A window from startDate to endDate, to the millisecond, alone and filtered.
    const start = NOW - 10 * DAY_MS + 12_345;
    const end = NOW - 2 * DAY_MS - 999;
    const window = `?startDate=${new Date(start).toISOString()}&endDate=${new Date(end).toISOString()}`;
    expect((await stats(shop.id, alice.token, window)).body.data).toEqual({ period: 'custom', ...bruteForce(shopEntries, start, end) });
    expect((await stats(shop.id, alice.token, `${window}&statusCode=5xx`)).body.data).toEqual({ period: 'custom', ...bruteForce(shopEntries.filter((e) => e.status >= 500), start, end) });
    // startDate alone: up to now.
    const since = NOW - 3 * DAY_MS;
    expect((await stats(shop.id, alice.token, `?startDate=${new Date(since).toISOString()}`)).body.data).toEqual({ period: 'custom', ...bruteForce(shopEntries, since, NOW) });
  }, 180_000);

  it('422 for a window or a filter it cannot take, naming the field', async () => {
    const cases: [string, string][] = [
      ['?period=24h&startDate=2026-01-01', 'period'],
      ['?endDate=2026-01-01', 'startDate'],
      ['?startDate=2026-02-01&endDate=2026-01-01', 'endDate'],
      ['?startDate=1969-12-31', 'startDate'],
      ['?bot=yes', 'bot'],
      ['?statusCode=6xx', 'statusCode'],
      ['?ipAddress=10.0.0.0%2F99', 'ipAddress'],
      ['?userAgent=', 'userAgent'],
      [`?referrer=${'r'.repeat(65_537)}`, 'referrer'],
    ];
    for (const [query, field] of cases) {
      const res = await stats(shop.id, alice.token, query);
      expect(res.status, query.slice(0, 80)).toBe(422);
      expect(Object.keys(res.body.details), query.slice(0, 80)).toEqual([field]);
    }
  });

  it('401 without a valid token', async () => {
    const none = await call(t.app, 'GET', `/api/logs/domains/${shop.id}/stats`);
    expect(none.status).toBe(401);
    expect(none.headers.get('www-authenticate')).toBe('Bearer');
    expect(none.body).toEqual({ success: false, error: 'Authentication required' });
    expect((await stats(shop.id, 'not-a-token')).status).toBe(401);
  });

  it("another owner's domain is a 404 exactly like an unknown one; an admin sees every domain", async () => {
    const unknown = await stats(999_999, bob.token);
    const foreign = await stats(shop.id, bob.token);
    expect(unknown.status).toBe(404);
    expect(foreign.status).toBe(404);
    expect(foreign.body).toEqual({ success: false, error: 'Domain not found' });
    expect(foreign.body).toEqual(unknown.body);
    expect((await stats(noras.id, alice.token)).body).toEqual(unknown.body);
    const asAdmin = await stats(shop.id, admin.token, '?period=7d');
    expect(asAdmin.status).toBe(200);
    expect(asAdmin.body.data).toEqual({ period: '7d', ...bruteForce(shopEntries, NOW - 7 * DAY_MS, NOW) });
  });

  it('403 without logs:read, even on an own domain', async () => {
    const res = await stats(noras.id, nora.token);
    expect(res.status).toBe(403);
    expect(res.body).toEqual({ success: false, error: 'Insufficient permissions' });
  });

  it('is described in the OpenAPI document', async () => {
    const res = await call(t.app, 'GET', '/api/openapi.json');
    const op = res.body.paths['/api/logs/domains/{domainId}/stats']?.get;
    expect(op).toBeDefined();
    expect(op.parameters.map((p: { name: string }) => p.name).sort()).toEqual(
      ['bot', 'domainId', 'endDate', 'ipAddress', 'method', 'period', 'referrer', 'startDate', 'statusCode', 'url', 'userAgent'],
    );
    const stats = res.body.components.schemas.LogStats.properties;
    expect(Object.keys(stats)).toEqual(expect.arrayContaining(['topReferrers', 'bandwidth', 'responseTimePercentiles']));
  });
});
