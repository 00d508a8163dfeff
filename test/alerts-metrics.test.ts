/**
 * windowFigures (src/alerts/metrics.ts): every window's figures equal a brute-force count over the
 * same rows, with rows on both sides of each window's start to the millisecond, durations in whole
 * minutes and not, several domains sharing durations, and rows outside every window.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dedupToken, insertAccessBatch, type AccessRow } from '../ingest/sinks/clickhouse.js';
import { windowFigures, windowKey, type Window, type WindowFigures } from '../src/alerts/metrics.js';
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

function bruteForce(rows: AccessRow[], w: Window, nowMs: number): WindowFigures {
  const inside = rows.filter((r) => r.domainId === w.domainId && r.timestamp <= nowMs && r.timestamp > nowMs - w.duration * 1000);
  const timed = inside.filter((r) => r.responseTime !== null);
  return {
    requests: inside.length,
    errors: inside.filter((r) => r.statusCode >= 500).length,
    responseTimeSum: timed.reduce((sum, r) => sum + r.responseTime!, 0),
    responseTimeCount: timed.length,
  };
}

describe('windowFigures', () => {
  it('equals the brute force for every window, to the millisecond at each window’s start', async () => {
    const nowMs = Math.floor(Date.now() / 1000) * 1000 - 5_000 + 123;
    const r = prngInt(5);
    const domains = [9_001, 9_002, 9_003];
    const rows: AccessRow[] = [];
    const add = (domainId: number, timestamp: number) =>
      rows.push(accessRow(rows.length, { domainId, timestamp, statusCode: r(4) === 0 ? 503 : 200, responseTime: r(5) === 0 ? null : r(900) }));
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
    const figures = await windowFigures(t.runtime.clickhouse, windows, nowMs);
    for (const w of windows) expect(figures.get(windowKey(w)), windowKey(w)).toEqual(bruteForce(rows, w, nowMs));
    expect(figures.size).toBe(windows.length);
    // A window with no rows at all has zeros.
    const none = await windowFigures(t.runtime.clickhouse, [{ domainId: 9_999, duration: 61 }], nowMs);
    expect(none.get('9999:61')).toEqual({ requests: 0, errors: 0, responseTimeSum: 0, responseTimeCount: 0 });
  });
});
