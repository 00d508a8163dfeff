import { z } from '@hono/zod-openapi';
import { accessFilterQuery, errorFilterQuery, type AccessFilters, type ErrorFilters } from '../filters.js';
import { MAX_CURSOR_TEXT, parseCursor, type Cursor, type EntryKind } from './cursor.js';

export const TAIL_TYPES = ['access', 'error', 'both'] as const;

const ACCESS_FILTER_NAMES = ['statusCode', 'ipAddress', 'url', 'method'] as const;

/**
 * The listings' filters (the access listing's and the error listing's query parameters) and
 * `type`. Without `type`, the entries the filters are about: access ones for access filters,
 * error ones for `level`, both for both or none. A `type` that leaves out every entry a given
 * filter is about is a 422 on that filter.
 */
export const tailQuery = z
  .object({
    ...accessFilterQuery,
    ...errorFilterQuery,
    type: z
      .enum(TAIL_TYPES, { message: `must be one of ${TAIL_TYPES.join(', ')}` })
      .optional()
      .openapi({ example: 'both', description: 'Which entries: `access`, `error` or `both`. Default: those the filters given are about (both when none or both kinds are given)' }),
  })
  .superRefine((q, ctx) => {
    if (q.type === 'error') {
      for (const name of ACCESS_FILTER_NAMES) {
        if (q[name] !== undefined) ctx.addIssue({ code: 'custom', path: [name], message: 'filters access entries, and type is error' });
      }
    }
    if (q.type === 'access' && q.level !== undefined) ctx.addIssue({ code: 'custom', path: ['level'], message: 'filters error entries, and type is access' });
  });

export type TailQuery = z.infer<typeof tailQuery>;

/** What a tail sends: which kinds of entries, and the filters of each. */
export interface TailSelection {
  kinds: ReadonlySet<EntryKind>;
  filters: { access: AccessFilters; error: ErrorFilters };
}

export function tailSelection(query: TailQuery): TailSelection {
  const { type, level, ...access } = query;
  const accessFiltered = ACCESS_FILTER_NAMES.some((name) => access[name] !== undefined);
  const errorFiltered = level !== undefined;
  const kinds: EntryKind[] =
    type === 'access' || (type === undefined && accessFiltered && !errorFiltered)
      ? ['access']
      : type === 'error' || (type === undefined && errorFiltered && !accessFiltered)
        ? ['error']
        : ['access', 'error'];
  return { kinds: new Set(kinds), filters: { access, error: { level } } };
}

const cursorMessage = 'must be the id of an event of this stream';

/** `Last-Event-ID`, which EventSource sends when it reconnects: the id of the last event received. */
export const tailHeaders = z.object({
  'last-event-id': z
    .string()
    .max(MAX_CURSOR_TEXT, { message: cursorMessage })
    .transform((text, ctx): Cursor => {
      const cursor = parseCursor(text, Date.now());
      if (cursor === null) {
        ctx.addIssue({ code: 'custom', message: cursorMessage });
        return z.NEVER;
      }
      return cursor;
    })
    .optional()
    .openapi({
      type: 'string',
      example: '1.a1z141z4.e1z1a6bk',
      description: 'Last-Event-ID: resume after this event; what was stored since, within the window, comes first (EventSource sends it by itself when it reconnects)',
    }),
});
