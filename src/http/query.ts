import { z } from '@hono/zod-openapi';

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

/** `page` and `limit` of CONTRACT §3; log listings pass a higher `maxLimit`. */
export const pageQuery = (maxLimit = 100) => ({
  page: wholeNumber(1, 1e12, 'must be a whole number of 1 or more').default(1).openapi({ type: 'integer', minimum: 1, default: 1 }),
  limit: wholeNumber(1, maxLimit).default(20).openapi({ type: 'integer', minimum: 1, maximum: maxLimit, default: 20 }),
});

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
  if (h === undefined) return new Date(wall.getTime() + (endOfDay ? 86_400_000 - 1 : 0));
  let offsetMin = 0;
  if (zone && zone.toUpperCase() !== 'Z') {
    const digits = zone.slice(1).replace(':', '');
    const [offsetH, offsetM] = [Number(digits.slice(0, 2)), Number(digits.slice(2, 4) || '0')];
    if (offsetH > 23 || offsetM > 59) return null;
    offsetMin = (offsetH * 60 + offsetM) * (zone[0] === '-' ? -1 : 1);
  }
  const ms = frac ? Number(frac.slice(0, 3).padEnd(3, '0')) : 0;
  return new Date(wall.getTime() + ms - offsetMin * 60_000);
}

const isoDate = (endOfDay: boolean) =>
  z
    .string()
    .transform((text, ctx) => {
      const date = parseIsoDate(text, endOfDay);
      if (!date) {
        ctx.addIssue({ code: 'custom', message: 'must be an ISO 8601 date, e.g. 2026-11-21T08:15:30Z' });
        return z.NEVER;
      }
      return date;
    })
    .openapi({ type: 'string', format: 'date-time', example: '2026-11-21T08:15:30.123Z' });

/** `startDate` and `endDate`, both ends included; `endDate` before `startDate` is a 422 on `endDate`. */
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
