/**
 * windowFigures (src/alerts/metrics.ts): every window's metrics equal a brute force over the
 * same rows, with rows on both sides of each window's start to the millisecond, durations in whole
 * minutes and not, several domains sharing durations, and rows outside every window.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dedupToken, insertAccessBatch, type AccessRow } from '../ingest/sinks/clickhouse.js';
import { windowFigures, windowKey, type Window, type WindowFigures } from '../src/alerts/metrics.js';
import { CONDITIONS } from '../src/alerts/schemas.js';
import { startTestApp, type TestApp } from './support/app.js';
import { accessRow } from './support/ingest.js';
import { prngInt } from './support/random.js';

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
}, 60_000);
afterAll(async () => {
  await t?.close();
});

const DURATIONS = [60, 61, 90, 119, 300, 3_600, 3_617];

const roundTo = (x: number, decimals: number) => Math.floor(x * 10 ** decimals + 0.5) / 10 ** decimals;

/** The exact nearest-rank percentile `n` of `values`; null when there are none. */
function nearestRank(values: number[], n: number): number | null {
  if (values.length === 0) return null;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.ceil((n * sorted.length) / 100) - 1]!;
}

function bruteForce(rows: AccessRow[], w: Window, nowMs: number): WindowFigures {
  const inside = rows.filter((r) => r.domainId === w.domainId && r.timestamp <= nowMs && r.timestamp > nowMs - w.duration * 1000);
  const times = inside.flatMap((r) => (r.responseTime === null ? [] : [r.responseTime]));
  const share = (count: number) => (inside.length === 0 ? 0 : roundTo(count / inside.length, 4));
  return {
    requests: inside.length,
    values: {
      errorRate: share(inside.filter((r) => r.statusCode >= 500).length),
      clientErrorRate: share(inside.filter((r) => r.statusCode >= 400 && r.statusCode < 500).length),
      requestCount: inside.length,
      averageResponseTime: times.length === 0 ? null : roundTo(times.reduce((sum, v) => sum + v, 0) / times.length, 2),
      p95ResponseTime: nearestRank(times, 95),
    },
  };
}

/** The registry's percentiles: exact below 128 ms, else within 1 % of the exact nearest rank (and its 2-decimal rounding). */
function expectPercentile(got: number | null, exact: number | null, label: string) {
  if (exact === null || exact < 128) return expect(got, label).toBe(exact);
  expect(got, label).not.toBeNull();
  expect(Math.abs(got! - exact), `${label}: ${got} for ${exact}`).toBeLessThanOrEqual(0.01 * exact + 0.005);
}

describe('windowFigures', () => {
  it('equals the brute force for every window, to the millisecond at each window’s start', async () => {
    const nowMs = Math.floor(Date.now() / 1000) * 1000 - 5_000 + 123;
    const r = prngInt(5);
    const domains = [9_001, 9_002, 9_003];
    const rows: AccessRow[] = [];
    const add = (domainId: number, timestamp: number) =>
      rows.push(accessRow(rows.length, { domainId, timestamp, statusCode: [503, 404, 200, 200, 301][r(5)]!, responseTime: r(5) === 0 ? null : r(4) === 0 ? 128 + r(60_000) : r(900) }));
    for (const domainId of domains) {
      // Just inside and just outside each window's start, and on it (outside: the window is open there).
      for (const d of DURATIONS) for (const delta of [-1, 0, 1, 999, 1000]) add(domainId, nowMs - d * 1000 + delta);
      // Spread over the longest window and a little beyond it, and a few after now (in no window).
      for (let i = 0; i < 400; i++) add(domainId, nowMs - r(3_700_000));
      for (let i = 0; i < 5; i++) add(domainId, nowMs + 1 + r(10_000));
      add(domainId, nowMs);
    }
    await insertAccessBatch(t.runtime.clickhouse, rows, dedupToken('metrics-test', 0, rows.length));
    // Windows for two of the domains only; the third's rows must not leak into them.
    const windows: Window[] = domains.slice(0, 2).flatMap((domainId) => DURATIONS.map((duration) => ({ domainId, duration })));
    const figures = await windowFigures(t.runtime.clickhouse, windows, nowMs, CONDITIONS);
    for (const w of windows) {
      const got = figures.get(windowKey(w))!;
      const expected = bruteForce(rows, w, nowMs);
      expect(got, windowKey(w)).toEqual({ ...expected, values: { ...expected.values, p95ResponseTime: got.values.p95ResponseTime } });
      expectPercentile(got.values.p95ResponseTime ?? null, expected.values.p95ResponseTime ?? null, windowKey(w));
    }
    expect(figures.size).toBe(windows.length);
    // Only the conditions asked for are measured (the histogram only for p95ResponseTime).
    const counted = await windowFigures(t.runtime.clickhouse, windows, nowMs, ['requestCount', 'errorRate']);
    for (const w of windows) {
      const { requests, values } = bruteForce(rows, w, nowMs);
      expect(counted.get(windowKey(w))).toEqual({ requests, values: { requestCount: values.requestCount, errorRate: values.errorRate } });
    }
    // A window with no rows at all has zeros.
    const none = await windowFigures(t.runtime.clickhouse, [{ domainId: 9_999, duration: 61 }], nowMs, CONDITIONS);
    expect(none.get('9999:61')).toEqual({ requests: 0, values: { errorRate: 0, clientErrorRate: 0, requestCount: 0, averageResponseTime: null, p95ResponseTime: null } });
  });
});
