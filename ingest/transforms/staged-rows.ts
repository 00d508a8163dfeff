/**
 * Access lines read by ClickHouse itself (issue 32): a chunk's plain lines are inserted into
 * access_logs by one `INSERT … SELECT` from the `Regexp` input format, one parse per line in the
 * engine. This module turns a compiled log_format's shape (parsers/access-format.ts) into that
 * expression and its SQL; sinks/clickhouse-staged.ts runs the statement, staged-chunks.ts
 * prepares it.
 *
 * The SQL gives exactly what AccessLineParser gives for the lines it marks valid, and marks valid
 * only what it can read the same way. A chunk holding any other line (refused by the expression, a
 * time or number outside the simple shapes below) is read by the JavaScript parser instead, as are
 * lines that are not plain, so the rejects, the stretch reader and `\xHH` escapes stay where they are.
 * - Plain lines only: the expression is the parser's plain twin, whose classes refuse backslash,
 *   tab, line feed, carriage return and NUL, so no value holds an escape.
 * - Each line sent starts with its byte offset and a tab (the rows' ids derive from it); plain
 *   classes refuse tabs, so the offset cannot be mistaken for a value.
 * - RE2 picks the same submatches as JavaScript's expressions (leftmost-first, lazy `*?`); a group
 *   that took no part reads '' where JavaScript reads undefined, which `$request`'s reading allows
 *   for (its method group is never empty when its first alternative matched).
 * - User agents are classified in JavaScript before the insert: `agentOf` finds a plain line's agent
 *   by counting quotes, and the insert takes each row's class from a table of those classes.
 */
import type { AccessFormatShape } from '../parsers/access-format.js';

/** How ClickHouse reads a format's plain lines; null from `stagedReadingOf` when it cannot. */
export interface StagedReading {
  /** The `format_regexp` of the insert (RE2): the offset, a tab, the plain line. */
  regexp: string;
  /** The parsed lines' structure: `o` (the line's byte offset) and one String per capture group. */
  columns: string;
  /**
   * A subquery over `source` (the parsed lines) with the line's offset `o`, the access columns as
   * the sink writes them (timestamp_ms: epoch milliseconds) and `valid`: whether those are what the
   * parser reads.
   */
  rows(source: string): string;
  /**
   * The user agent as the parser reads it from a plain line the format matches ('' without
   * `$http_user_agent`): the line is `text` from `start` to `end` (its newline or the text's end).
   */
  agentOf(text: string, start: number, end: number): string;
}

/** Captured variables whose reading is not in SQL (yet): a format capturing one is read in JavaScript. */
const READ_IN_JAVASCRIPT = ['msec', 'request_method', 'request_uri', 'uri', 'args', 'query_string', 'server_protocol'];

const MONTHS = "['Jan','Feb','Mar','Apr','May','Jun','Jul','Aug','Sep','Oct','Nov','Dec']";
const EPOCH_DAYS = 719_528; // toDaysSinceYearZero of 1970-01-01

