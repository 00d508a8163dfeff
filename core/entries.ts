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
