/**
 * A series longer than one page is computed whole for every page (its buckets are filled and
 * ordered after SQL, shape.ts): a fleet's 1,000 sparklines of 25 hours are three pages of the
 * largest limit. So the ordered series of a first page is kept for a few seconds, and the later
 * pages of the same question are cut from it: the pages of one listing come from one moment.
 * A first page is always computed afresh (a dashboard's refresh sees new lines).
 */
import type { ClickHouseClient } from '../../../core/db/clickhouse.js';
import { BoundedCache, perClient } from '../../rollups/bounded-cache.js';
import type { Query } from './parse.js';
import type { OrderedGroups } from './shape.js';

export interface KeptSeries {
  /** The query of the page that computed it (its window is the answer's). */
  query: Query;
  ordered: OrderedGroups;
  at: number;
}

/** How long a series serves its later pages. */
export const SERIES_PAGES_MS = 10_000;
/** Groups kept per client at most (a group is some 200 bytes). */
const KEPT_GROUPS = 300_000;

const kept = new WeakMap<ClickHouseClient, BoundedCache<KeptSeries>>();
const cacheOf = (clickhouse: ClickHouseClient) => perClient(kept, clickhouse, () => new BoundedCache<KeptSeries>(KEPT_GROUPS, (k) => k.ordered.groups.length));

/**
 * The question without its page: the body's fields as validated and the domains as resolved (so a
 * caller reaches only series of domains it was just allowed to read).
 */
export const seriesKey = (body: object, domainIds: number[]) => JSON.stringify({ ...body, page: undefined, domains: domainIds });

/** The series kept for `key` if it is recent enough to serve a later page. */
export function keptSeries(clickhouse: ClickHouseClient, key: string, now: number): KeptSeries | undefined {
  const found = cacheOf(clickhouse).get(key);
  return found && now - found.at <= SERIES_PAGES_MS ? found : undefined;
}

/** Keeps a series that has more than one page. */
export function keepSeries(clickhouse: ClickHouseClient, key: string, series: KeptSeries): void {
  if (series.ordered.whole && series.ordered.total > series.query.limit) cacheOf(clickhouse).set(key, series);
}
