/**
 * A domain dashboard's view as POST /api/logs/query batches (pages/Dashboard.tsx draws their
 * answers): the headline (tiles and charts) and the panels. Plain data, so that the server's tests
 * and bench/ ask exactly what the page asks.
 *
 * Two batches, the headline first, both sent at once: the read queue serves a user's requests in
 * the order they came, so the headline's figures show after its own statements, not after the
 * panels' too; in one batch the page would show nothing until the last panel was computed
 * (bench/README, "bench/view-cache").
 */
import type { PanelSpec } from './panels.js';

/** The query every part of the view shares: the domain, the window and the filters. */
export type ViewBase = Record<string, unknown> & { filters: unknown[] };

export const TILE_METRICS = ['requests', 'visitors', 'errorRate', 'p95ResponseTime', 'bandwidth'] as const;
/** The chart of response times, bandwidth and visitors, by time bucket. */
export const OVER_TIME_METRICS = ['p50ResponseTime', 'p95ResponseTime', 'p99ResponseTime', 'bandwidth', 'visitors'] as const;
/** The chart by status class, by time bucket. */
export const STATUS_METRICS = ['requests'] as const;

export interface ViewQueries {
  /** The tiles, the chart of response times, bandwidth and visitors, and the chart by status class. */
  headline: [Record<string, unknown>, Record<string, unknown>, Record<string, unknown>];
  /** A query per panel, in their order. */
  panels: Record<string, unknown>[];
}

/** The view's queries over `base`, with `panels` (web/src/panels.ts: PANELS, or panelsFor the page's filters). */
export function viewQueries(base: ViewBase, compare: boolean, panels: readonly PanelSpec[]): ViewQueries {
  return {
    headline: [
      { ...base, metrics: [...TILE_METRICS], ...(compare ? { compare: 'previous' } : {}) },
      { ...base, metrics: [...OVER_TIME_METRICS], dimensions: ['time'], limit: 10_000 },
      { ...base, metrics: [...STATUS_METRICS], dimensions: ['time', 'statusClass'], limit: 10_000 },
    ],
    panels: panels.map((spec) => ({
      ...base,
      metrics: spec.metrics.map((m) => m.name),
      dimensions: spec.dimensions,
      filters: [...base.filters, ...(spec.filters ?? [])],
      limit: 10,
      ...(spec.orderBy ? { orderBy: spec.orderBy } : {}),
    })),
  };
}
