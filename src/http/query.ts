import { MINUTE_MS, DAY_MS } from '../../core/durations.js';
import { z } from '@hono/zod-openapi';
import { isStoredTime, STORED_TIME_RANGE_TEXT } from '../../core/db/time-range.js';

/**
 * A whole number written as plain decimal digits, between min and max. Stricter than
 * `z.coerce.number()`, which would take `1e3`, `0x10` or ` 7` as numbers.
 */
export const wholeNumber = (min: number, max: number, message = `must be a whole number from ${min} to ${max}`) => {
  return z
    .string({ message })
    .regex(/^\d{1,15}$/, { message })
    .transform(Number)
    .pipe(z.number().min(min, { message }).max(max, { message }))
    .openapi({ type: 'integer', minimum: min, maximum: max });
};

/** A whole number in a JSON body, between min and max. */
export const bodyWholeNumber = (min: number, max: number) => {
  const message = `must be a whole number from ${min} to ${max}`;
  return z.number({ message }).int({ message }).min(min, { message }).max(max, { message });
};

/**
 * How deep a page may reach: page × limit entries at most. Finding where a page starts means
 * skipping the entries before it: a search keeps the key of every skipped match in memory (16 bytes
 * each, 16 MB at this depth, and ClickHouse refuses the aggregate beyond 16.7 million), a filtered
 * listing reads the skipped rows' key columns. Older entries are reached by moving `endDate` back
 * to the oldest timestamp seen (both ends are inclusive, so nothing is skipped).
 */
export const MAX_PAGE_DEPTH = 1_000_000;
const PAGE_MAX = MAX_PAGE_DEPTH;

/** `page` and `limit` (docs/reference/http.md#paging) in a query string; log listings pass a higher `maxLimit`. Check the depth with checkPageDepth. */
export const pageQuery = (maxLimit = 100) => ({
  page: wholeNumber(1, PAGE_MAX).default(1).openapi({ type: 'integer', minimum: 1, maximum: PAGE_MAX, default: 1 }),
  limit: wholeNumber(1, maxLimit).default(20).openapi({ type: 'integer', minimum: 1, maximum: maxLimit, default: 20 }),
});

/** `page` and `limit` in a JSON body (the search, the stats query), with the same bounds as pageQuery. */
export const pageBody = (maxLimit: number, defaultLimit = 20) => ({
  page: bodyWholeNumber(1, PAGE_MAX).default(1),
  limit: bodyWholeNumber(1, maxLimit).default(defaultLimit),
});

/** A page past MAX_PAGE_DEPTH is a 422 on `page`, naming the deepest page for the limit. */
export const checkPageDepth = (value: { page: number; limit: number }, ctx: z.RefinementCtx) => {
  if (value.page * value.limit > MAX_PAGE_DEPTH) {
    const deepest = Math.floor(MAX_PAGE_DEPTH / value.limit);
    ctx.addIssue({
      code: 'custom',
      path: ['page'],
      message: `must be at most ${deepest} with limit ${value.limit}: pages reach ${MAX_PAGE_DEPTH} entries deep at most; for older entries set endDate to the oldest timestamp seen`,
    });
  }
};


const ISO_8601 = /^(\d{4})-(\d{2})-(\d{2})(?:[T ](\d{2}):(\d{2})(?::(\d{2})(?:[.,](\d{1,9}))?)?(Z|[+-]\d{2}(?::?\d{2})?)?)?$/i;

/**
 * Parses any ISO 8601 date or date-time; a time without an offset is UTC. A date alone is the
 * start of that day, or, as the end of a range (`endOfDay`), its last millisecond, so that
 * ranges include both ends.
 */
export function parseIsoDate(text: string, endOfDay = false): Date | null {
  const m = ISO_8601.exec(text.trim());
  if (!m) return null;
  const [, y, mo, d, h, mi, s, frac, zone] = m;
  const fields = [Number(y), Number(mo) - 1, Number(d), Number(h ?? 0), Number(mi ?? 0), Number(s ?? 0)] as const;
  const wall = new Date(Date.UTC(...fields));
  // Date.UTC rolls 2026-02-30 over into March (and maps years 0-99 to 1900-1999); a rolled-over
  // field means the text named no real time.
  if (
    wall.getUTCFullYear() !== fields[0] ||
    wall.getUTCMonth() !== fields[1] ||
    wall.getUTCDate() !== fields[2] ||
    wall.getUTCHours() !== fields[3] ||
    wall.getUTCMinutes() !== fields[4]
  ) {
    return null;
  }
  if (h === undefined) return new Date(wall.getTime() + (endOfDay ? DAY_MS - 1 : 0));
  let offsetMin = 0;
  if (zone && zone.toUpperCase() !== 'Z') {
    const digits = zone.slice(1).replace(':', '');
    const [offsetH, offsetM] = [Number(digits.slice(0, 2)), Number(digits.slice(2, 4) || '0')];
    if (offsetH > 23 || offsetM > 59) return null;
    offsetMin = (offsetH * 60 + offsetM) * (zone[0] === '-' ? -1 : 1);
  }
  const ms = frac ? Number(frac.slice(0, 3).padEnd(3, '0')) : 0;
  return new Date(wall.getTime() + ms - offsetMin * MINUTE_MS);
}

const DATE_MESSAGE = 'must be an ISO 8601 date, e.g. 2026-11-21T08:15:30Z';

/** A date of a query string or a JSON body, within STORED_TIME_RANGE (db/time-range.ts); as an end (`endOfDay`) a date alone is its last millisecond. */
export const isoDate = (endOfDay: boolean) =>
  z
    .string({ error: (issue) => (issue.input === undefined ? 'is required' : DATE_MESSAGE) })
    .transform((text, ctx) => {
      const date = parseIsoDate(text, endOfDay);
      if (!date) {
        ctx.addIssue({ code: 'custom', message: DATE_MESSAGE });
        return z.NEVER;
      }
      if (!isStoredTime(date.getTime())) {
        ctx.addIssue({ code: 'custom', message: `must be within ${STORED_TIME_RANGE_TEXT}` });
        return z.NEVER;
      }
      return date;
    })
    .openapi({ type: 'string', format: 'date-time', example: '2026-11-21T08:15:30.123Z', description: `Within ${STORED_TIME_RANGE_TEXT}` });

/** `startDate` and `endDate` (query string or JSON body), both ends included; `endDate` before `startDate` is a 422 on `endDate`. */
export const dateRangeQuery = <T extends boolean>(startRequired: T) => ({
  startDate: (startRequired ? isoDate(false) : isoDate(false).optional()) as T extends true
    ? ReturnType<typeof isoDate>
    : z.ZodOptional<ReturnType<typeof isoDate>>,
  endDate: isoDate(true).optional(),
});

export const checkDateOrder = (value: { startDate?: Date; endDate?: Date }, ctx: z.RefinementCtx) => {
  if (value.startDate && value.endDate && value.endDate < value.startDate) {
    ctx.addIssue({ code: 'custom', path: ['endDate'], message: 'must not be before startDate' });
  }
};

/** A path id: a positive whole number that fits a Postgres integer. */
export const idParam = (name: string) => wholeNumber(1, 2 ** 31 - 1, 'must be a positive whole number').openapi({ param: { name, in: 'path' }, example: 1 });
