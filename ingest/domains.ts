/**
 * The registered domains as the ingest worker sees them: name → id, read from Postgres and kept
 * for `refreshMs` (docs/reference/ingest.md#domains: a domain registered while running is picked up without a restart).
 * Lookups are synchronous, one per line; reloads happen between batches.
 *
 * A source whose domain is not registered yet waits for it (`waitFor`) and starts reading within a
 * second of its registration. The waiting sources share one poll: every WAITING_POLL_MS one small
 * indexed query asks for the names they wait for, whatever their number, and none runs while no
 * source waits. A poll is the one way that works in both modes: in server mode the registration
 * happens in another process (the API, the CLI), and a notification would need a connection of its
 * own held open by every worker.
 */
import type { Db } from '../core/db/postgres.js';
import { domainIdsByName, domainIdsOf, registerDomain, userIdByEmail } from './domain-store.js';
import type { Logger } from '../core/log.js';

export const DOMAIN_REFRESH_MS = 5_000;
/** How often the names waited for are looked up: a registration is seen within this (plus a query). */
export const WAITING_POLL_MS = 500;

export interface DomainDirectory {
  /** The id of a registered domain name (lower-case), or undefined. */
  idOf(name: string): number | undefined;
  /** Reloads when the names are older than `maxAgeMs` (default: the refresh interval). */
  refresh(maxAgeMs?: number): Promise<void>;
  /**
   * Resolves with the id of `name` once it is registered (at once if it is known already), or with
   * undefined when `signal` aborts. A failed lookup is logged and tried again at the next poll.
   */
  waitFor(name: string, signal: AbortSignal): Promise<number | undefined>;
  /**
   * Registers `name` owned by the user with e-mail `owner` (a source's `register`), unless it is
   * registered already; its id, or undefined when no such user exists (logged).
   */
  register(name: string, owner: string): Promise<number | undefined>;
}

export interface DomainDirectoryOptions {
  log: Logger;
  refreshMs?: number;
  waitingPollMs?: number;
}

export function createDomainDirectory(db: Db, options: DomainDirectoryOptions): DomainDirectory {
  const { log, refreshMs = DOMAIN_REFRESH_MS, waitingPollMs = WAITING_POLL_MS } = options;
  let ids = new Map<string, number>();
  let loadedAt = -Infinity;
  let loading: Promise<void> | null = null;
  /** Name → the resolvers of the sources waiting for it. */
  const waiters = new Map<string, Set<(id: number | undefined) => void>>();
  let timer: NodeJS.Timeout | null = null;
  let polling = false;
  let failing = false;

  const schedulePoll = () => {
    if (timer || polling || waiters.size === 0) return;
    timer = setTimeout(() => {
      timer = null;
      void poll();
    }, waitingPollMs);
  };

  const poll = async () => {
    polling = true;
    try {
      const found = await domainIdsOf(db, [...waiters.keys()]);
      if (failing) log.info('reading the domains waited for: succeeded again');
      failing = false;
      for (const [name, id] of found) {
        ids.set(name, id);
        for (const resolve of waiters.get(name) ?? []) resolve(id);
        waiters.delete(name);
      }
    } catch (err) {
      // Logged once per run of failures; the sources stay `waiting for domain` meanwhile.
      if (!failing) log.warn({ err: err instanceof Error ? err.message : String(err) }, 'reading the domains waited for failed: trying again');
      failing = true;
    } finally {
      polling = false;
      schedulePoll();
    }
  };

  return {
    idOf: (name) => ids.get(name),
    async register(name, owner) {
      const known = ids.get(name);
      if (known !== undefined) return known;
      const ownerId = await userIdByEmail(db, owner);
      if (ownerId === undefined) {
        log.warn({ domain: name, owner }, 'cannot register the domain a path names: its owner is no user (register.owner)');
        return undefined;
      }
      const { id, created } = await registerDomain(db, name, ownerId);
      if (created) log.info({ domain: name, domainId: id, ownerId }, 'registered the domain a log file path names');
      ids.set(name, id);
      return id;
    },
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
    waitFor(name, signal) {
      const known = ids.get(name);
      if (known !== undefined) return Promise.resolve(known);
      if (signal.aborted) return Promise.resolve(undefined);
      return new Promise((resolve) => {
        let set = waiters.get(name);
        if (!set) waiters.set(name, (set = new Set()));
        const done = (id: number | undefined) => {
          signal.removeEventListener('abort', onAbort);
          resolve(id);
        };
        const onAbort = () => {
          set.delete(done);
          if (set.size === 0 && waiters.get(name) === set) waiters.delete(name);
          if (waiters.size === 0 && timer) {
            clearTimeout(timer);
            timer = null;
          }
          done(undefined);
        };
        set.add(done);
        signal.addEventListener('abort', onAbort, { once: true });
        schedulePoll();
      });
    },
  };
}
