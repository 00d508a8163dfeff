/**
 * The periods a stats window may be (GET …/stats's `period`, POST /api/logs/query's `dateRange`),
 * each ending now.
 */
import { DAY_MS, HOUR_MS } from '../rollups/plan.js';

export const STATS_PERIODS = ['1h', '24h', '7d', '30d'] as const;
export type StatsPeriod = (typeof STATS_PERIODS)[number];

const PERIOD_MS: Record<StatsPeriod, number> = { '1h': HOUR_MS, '24h': DAY_MS, '7d': 7 * DAY_MS, '30d': 30 * DAY_MS };

/**
 * The window of a period ending at `now`: [now − period, now], but never older than the retention
 * (LOG_RETENTION_DAYS), whose rows the raw table and the rollups drop at different moments.
 */
export function periodWindow(period: StatsPeriod, now: number, retentionDays: number): { start: number; end: number } {
  return { start: Math.max(now - PERIOD_MS[period], now - retentionDays * DAY_MS), end: now };
}
