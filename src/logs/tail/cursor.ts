/**
 * Where a live tail stands: per table and per id segment (ingest/ids.ts), the highest entry id it
 * has passed over. Within a segment (one source file, or one syslog listener's run, seen from one
 * domain) ids rise with the line's position, and the ingest writes a source's batches one after
 * the other, so the rows of a segment become visible in id order: "the id after which a segment is
 * read" is a position in the order in which its entries were stored.
 *
 * A segment without a mark owes every row dated inside the tail's window. A mark is dropped once
 * every row passed over in its segment is dated before the window (`pruneCursor`): those rows can
 * no longer be read, so no row could be sent twice.
 *
 * The text form is the SSE event id a client sends back as `Last-Event-ID`: `1` (the form's
 * version), then `.a<id>` per access segment and `.e<id>` per error segment, ids in base 36, e.g.
 * `1.a1z141z4.e1z1a6bk`. The segment is part of the id, so the ids alone say everything.
 */
import { segmentOfId } from '../../../core/entries.js';

export const ENTRY_KINDS = ['access', 'error'] as const;
export type EntryKind = (typeof ENTRY_KINDS)[number];

/** The highest id passed over in one segment, and the newest time among the rows passed over there. */
export interface Mark {
  id: number;
  /** Epoch milliseconds; when only the id is known (a resumed cursor), the time it was resumed. */
  ms: number;
}

/** Per kind, per segment number. */
export type Cursor = Record<EntryKind, Map<number, Mark>>;

export const emptyCursor = (): Cursor => ({ access: new Map(), error: new Map() });

export const copyCursor = (cursor: Cursor): Cursor => ({
  access: new Map([...cursor.access].map(([segment, mark]) => [segment, { ...mark }])),
  error: new Map([...cursor.error].map(([segment, mark]) => [segment, { ...mark }])),
});

/** Whether the row (kind, id) is after the cursor, that is, owed by it. */
export const owes = (cursor: Cursor, kind: EntryKind, id: number): boolean => id > (cursor[kind].get(segmentOfId(id))?.id ?? 0);

/** Moves the cursor over the row (kind, id) dated `ms`, if it is not past it already. */
export function passOver(cursor: Cursor, kind: EntryKind, id: number, ms: number): void {
  const segment = segmentOfId(id);
  const mark = cursor[kind].get(segment);
  if (!mark) cursor[kind].set(segment, { id, ms });
  else {
    mark.id = Math.max(mark.id, id);
    mark.ms = Math.max(mark.ms, ms);
  }
}

/** Drops the marks whose rows are all dated before `since` (epoch ms). */
export function pruneCursor(cursor: Cursor, since: number): void {
  for (const kind of ENTRY_KINDS) {
    for (const [segment, mark] of cursor[kind]) if (mark.ms < since) cursor[kind].delete(segment);
  }
}

/**
 * Per segment of `kind`, the lowest id of the cursors: what a read serving all of them must start
 * after. A segment one of them has no mark for is read from its first row in the window, so it is
 * left out.
 */
export function lowestMarks(cursors: readonly Cursor[], kind: EntryKind): Map<number, number> {
  const [first, ...rest] = cursors;
  const lowest = new Map<number, number>();
  if (!first) return lowest;
  for (const [segment, mark] of first[kind]) {
    let id = mark.id;
    for (const other of rest) {
      const theirs = other[kind].get(segment);
      if (!theirs) {
        id = -1;
        break;
      }
      id = Math.min(id, theirs.id);
    }
    if (id >= 0) lowest.set(segment, id);
  }
  return lowest;
}

const VERSION = '1';
const LETTER: Record<EntryKind, string> = { access: 'a', error: 'e' };

/** Marks a cursor's text may hold: far more segments than a domain writes within a tail's window. */
export const MAX_CURSOR_MARKS = 256;

/** The longest cursor text: a mark is at most 13 characters (`.a` and 11 base-36 digits below 2^53). */
export const MAX_CURSOR_TEXT = VERSION.length + MAX_CURSOR_MARKS * 13;

export function encodeCursor(cursor: Cursor): string {
  let text = VERSION;
  for (const kind of ENTRY_KINDS) for (const mark of cursor[kind].values()) text += `.${LETTER[kind]}${mark.id.toString(36)}`;
  return text;
}

const MARK = /^([ae])([0-9a-z]{1,11})$/;

/** The cursor of a text made by encodeCursor, its marks dated `now`; null when the text is no such cursor. */
export function parseCursor(text: string, now: number): Cursor | null {
  const [version, ...marks] = text.split('.');
  if (version !== VERSION || marks.length > MAX_CURSOR_MARKS) return null;
  const cursor = emptyCursor();
  for (const part of marks) {
    const m = MARK.exec(part);
    if (!m) return null;
    const id = parseInt(m[2]!, 36);
    const kind: EntryKind = m[1] === 'a' ? 'access' : 'error';
    const segment = segmentOfId(id);
    // One mark per segment, as encodeCursor writes them.
    if (!Number.isSafeInteger(id) || id <= 0 || cursor[kind].has(segment)) return null;
    cursor[kind].set(segment, { id, ms: now });
  }
  return cursor;
}
