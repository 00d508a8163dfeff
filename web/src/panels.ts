/**
 * The domain dashboard's panels (components/Panel.tsx draws them): each one's query and columns. Plain
 * data, so that bench/query-shapes times the same questions the page asks.
 */
import type { Filter, FilterOp, FilterValue } from './filters.js';
import { count, ms, percent } from './format.js';

export interface PanelSpec {
  id: string;
  title: string;
  dimensions: string[];
  /** The first metric is the one shown with its share; the others as columns. */
  metrics: { name: string; label: string; format: (v: number | null) => string }[];
  filters?: [FilterOp, string, FilterValue[]][];
  orderBy?: [string, 'asc' | 'desc'][];
}

export const REQUESTS = { name: 'requests', label: 'Requests', format: count };
const PAGE_METRICS = [REQUESTS, { name: 'errorRate', label: '5xx', format: percent }];
// Pages by path, query strings left out (as Plausible and GoAccess's --no-query-string show them): the
// rollups hold a list of paths, and a URL per query string made a 30-day panel group millions of them.
export const PANELS: PanelSpec[] = [
  { id: 'pages', title: 'Top pages', dimensions: ['path'], metrics: PAGE_METRICS },
  { id: 'not-found', title: 'Not found (404)', dimensions: ['path'], metrics: [REQUESTS], filters: [['is', 'statusCode', [404]]] },
  { id: 'status', title: 'Status codes', dimensions: ['statusCode'], metrics: [REQUESTS] },
  // Ordered by the time spent: by the mean, URLs of one request each (hashed assets, searches) fill the
  // panel. Sums and means, not percentiles: a histogram per URL costs several times the mean over a
  // month of URLs carrying ids (bench/README, "Figures behind the code's choices").
  {
    id: 'time-spent',
    title: 'Time spent, by path',
    dimensions: ['path'],
    metrics: [{ name: 'totalResponseTime', label: 'Total', format: ms }, { name: 'averageResponseTime', label: 'Mean', format: ms }],
    orderBy: [['totalResponseTime', 'desc']],
  },
  { id: 'referrers', title: 'Referring sites', dimensions: ['referrerHost'], metrics: [REQUESTS] },
  { id: 'agents', title: 'User agents', dimensions: ['userAgent'], metrics: [REQUESTS] },
  { id: 'browsers', title: 'Browsers', dimensions: ['browser'], metrics: [REQUESTS] },
  { id: 'os', title: 'Operating systems', dimensions: ['os'], metrics: [REQUESTS] },
  { id: 'devices', title: 'Devices', dimensions: ['device'], metrics: [REQUESTS] },
  { id: 'bots', title: 'Bots', dimensions: ['botName', 'botKind'], metrics: [REQUESTS], filters: [['is', 'bot', [true]]] },
  { id: 'addresses', title: 'Client addresses', dimensions: ['ipAddress'], metrics: [REQUESTS] },
];

/**
 * The panels for the page's filters: with one path chosen (a click on a page), the pages panel lists
 * that path's full URLs, its query-string variants.
 */
export function panelsFor(filters: readonly Filter[]): PanelSpec[] {
  const paths = filters.filter((f) => f.op === 'is' && f.dimension === 'path');
  if (paths.length !== 1) return PANELS;
  const path = String(paths[0]!.value);
  return PANELS.map((spec) => (spec.id === 'pages' ? { id: 'full-urls', title: `Full URLs of ${path}`, dimensions: ['url'], metrics: PAGE_METRICS } : spec));
}
