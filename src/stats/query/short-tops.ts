/**
 * A top page of a list's keys over many buckets (the dashboard's pages by requests and by time
 * spent, over 30 days), proven from the built buckets' short lists (the registry's SHORT_LISTS)
 * instead of grouping their full rows: 30 days of the 10M-row bench hold 3.9 million path rows,
 * their short lists a few hundred keys (bench/README, "Issue 31").
 *
 * The proof, as GET …/stats makes it (src/stats/figures.ts): in a covered bucket (a built one
 * whose short list is current), a key of its list has its exact sums, and a key out of it has at
 * most the list's threshold of the ranking sum. So a key's sum over the window is at least what
 * the lists holding it and the edges (the raw ranges, the built buckets without lists, read in
 * full) give, `ranked`, and at most that plus the thresholds of the lists not holding it, `upper`;
 * a key in no list nor edge has at most every threshold, summed. The page stands when each of its
 * keys and those before it is exact (ranked = upper: every covered list holds it) and the last of
 * them ranks strictly above what any other key can have; otherwise the query reads the full rows
 * (sql.ts groupsSql), exact either way. The count of groups is then only a lower bound, the keys
 * seen (the answer says so: meta.totalIsLowerBound).
 */
import { selectPage, type ClickHouseClient } from '../../../core/db/clickhouse.js';
import { planConditions, builtBuckets, type HourRows, type WindowPlan } from '../../rollups/plan.js';
import { shortListsOf, TOP_KEYS, type KeptList } from '../../rollups/short-lists.js';
import { SHORT_LISTS, type ShortList } from '../registry.js';
import type { Query, Window } from './parse.js';
import { partialsOf, shortTopSql, type ShortSums } from './sql.js';

/**
 * The short list a query's page may be proven from, or null: one domain (lists are per domain),
 * one dimension whose groups are each one key of the query's rollup rows (RollupRows.keyPerGroup:
 * the key itself, or the path of one error status), filters over the key's values (not the
 * domain), a window of several buckets (no time dimension), ordered by a metric ranked by a sum
 * with a short list (Metric.rankedBy) descending and then by the dimension, and a page within the
 * lists' length.
 */
export function shortListOf(query: Query): ShortList | null {
  const rows = query.rollup?.rows;
  if (!rows || query.timeIndex >= 0 || query.domains.length !== 1 || query.dimensions.length !== 1) return null;
  const dimension = query.dimensions[0]!;
  const keyPerGroup = rows.keyPerGroup ? rows.keyPerGroup(dimension.name, query.filters) : dimension.rollup === 'key';
  if (!keyPerGroup || query.filters.some((f) => f.dimension === 'domain')) return null;
  const [first, then, ...more] = query.orderBy;
  if (first?.of !== 'metric' || !first.desc || then?.of !== 'dimension' || then.desc || more.length > 0) return null;
  if (query.page * query.limit > TOP_KEYS) return null;
  const by = query.metrics[first.index]!.rankedBy;
  return SHORT_LISTS.find((s) => s.list.dim === rows.dim && s.by === by) ?? null;
}

/** The covered buckets' lists summed per key, for the query's partials. */
function shortSumsOf(query: Query, lists: readonly KeptList[]): ShortSums {
  const partials = partialsOf(query);
  const byKey = new Map<string, { sums: number[]; held: number }>();
  let threshold = 0;
  for (const list of lists) {
    threshold += list.threshold;
    const columns = partials.map((x) => list.sums.get(x.name)!);
    list.keys.forEach((key, k) => {
      const entry = byKey.get(key) ?? { sums: partials.map(() => 0), held: 0 };
      columns.forEach((column, i) => (entry.sums[i]! += column[k]!));
      entry.held += list.threshold;
      byKey.set(key, entry);
    });
  }
  const entries = [...byKey];
  return {
    keys: entries.map(([key]) => key),
    sums: partials.map((_, i) => entries.map(([, e]) => e.sums[i]!)),
    held: entries.map(([, e]) => e.held),
    threshold,
  };
}

/** A candidate as shortTopSql reads it: its sum `ranked`, its bound `upper`, and the largest bound of those after it, `beyond`. */
export interface Ranked {
  ranked: number;
  upper: number;
  beyond: number;
}

/**
 * Whether the first `n` of `rows` (shortTopSql's, in the query's order) are the exact first n:
 * each exact, and the n-th's sum strictly above (a tie could reorder them) the bound of every key
 * after it and the thresholds summed (what a key seen nowhere has at most).
 */
export function provesPage(rows: readonly Ranked[], n: number, threshold: number): boolean {
  if (n === 0 || rows.length < n) return false;
  const page = rows.slice(0, n);
  if (page.some((r) => r.upper !== r.ranked)) return false;
  return Math.max(threshold, page[n - 1]!.beyond) < page[n - 1]!.ranked;
}

/**
 * The query's page proven from the short lists of the plan's built buckets (`rows`: the domain's
 * rows counted per hour, which give each bucket's version), with the count of groups seen; null
 * where the proof does not hold or no bucket has its short list (the caller reads the full rows).
 */
export async function provenPage(clickhouse: ClickHouseClient, query: Query, window: Window, plan: WindowPlan, rows: HourRows, list: ShortList): Promise<{ rows: Record<string, unknown>[]; total: number } | null> {
  const covered = await shortListsOf(clickhouse, query.domains[0]!.id, builtBuckets(plan, rows), [list]);
  if (covered.length === 0) return null;
  const c = planConditions({ ...plan, listed: covered.map((b) => b.bucket) });
  const sums = shortSumsOf(query, covered.map((b) => b.lists[0]!));
  const n = query.page * query.limit;
  const built = shortTopSql(query, window, { ...c, built: c.unlisted }, sums, list.by, n);
  const read = await selectPage<Record<string, unknown>>(clickhouse, built.query, built.params);
  const ranked = read.rows.map((r) => ({ ranked: Number(r.ranked), upper: Number(r.upper), beyond: Number(r.beyond) }));
  if (!provesPage(ranked, n, sums.threshold)) return null;
  return { rows: read.rows.slice(n - query.limit).map(({ ranked: _, upper: __, beyond: ___, ...row }) => row), total: read.total };
}
