/**
 * Text the stores can hold. Postgres `text` and `jsonb` refuse U+0000 (the insert fails), and an
 * unpaired UTF-16 surrogate has no UTF-8 form: the drivers would store U+FFFD instead, silently
 * another value than the one sent (and compared later). Every validated input (path, query string
 * and JSON body of every route, src/http/router.ts) is checked here once, so no field needs a rule
 * of its own and none can be forgotten.
 */

/** A NUL, or a surrogate not part of a pair (with the `u` flag a pair is one code point, not \p{Cs}). */
const UNSTORABLE = /\u0000|\p{Cs}/u;

export const UNSTORABLE_MESSAGE = 'must not contain NUL characters or unpaired UTF-16 surrogates';

/**
 * The top-level field of `data` (a validated input: an object of fields) holding a string or an
 * object key with unstorable text anywhere inside it; '' when `data` itself is such a string; null
 * when all is storable. Walks with a stack of its own, so nesting depth costs no call stack.
 */
export function unstorableField(data: unknown): string | null {
  const top = data !== null && typeof data === 'object' && !Array.isArray(data) && !(data instanceof Date) ? Object.entries(data) : [['', data] as const];
  for (const [field, value] of top) {
    if (UNSTORABLE.test(field)) return field;
    const stack: unknown[] = [value];
    while (stack.length > 0) {
      const item = stack.pop();
      if (typeof item === 'string') {
        if (UNSTORABLE.test(item)) return field;
      } else if (Array.isArray(item)) {
        stack.push(...item);
      } else if (item !== null && typeof item === 'object' && !(item instanceof Date)) {
        for (const [key, inner] of Object.entries(item)) {
          if (UNSTORABLE.test(key)) return field;
          stack.push(inner);
        }
      }
    }
  }
  return null;
}
