import type { ClientInfo } from './activity/store.js';
import type { Config } from '../core/config.js';
import type { ClickHouseClient } from '../core/db/clickhouse.js';
import type { Db } from '../core/db/postgres.js';
import type { Logger } from '../core/log.js';
import type { Mailer } from './mail/mailer.js';
import type { Metrics } from './metrics/registry.js';
import type { Reads } from './reads/client.js';
import type { PermissionSet } from './users/permissions.js';
import type { UserRow } from './users/store.js';

/** Everything the API needs, opened once by the runtime and passed to each area. */
export interface Services {
  config: Config;
  log: Logger;
  db: Db;
  clickhouse: ClickHouseClient;
  mailer: Mailer;
  jwtSecret: Uint8Array;
  /** The queue and limits of the ClickHouse reads made for requests (src/reads/). */
  reads: Reads;
  /** Set when METRICS=true (`serve` creates them): what the areas observe. */
  metrics?: Metrics;
}

/** The authenticated caller of a request, with permissions read fresh from the store. */
export interface Principal {
  user: Omit<UserRow, 'password_hash'>;
  permissions: PermissionSet;
  /** How the caller signed in: an access token from a password login, or a personal access token. */
  credential: 'session' | 'personal-token';
  /** When the credential stops working by itself: an access token's expiry; null for a personal access token (valid until revoked). */
  expiresAt: Date | null;
}

export type AppEnv = {
  Variables: {
    principal: Principal;
    client: ClientInfo;
    /** Set by the app's notFound answer: no route matched the path (src/metrics/routes.ts). */
    unmatched?: true;
  };
};
