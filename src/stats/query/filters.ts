/**
 * The query's filters: `[operator, dimension, [values…]]`, checked against the registry (the
 * operators a dimension takes, the values it takes) and normalised, so that a filter that passes
 * here always has SQL (where.ts). Filters combine with AND, the values of one filter with OR.
 *
 * | operator   | dimensions                               | matches |
 * |------------|------------------------------------------|---------|
 * | `is`       | every dimension but time                 | the value exactly (statusClass "5xx", bot true, domain by name) |
 * | `isNot`    | the same                                 | none of the values |
 * | `contains` | string dimensions                        | a case-insensitive substring |
 * | `glob`     | string dimensions                        | the whole value, `*` any run of characters (the listing's url glob) |
 * | `cidr`     | ipAddress                                | an address or a CIDR range, IPv4 or IPv6 (the listing's ipAddress) |
 */
import { z } from '@hono/zod-openapi';
import { filterText, ipAddressField, type IpRange } from '../../logs/filters.js';
import { DIMENSION_NAMES, dimensionByName, FILTER_OPS, type Dimension, type FilterOp } from '../registry.js';

export const MAX_FILTERS = 100;
export const MAX_FILTER_VALUES = 1000;

/**
 * What a request's filters may cost, checked before any SQL is built. Each `contains`, `glob` and
 * `cidr` value is a condition of its own that every row is tested against, and ClickHouse compiles
 * the text patterns together into one automaton first: a thousand long globs took seconds over a
 * day of rows and a few very long ones exceeded the pattern compiler's limit, where the bounds
 * below compile in a fraction of a second (bench/README, "bench/fair-reads"). An `is` value is one entry of a hash set, cheap by the thousand,
 * but all the values travel with the statement (in its URL for a ClickHouse server).
 */
export const FILTER_COST = {
  /** `contains`, `glob` and `cidr` values of a request together. */
  patterns: 100,
  /** Characters of all `contains` and `glob` values together. */
  patternCharsTotal: 10_000,
  /** Characters of all values of all filters together. */
  valueCharsTotal: 100_000,
} as const;

const PATTERN_OPS: readonly FilterOp[] = ['contains', 'glob', 'cidr'];

export type FilterValue = string | number | boolean | IpRange;

/** A filter as validated: plain data (names, not registry entries), like every validated input. */
export interface QueryFilter {
  op: FilterOp;
  dimension: string;
  values: FilterValue[];
}


const valueSchema = (dimension: Dimension, op: FilterOp): z.ZodType<FilterValue> => {
  switch (op) {
    case 'is':
    case 'isNot':
      return dimension.value;
    case 'contains':
    case 'glob':
      return filterText;
    case 'cidr':
      return ipAddressField;
  }
};

const SHAPE = 'must be [operator, dimension, [values…]]';
const opMessage = `must be one of ${FILTER_OPS.join(', ')}`;

/** One filter, parsed; issues name their place in it ([1] the dimension, [2][j] a value). */
const filterSchema = z
  .tuple(
    [
      z.enum(FILTER_OPS, { message: opMessage }),
      z.string({ message: 'must be a dimension name' }),
      z
        .array(z.unknown(), { message: 'must be an array of values' })
        .min(1, { message: 'must not be empty' })
        .max(MAX_FILTER_VALUES, { message: `must have at most ${MAX_FILTER_VALUES} values` }),
    ],
    { message: SHAPE },
  )
  .transform(([op, name, values], ctx): QueryFilter => {
    const dimension = dimensionByName.get(name);
    if (!dimension) {
      ctx.addIssue({ code: 'custom', path: [1], message: `must be a dimension: one of ${DIMENSION_NAMES.filter((n) => dimensionByName.get(n)!.ops.length > 0).join(', ')}` });
      return z.NEVER;
    }
    if (!dimension.ops.includes(op)) {
      const message = dimension.ops.length === 0 ? `${name} takes no filter (dateRange sets the window)` : `${op} does not apply to ${name}, which takes ${dimension.ops.join(', ')}`;
      ctx.addIssue({ code: 'custom', path: [0], message });
      return z.NEVER;
    }
    const schema = valueSchema(dimension, op);
    const parsed: FilterValue[] = [];
    for (const [j, value] of values.entries()) {
      const result = schema.safeParse(value);
      if (!result.success) {
        ctx.addIssue({ code: 'custom', path: [2, j], message: result.error.issues[0]?.message ?? 'is not a valid value' });
        return z.NEVER;
      }
      parsed.push(result.data);
    }
    return { op, dimension: name, values: parsed };
  });

const charsOf = (value: FilterValue) => (typeof value === 'string' ? value.length : String(value).length);

/** The request's filters together within FILTER_COST. */
function checkCost(filters: QueryFilter[], ctx: z.RefinementCtx): void {
  const issue = (message: string) => ctx.addIssue({ code: 'custom', message });
  const patterns = filters.filter((f) => PATTERN_OPS.includes(f.op)).flatMap((f) => f.values);
  if (patterns.length > FILTER_COST.patterns) return issue(`hold ${patterns.length} contains, glob and cidr values together, more than ${FILTER_COST.patterns}: each is tested against every row`);
  const patternChars = filters.filter((f) => f.op === 'contains' || f.op === 'glob').reduce((n, f) => n + f.values.reduce<number>((m, v) => m + charsOf(v), 0), 0);
  if (patternChars > FILTER_COST.patternCharsTotal) return issue(`hold ${patternChars} characters of contains and glob values together, more than ${FILTER_COST.patternCharsTotal}`);
  const valueChars = filters.reduce((n, f) => n + f.values.reduce<number>((m, v) => m + charsOf(v), 0), 0);
  if (valueChars > FILTER_COST.valueCharsTotal) issue(`hold ${valueChars} characters of values together, more than ${FILTER_COST.valueCharsTotal}`);
}

/** The body's `filters`. */
export const filtersField = z
  .array(filterSchema, { message: 'must be an array of filters' })
  .max(MAX_FILTERS, { message: `must have at most ${MAX_FILTERS} filters` })
  // Only over filters that all passed: one refused above is still its raw value here.
  .superRefine(checkCost, { when: (payload) => payload.issues.length === 0 })
  .default([])
  .openapi({
    type: 'array',
    items: {
      type: 'array',
      prefixItems: [{ type: 'string', enum: [...FILTER_OPS] }, { type: 'string', enum: DIMENSION_NAMES.filter((n) => dimensionByName.get(n)!.ops.length > 0) }, { type: 'array', minItems: 1, maxItems: MAX_FILTER_VALUES }],
      minItems: 3,
      maxItems: 3,
    },
    description:
      '`[operator, dimension, [values…]]`, combined with AND; any of the values matches (OR). `is`/`isNot` on every dimension but time (statusCode a number, ' +
      'statusClass "1xx"…"5xx", bot true/false, domain a name), `contains` (case-insensitive substring) and `glob` (the whole value, `*` any run) on string ' +
      'dimensions, `cidr` (addresses and CIDR ranges, IPv4 and IPv6) on ipAddress. Values up to 65,536 characters, at most 1000 per filter; ' +
      'a request holds at most 100 contains, glob and cidr values, 10,000 characters of contains and glob values, and 100,000 characters of values in all.',
    example: [
      ['is', 'statusClass', ['5xx']],
      ['glob', 'url', ['/api/*']],
      ['isNot', 'bot', [true]],
    ],
  });