export function stagedReadingOf(shape: AccessFormatShape): StagedReading | null {
  const { plainPattern, groups, groupCount } = shape;
  if (plainPattern === null || !groups.has('time_local') || READ_IN_JAVASCRIPT.some((v) => groups.has(v))) return null;
  if (groups.has('http_user_agent') && shape.agentAfterQuotes === null) return null;
  const g = (...names: string[]): string | null => {
    const n = groups.get(names.find((name) => groups.has(name)) ?? '');
    return n === undefined ? null : `g${n}`;
  };
  const dashless = (column: string | null) => (column === null ? "''" : `if(${column} = '-', '', ${column})`);
  const t = g('time_local')!;
  const size = g('body_bytes_sent', 'bytes_sent');
  const requestTime = g('request_time');
  const request = g('request');
  const r = (k: number) => `g${groups.get('request')! + k}`;
  const userAgent = g('http_user_agent');

  // `21/Nov/2026:08:15:30 +0100`: the parser's fields, and its checks (a real day, h ≤ 23, m ≤ 59).
  // Years are kept well inside the stored range and seconds below 60: the edges (1970, 2106, a leap
  // second) are left to the parser, which rejects or accepts them as it always has.
  const time = [
    `toUInt8(substring(${t}, 1, 2)) AS t_day`,
    `indexOf(${MONTHS}, substring(${t}, 4, 3)) AS t_month`,
    `toUInt16(substring(${t}, 8, 4)) AS t_year`,
    `makeDate32(t_year, greatest(t_month, 1), t_day) AS t_date`,
    `toInt64(substring(${t}, 13, 2)) * 3600 + toInt64(substring(${t}, 16, 2)) * 60 + toInt64(substring(${t}, 19, 2)) AS t_seconds`,
    `if(substring(${t}, 22, 1) = '-', -1, 1) * (toInt64(substring(${t}, 23, 2)) * 60 + toInt64(substring(${t}, 25, 2))) AS t_offset`,
  ];
  const timeValid = `t_month > 0 AND toDayOfMonth(t_date) = t_day AND toMonth(t_date) = t_month AND t_year BETWEEN 1971 AND 2105
    AND substring(${t}, 13, 2) <= '23' AND substring(${t}, 16, 2) <= '59' AND substring(${t}, 19, 2) <= '59'`;
  const timestampMs = `((toInt64(toDaysSinceYearZero(t_date)) - ${EPOCH_DAYS}) * 86400 + t_seconds - t_offset * 60) * 1000`;

  // Counts of at most 15 digits are exact as JavaScript numbers; longer ones are the parser's.
  const sizeValue = size === null ? '0' : `if(${size} = '-', 0, toUInt64OrZero(${size}))`;
  const sizeValid = size === null ? '1' : `length(${size}) <= 15`;
  // $request_time as nginx writes it, seconds with three decimals: the milliseconds exactly (the
  // parser's Math.round(seconds × 1000), capped to UInt32). Other shapes are the parser's.
  const timeTaken =
    requestTime === null
      ? 'CAST(NULL AS Nullable(UInt32))'
      : `if(${requestTime} = '-', NULL, toUInt32(least(toUInt64OrZero(splitByChar('.', ${requestTime})[1]) * 1000 + toUInt64OrZero(splitByChar('.', ${requestTime})[2]), 4294967295)))`;
  const timeTakenValid = requestTime === null ? '1' : `${requestTime} = '-' OR match(${requestTime}, '^[0-9]{1,9}[.][0-9]{3}$')`;

  // $request's four groups: method, target, protocol; or the whole text (no method token).
  const method = request === null ? "''" : r(0);
  const url = request === null ? "''" : `if(${r(0)} = '', ${dashless(r(3))}, ${r(1)})`;
  const protocol = request === null ? "''" : r(2);

  const columns = ['o UInt64', ...Array.from({ length: groupCount }, (_, i) => `g${i + 1} String`)].join(', ');
  return {
    // JavaScript's `\0` in the plain classes is RE2's `\x00`; the rest is written alike.
    regexp: `^(\\d+)\\t${plainPattern.replaceAll('\\0', '\\x00')}$`,
    columns,
    agentOf: shape.agentAfterQuotes === null ? () => '' : agentAfter(shape.agentAfterQuotes),
    rows: (source) => `SELECT o, ${time.join(', ')},
        ${timestampMs} AS timestamp_ms,
        ${dashless(g('remote_addr', 'realip_remote_addr'))} AS ip_address,
        ${method} AS method, ${url} AS url, ${protocol} AS protocol,
        ${g('status') === null ? '0' : `toUInt16(${g('status')})`} AS status_code,
        ${sizeValue} AS response_size,
        ${dashless(g('http_referer'))} AS referrer,
        ${dashless(userAgent)} AS user_agent,
        ${timeTaken} AS response_time,
        (${timeValid}) AND (${sizeValid}) AND (${timeTakenValid}) AS valid
      FROM ${source}`,
  };
}

/** The value after the `quotes`-th quote of a line, up to the next quote, `-` read as ''. */
function agentAfter(quotes: number): StagedReading['agentOf'] {
  return (text, start, end) => {
    let at = start - 1;
    for (let n = 0; n < quotes; n++) {
      at = text.indexOf('"', at + 1);
      // A line without that many quotes: the format's expression refuses it, whatever this says.
      if (at === -1 || at >= end) return '';
    }
    const close = text.indexOf('"', at + 1);
    if (close === -1 || close > end) return '';
    return close === at + 2 && text.charCodeAt(at + 1) === 0x2d ? '' : text.slice(at + 1, close);
  };
}
