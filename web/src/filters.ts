/**
 * The dashboard's filters as the URL holds them (`f=is:url:/cart`, one parameter each, the value
 * last so that it may hold colons) and as the query endpoint takes them. Every chart and panel
 * of a page applies all of them.
 */

export type FilterOp = 'is' | 'isNot';
export type FilterValue = string | number | boolean;

export interface Filter {
  op: FilterOp;
  dimension: string;
  value: FilterValue;
}

/** What each dimension is called on the page. */
export const DIMENSION_LABELS: Record<string, string> = {
  url: 'URL',
  path: 'Path',
  statusCode: 'Status code',
  statusClass: 'Status class',
  method: 'Method',
  ipAddress: 'Client address',
  userAgent: 'User agent',
  referrer: 'Referrer',
  referrerHost: 'Referring site',
  browser: 'Browser',
  os: 'Operating system',
  device: 'Device',
  bot: 'Bot',
  botName: 'Bot name',
  botKind: 'Bot kind',
};

/** The dimensions whose values are not strings in the API. */
const NUMBERS = new Set(['statusCode']);
const BOOLEANS = new Set(['bot']);

function valueOf(dimension: string, text: string): FilterValue | undefined {
  if (NUMBERS.has(dimension)) return /^\d{1,3}$/.test(text) ? Number(text) : undefined;
  if (BOOLEANS.has(dimension)) return text === 'true' ? true : text === 'false' ? false : undefined;
  return text;
}

/** The URL's filters; malformed ones are left out (the API would refuse them with a 422 anyway). */
export function filtersOf(query: URLSearchParams): Filter[] {
  const filters: Filter[] = [];
  for (const param of query.getAll('f')) {
    const match = /^(is|isNot):([A-Za-z]+):([\s\S]*)$/.exec(param);
    if (!match || !(match[2]! in DIMENSION_LABELS)) continue;
    const value = valueOf(match[2]!, match[3]!);
    if (value !== undefined) filters.push({ op: match[1] as FilterOp, dimension: match[2]!, value });
  }
  return filters;
}

export const filterParam = (f: Filter) => `${f.op}:${f.dimension}:${String(f.value)}`;

/** The filters in the query endpoint's form. */
export const apiFilters = (filters: Filter[]) => filters.map((f) => [f.op, f.dimension, [f.value]]);

export const shownValue = (value: FilterValue) => (value === '' ? '(none)' : String(value));

export const filterLabel = (f: Filter) => `${DIMENSION_LABELS[f.dimension] ?? f.dimension} ${f.op === 'is' ? 'is' : 'is not'} ${shownValue(f.value)}`;
