/**
 * The registered domains as the ingest worker sees them: name → id, read from Postgres and kept
 * for `refreshMs` (CONTRACT §6: a domain registered while running is picked up within 5 s, without
 * a restart). Lookups are synchronous, one per line; reloads happen between batches.
 */
import type { Db } from '../src/db/postgres.js';
import { domainIdsByName } from '../src/domains/store.js';

export const DOMAIN_REFRESH_MS = 5_000;

export interface DomainDirectory {
  /** The id of a registered domain name (lower-case), or undefined. */
  idOf(name: string): number | undefined;
  /** Reloads when the names are older than `maxAgeMs` (default: the refresh interval). */
  refresh(maxAgeMs?: number): Promise<void>;
}

export function createDomainDirectory(db: Db, refreshMs = DOMAIN_REFRESH_MS): DomainDirectory {
  let ids = new Map<string, number>();
  let loadedAt = -Infinity;
  let loading: Promise<void> | null = null;
  return {
    idOf: (name) => ids.get(name),
    async refresh(maxAgeMs = refreshMs) {
      if (Date.now() - loadedAt < maxAgeMs) return;
      // Sources share one directory: a reload under way serves them all.
      loading ??= (async () => {
        try {
          const startedAt = Date.now();
          ids = await domainIdsByName(db);
          loadedAt = startedAt;
        } finally {
          loading = null;
        }
      })();
      await loading;
    },
  };
}
