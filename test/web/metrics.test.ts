/**
 * A query's figures by the names of the metrics asked (web/src/data/metrics.ts): the API answers
 * them in the order asked, and the pages read them by name, so that a metric added in the middle
 * of a query moves no figure under another label.
 */
import { describe, expect, it } from 'vitest';
import { named, namedRows } from '../../web/src/data/metrics.js';

describe('named', () => {
  it('keys the figures by the names asked, in their order; a figure missing is null', () => {
    expect(named(['requests', 'visitors', 'errorRate'], [1200, 300, 0.02])).toEqual({ requests: 1200, visitors: 300, errorRate: 0.02 });
    expect(named(['p95ResponseTime', 'bandwidth'], [null])).toEqual({ p95ResponseTime: null, bandwidth: null });
  });
});

describe('namedRows', () => {
  it('names each row’s metrics and changes, its dimensions as they are', () => {
    const rows = [
      { dimensions: ['2026-12-01T00:00:00.000Z', '2xx'], metrics: [10, 4], change: [0.5, null] },
      { dimensions: ['2026-12-01T00:05:00.000Z', '5xx'], metrics: [2, 1] },
    ];
    expect(namedRows(['requests', 'visitors'], rows)).toEqual([
      { dimensions: ['2026-12-01T00:00:00.000Z', '2xx'], metrics: { requests: 10, visitors: 4 }, change: { requests: 0.5, visitors: null } },
      { dimensions: ['2026-12-01T00:05:00.000Z', '5xx'], metrics: { requests: 2, visitors: 1 } },
    ]);
  });

  it('follows the order asked: a metric inserted in the middle moves no figure under another name', () => {
    const before = namedRows(['requests', 'bandwidth'], [{ dimensions: [], metrics: [5, 5000] }])[0]!;
    const after = namedRows(['requests', 'visitors', 'bandwidth'], [{ dimensions: [], metrics: [5, 3, 5000] }])[0]!;
    expect(after.metrics.bandwidth).toBe(before.metrics.bandwidth);
    expect(after.metrics.visitors).toBe(3);
  });
});
