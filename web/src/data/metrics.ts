/**
 * A query's figures by the names of the metrics asked. The API answers them as a list in the order
 * asked (`row.metrics[i]`): read by place, a metric added in the middle of a query would put the
 * wrong figure under every label after it.
 */
import type { DimensionValue, QueryRow } from './types.js';

export type Figures<M extends string> = Record<M, number | null>;

export interface NamedRow<M extends string> {
  dimensions: DimensionValue[];
  metrics: Figures<M>;
  /** With `compare`: each metric's change against the previous period. */
  change?: Figures<M>;
}

/** `values`, in the order of `names`, by name; a figure the answer lacks is null. */
export function named<M extends string>(names: readonly M[], values: readonly (number | null)[]): Figures<M> {
  return Object.fromEntries(names.map((name, i) => [name, values[i] ?? null])) as Figures<M>;
}

/** The rows of the answer to a query that asked `metrics`, their figures (and changes) by name. */
export function namedRows<M extends string>(metrics: readonly M[], rows: readonly QueryRow[]): NamedRow<M>[] {
  return rows.map((row) => ({ dimensions: row.dimensions, metrics: named(metrics, row.metrics), ...(row.change ? { change: named(metrics, row.change) } : {}) }));
}
