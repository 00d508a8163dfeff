import type { ServerOptions } from 'node:http';

/**
 * How long a request's line and headers may be together. Node's default (16 KiB) would refuse with
 * 431 a listing filtered by a long URL before it reaches the API: a logged URL may be as long as
 * URL_FILTER_MAX (64 KiB, src/logs/filters.ts) and takes up to three times as many bytes
 * percent-encoded in the query string, beside the other headers (a bearer token).
 */
export const MAX_REQUEST_HEAD_BYTES = 256 * 1024;

/** The options of `serve(…)`'s node:http server, for `tailhouse serve` and the tests' real servers. */
export const NODE_SERVER_OPTIONS: ServerOptions = { maxHeaderSize: MAX_REQUEST_HEAD_BYTES };
