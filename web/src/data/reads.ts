/** Reads that several pages share. */
import { allPages, api, ApiError } from '../api.js';
import type { BatchItem, FiringAlert, ListedDomain, QueryAnswer } from './types.js';
import { useData } from './use-data.js';

/** Every domain the user sees, by name; with `ingest`, each with its last log line. */
export const allDomains = (ingest: boolean, signal: AbortSignal): Promise<ListedDomain[]> =>
  allPages<'domains', ListedDomain>(ingest ? '/api/domains?ingest=true' : '/api/domains', 'domains', signal);

/** The alerts firing now, by domain; null without alerts:read. */
export async function firingAlerts(signal: AbortSignal): Promise<Map<number, string[]> | null> {
  try {
    const { alerts } = await api<{ alerts: FiringAlert[] }>('GET', '/api/logs/alerts/firing', undefined, signal);
    const byDomain = new Map<number, string[]>();
    for (const a of alerts) byDomain.set(a.domainId, [...(byDomain.get(a.domainId) ?? []), a.name]);
    return byDomain;
  } catch (err) {
    if (err instanceof ApiError && err.status === 403) return null;
    throw err;
  }
}

/** A query's answer or error, in its place of a batch. */
export interface Answered {
  answer: QueryAnswer | null;
  error: unknown;
}

/** The answers of a batch of queries (POST /api/logs/query's batch form): a query that failed holds its error, the others their answers. */
export async function batch(bodies: readonly Record<string, unknown>[], signal: AbortSignal): Promise<Answered[]> {
  const { answers } = await api<{ answers: BatchItem[] }>('POST', '/api/logs/query', { queries: bodies }, signal);
  return answers.map((a) => (a.success ? { answer: a.data, error: null } : { answer: null, error: new ApiError(a.status, a.error, a.details) }));
}

/** The answers of a batch, asked again whenever the bodies change; each unanswered query `{answer: null, error: null}` until they come. */
export function useBatch(bodies: readonly Record<string, unknown>[]): Answered[] {
  // A layout effect sends the request before the browser paints, not after: the page's requests
  // (session, name, queries) follow one another, and each would otherwise wait for a paint.
  const read = useData([bodies], (signal) => batch(bodies, signal), { beforePaint: true });
  return read.data ?? bodies.map(() => ({ answer: null, error: read.error }));
}
