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

/** The body's `filters`. */
export const filtersField = z
  .array(filterSchema, { message: 'must be an array of filters' })
  .max(MAX_FILTERS, { message: `must have at most ${MAX_FILTERS} filters` })
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
      'dimensions, `cidr` (addresses and CIDR ranges, IPv4 and IPv6) on ipAddress. Values up to 65,536 characters, at most 1000 per filter.',
    example: [
      ['is', 'statusClass', ['5xx']],
      ['glob', 'url', ['/api/*']],
      ['isNot', 'bot', [true]],
    ],
  });
