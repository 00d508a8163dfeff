/**
 * The periods a stats window may be (GET …/stats's `period`, POST /api/logs/query's `dateRange`),
 * each ending now.
 */
import { DAY_MS, HOUR_MS } from '../../core/durations.js';

export const STATS_PERIODS = ['1h', '24h', '7d', '30d'] as const;
export type StatsPeriod = (typeof STATS_PERIODS)[number];

const PERIOD_MS: Record<StatsPeriod, number> = { '1h': HOUR_MS, '24h': DAY_MS, '7d': 7 * DAY_MS, '30d': 30 * DAY_MS };

/** The oldest moment a window reads at `now`: older rows are past the retention (LOG_RETENTION_DAYS), which the raw table and the rollups drop at different moments. */
export const retainedSince = (now: number, retentionDays: number) => now - retentionDays * DAY_MS;

/** A stats window as asked: a period ending now, or from startDate to endDate (default now). */
export type StatsWindow = { period: StatsPeriod } | { startDate: Date; endDate?: Date | undefined };

/** The window [start, end] (epoch ms) of `window` at `now`, starting no earlier than retainedSince. */
export function windowAt(window: StatsWindow, now: number, retentionDays: number): { start: number; end: number } {
  const oldest = retainedSince(now, retentionDays);
  if ('period' in window) return { start: Math.max(now - PERIOD_MS[window.period], oldest), end: now };
  return { start: Math.max(window.startDate.getTime(), oldest), end: window.endDate?.getTime() ?? now };
}
