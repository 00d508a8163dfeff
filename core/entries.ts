/**
 * The entries tailhouse stores, as ingest parses them and the API reads them back: both import
 * them from here.
 */

/** An nginx access-log line, parsed. Times are epoch milliseconds (UTC). */
export interface AccessEntry {
  timestamp: number;
  ipAddress: string;
  method: string;
  url: string;
  protocol: string;
  statusCode: number;
  responseSize: number;
  /** `""` when nginx logged `-`. */
  referrer: string;
  /** `""` when nginx logged `-`. */
  userAgent: string;
  /** Milliseconds ($request_time × 1000), or null when the format has no $request_time. */
  responseTime: number | null;
  /** `$host` or `$server_name` when the format has one: routes the line to its domain. */
  host: string | null;
}

export type ErrorLevel = 'error' | 'warn' | 'info' | 'debug';

/** An nginx error-log line, parsed. */
export interface ErrorEntry {
  timestamp: number;
  level: ErrorLevel;
  message: string;
  /** Whichever of client, server, request, upstream, host, referrer the line carries. */
  context: Record<string, string>;
}

/**
 * How an entry id is made (ingest/ids.ts hands the numbers out): segment number × 2^32 + the line's
 * byte offset within its segment, a segment being 4 GiB of one source (a file, a syslog listener's
 * run) seen from one domain. Within a segment ids rise with the line's position, which is the order
 * the ingest stores them in (the live tail reads by it).
 */
export const SEGMENT_BITS = 32;
export const SEGMENT_SIZE = 2 ** SEGMENT_BITS;

/** The segment number of an entry id. */
export const segmentOfId = (id: number): number => Math.floor(id / SEGMENT_SIZE);

/**
 * Why a line was kept in the rejects instead of being stored as an entry (ingest/transforms/rows.ts),
 * in a few fixed words: what rejects are counted and filtered by (the reason's text names the
 * line's own host, tag or parse error, too many values for a label).
 */
export const REJECT_CAUSES = ['unparsed', 'time_out_of_range', 'too_long', 'no_host', 'unknown_domain', 'ambiguous_context', 'not_syslog', 'unknown_syslog_tag', 'invalid_path_domain'] as const;
export type RejectCause = (typeof REJECT_CAUSES)[number];
