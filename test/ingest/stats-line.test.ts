/** The `ingest stats` log line (ingest/worker.ts, statsLineWriter): totals, and only the sources that changed. */
import { describe, expect, it } from 'vitest';
import { newStats, type SourceStats } from '../../ingest/pipeline.js';
import { statsLineWriter } from '../../ingest/worker.js';

const source = (name: string, counts: Partial<SourceStats> = {}): SourceStats => ({ ...newStats(name, ['shop.example.com']), state: 'running', ...counts });

describe('the ingest stats line', () => {
  it('lists every source first, then those whose counters changed, with totals over all and without domains', () => {
    const line = statsLineWriter();
    const a = source('access /logs/a.log', { read: 10, inserted: 9, rejected: 1, lastStoredByDomain: { 3: 1 } });
    const b = source('access /logs/b.log', { read: 5, inserted: 5, lagBytes: 100 });
    const first = line([a, b]);
    expect(first.sources.map((s) => s.name)).toEqual([a.name, b.name]);
    expect(first.sources[0]).not.toHaveProperty('domains');
    expect(first.sources[0]).not.toHaveProperty('lastStoredByDomain');
    expect(first.totals).toEqual({ sources: 2, running: 2, read: 15, inserted: 14, rejected: 1, lagBytes: 100 });

    expect(line([a, b]).sources).toEqual([]);
    // A change of the domains' last times alone is not a change of the logged counters.
    const later = line([{ ...a, lastStoredByDomain: { 3: 2 } }, { ...b, lagBytes: 0, inserted: 6, read: 6 }]);
    expect(later.sources).toEqual([expect.objectContaining({ name: b.name, lagBytes: 0, inserted: 6 })]);
    expect(later.totals).toMatchObject({ read: 16, inserted: 15, lagBytes: 0 });
  });

  it('forgets a source let go: if it comes back, it is listed again', () => {
    const line = statsLineWriter();
    const a = source('access /logs/a.log');
    const b = source('access /logs/b.log');
    line([a, b]);
    expect(line([a]).sources).toEqual([]);
    expect(line([a, b]).sources.map((s) => s.name)).toEqual([b.name]);
  });
});
