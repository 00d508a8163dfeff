/**
 * nginx error-log lines:
 *
 *   2026/11/21 08:15:30 [error] 1234#5678: *99 open() "/srv/x" failed (2: No such file or directory),
 *     client: 203.0.113.7, server: shop.example.com, request: "GET /x HTTP/1.1", host: "shop.example.com"
 *
 * The `*CONN ` part (the connection's number) and the trailing context are optional. nginx
 * appends the context in a fixed order (client, server, request, subrequest, upstream, host,
 * referrer) and does not escape it, so it is matched as one anchored tail: the first `, client: `
 * from which the rest of the line reads as that sequence starts it, and a `, client: ` inside the
 * message (a file name taken from a URL) stays part of the message. A line whose context does not
 * read that way (nginx cuts lines at 2048 bytes) keeps all its text as the message.
 *
 * The request line is logged as the client sent it, quotes included, so `request: "GET /x",
 * host: "other.example HTTP/1.1"` can be one forged request value. A request nginx accepted ends
 * with its protocol, so a split whose request ends in ` HTTP/n.n` is preferred. `[debug]` lines never
 * carry context (ngx_log_error_core appends it for the other levels only): their text is all message.
 *
 * An entry may span lines: nginx writes the raw line breaks a message holds (a file name from a
 * request for `/a%0d%0ab`). The file readers join them (line-cutter.ts, startsErrorEntry), syslog
 * has one message per datagram; the message keeps them as written.
 *
 * Which context is nginx's own cannot always be told: a decoded request path in the message can
 * hold a whole forged context that swallows the real one (`…, server: victim.example, …, host: "x`
 * up to the real tail's last quote), and the referrer, which comes last, can hold one too. Every
 * reading is therefore looked at, and a line whose readings name different servers or hosts is
 * marked `contextAmbiguous`: whoever routes entries by their context must not trust it.
 */
import type { ErrorEntry, ErrorLevel } from '../../core/entries.js';
import type { ParseResult } from '../types.js';
import { d2, wallTime, zonedWallTimeToEpoch } from './time.js';

/** nginx's eight levels folded onto four (docs/reference/logs.md#error-entries). */
const LEVELS = new Map<string, ErrorLevel>([
  ['emerg', 'error'], ['alert', 'error'], ['crit', 'error'], ['error', 'error'],
  ['warn', 'warn'],
  ['notice', 'info'], ['info', 'info'],
  ['debug', 'debug'],
]);

const PREFIX = /^\d{4}\/\d{2}\/\d{2} \d{2}:\d{2}:\d{2} \[([a-z]+)\] \d+#\d+: (?:\*\d+ )?/;
const ENTRY_START = /^\d{4}\/\d{2}\/\d{2} \d{2}:\d{2}:\d{2} \[[a-z]+\] \d+#\d+: /;

/**
 * Whether `text` begins an error-log entry (`YYYY/MM/DD HH:MM:SS [level] PID#TID: `). A line that
 * does not continues the entry before it: nginx writes a message's raw line breaks (a request for
 * `/a%0d%0ab` gives `open() "/srv/a\r` and `b" failed …` on the next line).
 */
export const startsErrorEntry = (text: string): boolean => ENTRY_START.test(text);

const CONTEXT_KEYS = ['client', 'server', 'request', 'subrequest', 'upstream', 'host', 'referrer'] as const;
// `s`: a request line may hold a stray CR. Quoted values are lazy so each stops at the closing quote
// that the next key (or the end of the line) follows.
const contextPattern = (request: string) =>
  new RegExp(`, client: ([^ ,]*)(?:, server: ([^,]*))?(?:, request: "(${request})")?(?:, subrequest: "(.*?)")?(?:, upstream: "(.*?)")?(?:, host: "(.*?)")?(?:, referrer: "(.*?)")?$`, 'ys');
// First a request ending with its protocol, then any.
const CONTEXTS = [contextPattern('.*? HTTP/\\d(?:\\.\\d)?'), contextPattern('.*?')];

/**
/** A parsed error line; `contextAmbiguous`: its context also reads another way that names another server or host. */
export type ErrorLineResult = { ok: true; entry: ErrorEntry; contextAmbiguous: boolean } | Extract<ParseResult<ErrorEntry>, { ok: false }>;

/** The name an entry is routed by: the context's `server` (from nginx's configuration), else its `host`. */
export const routingNameOf = (context: Record<string, string>): string | null => context.server ?? context.host ?? null;

/** The context read from the `, client: ` at `at` to the end of the line by `pattern`, or null. */
function contextAt(line: string, at: number, pattern: RegExp): Record<string, string> | null {
  pattern.lastIndex = at;
  const c = pattern.exec(line);
  if (c === null) return null;
  const context: Record<string, string> = {};
  CONTEXT_KEYS.forEach((key, i) => {
    const value = c[i + 1];
    if (value !== undefined) context[key] = value;
  });
  return context;
}

/** Whether any other reading of the line's context (at another `, client: `) routes elsewhere than `chosen`. */
function readsElsewhere(line: string, start: number, chosenAt: number, chosen: Record<string, string>): boolean {
  const name = routingNameOf(chosen);
  for (let at = line.indexOf(', client: ', start); at !== -1; at = line.indexOf(', client: ', at + 1)) {
    if (at === chosenAt) continue;
    for (const pattern of CONTEXTS) {
      const other = contextAt(line, at, pattern);
      if (other !== null && routingNameOf(other) !== name) return true;
    }
  }
  return false;
}

/**
 * Parses one error-log line. Its time carries no zone and is read in the IANA `timezone`; an
 * unknown zone name throws a RangeError (a configuration error, not a property of the line).
 * `context` holds the keys the line carries, `subrequest` included when nginx wrote one.
 */
export function parseErrorLine(line: string, timezone = 'UTC'): ErrorLineResult {
  const m = PREFIX.exec(line);
  if (m === null) {
    if (line === '') return { ok: false, reason: 'empty line' };
    return { ok: false, reason: `not an nginx error-log line: expected "YYYY/MM/DD HH:MM:SS [level] PID#TID: ", found ${JSON.stringify(line.slice(0, 40))}` };
  }
  const level = LEVELS.get(m[1]!);
  if (level === undefined) return { ok: false, reason: `unknown level [${m[1]}]` };
  const wall = wallTime(d2(line, 0) * 100 + d2(line, 2), d2(line, 5) - 1, d2(line, 8), d2(line, 11), d2(line, 14), d2(line, 17));
  if (Number.isNaN(wall)) return { ok: false, reason: `invalid time ${JSON.stringify(line.slice(0, 19))}` };
  const timestamp = zonedWallTimeToEpoch(wall, timezone);
  const start = m[0].length;
  if (level !== 'debug') {
    for (const pattern of CONTEXTS) {
      for (let at = line.indexOf(', client: ', start); at !== -1; at = line.indexOf(', client: ', at + 1)) {
        const context = contextAt(line, at, pattern);
        if (context === null) continue;
        return { ok: true, entry: { timestamp, level, message: line.slice(start, at), context }, contextAmbiguous: readsElsewhere(line, start, at, context) };
      }
    }
  }
  return { ok: true, entry: { timestamp, level, message: line.slice(start), context: {} }, contextAmbiguous: false };
}
