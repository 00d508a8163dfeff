/**
 * The API's answers as the dashboard reads them, in one place. Those of users, domains and groups
 * are the server's own schemas (z.infer over a type-only import: nothing of the server is bundled).
 * The others are written out here: the schema files of queries, logs and alerts reach
 * src/logs/filters.ts, which imports node:net, and the web's tsconfig has no Node types (the page
 * must not use Node's API), so type-checking them from here fails.
 */
import type { z } from 'zod';
import type {
  domainSchema,
  groupSeeingSchema,
  ingestHealthSchema,
  invitationSchema,
  lastLineSchema,
  listedDomainSchema,
  memberSchema,
} from '../../../src/domains/schemas.js';
import type { groupSchema } from '../../../src/groups/schemas.js';
import type { activitySchema, createdTokenSchema, personalTokenSchema, userSchema } from '../../../src/users/schemas.js';

export type User = z.infer<typeof userSchema>;
export type PersonalToken = z.infer<typeof personalTokenSchema>;
export type CreatedToken = z.infer<typeof createdTokenSchema>;
export type Activity = z.infer<typeof activitySchema>;
export interface Permissions {
  permissions: { resource: string; actions: string[] }[];
}

export type Domain = z.infer<typeof domainSchema>;
/** A domain's last log line as the listing gives it with `ingest=true`. */
export type LastLine = z.infer<typeof lastLineSchema>;
export type ListedDomain = z.infer<typeof listedDomainSchema>;
export type IngestHealth = z.infer<typeof ingestHealthSchema>;
export type Member = z.infer<typeof memberSchema>;
export type Invitation = z.infer<typeof invitationSchema>;
/** A group that sees a domain: given a role on it, or on every domain (`allDomains`). */
export type GroupSeeing = z.infer<typeof groupSeeingSchema>;
export type Group = z.infer<typeof groupSchema>;
export type GroupMember = Group['members'][number];
/** A role on a domain, or on every domain (`domainId` and `name` null). */
export type Grant = Group['domains'][number];

export interface Pagination {
  page: number;
  limit: number;
  total: number;
  pages: number;
}
/** A page of a listing: its entries under `key` (`users`, `domains`…) and the pagination. */
export type Paged<Key extends string, T> = { [K in Key]: T[] } & { pagination: Pagination };

/** A dimension's value in a query's row: a time bucket as its start (ISO 8601), a domain as its name… */
export type DimensionValue = string | number | boolean;
/** A row of POST /api/logs/query (src/stats/query/schemas.ts, queryResultSchema): the figures in the order of the metrics asked. */
export interface QueryRow {
  dimensions: DimensionValue[];
  metrics: (number | null)[];
  /** With `compare`: the change of each metric against the previous period. */
  change?: (number | null)[];
}
export interface QueryAnswer {
  results: QueryRow[];
  meta: { startDate: string; endDate: string; interval: string | null };
}
/** A query's place in the answer of a batch (queryBatchResultSchema). */
export type BatchItem = { success: true; data: QueryAnswer } | { success: false; status: number; error: string; details?: Record<string, string> };

/** An access or error log entry as the listings, the search and the tail give it. */
export type Entry = Record<string, unknown>;
export type Listing = Paged<'logs', Entry>;
export interface ExportLink {
  downloadUrl: string;
  expiresAt: string;
}
/** A line ingest refused (GET /api/logs/domains/:id/rejects). */
export interface Rejected {
  time: string;
  kind: string;
  source: string;
  cause: string | null;
  reason: string;
  line: string;
  length: number;
}
export type RejectsPage = Paged<'rejects', Rejected>;

export type FilterTuple = [string, string, unknown[]];
export type Scope = { domains: 'all' } | { domainIds: number[] };

export interface Alert {
  id: number;
  name: string;
  condition: string;
  operator: string;
  threshold: number;
  duration: number;
  filters: FilterTuple[];
  notificationMethod: string;
  notificationTarget: string;
  enabled: boolean;
  domainId: number | null;
  scope: Scope;
  state: 'ok' | 'firing';
  lastTriggeredAt: string | null;
  lastDeliveredAt: string | null;
  lastDeliveryError: string | null;
}

/** One domain of an alert: its state there. */
export interface DomainState {
  domainId: number;
  domain: string;
  state: 'ok' | 'firing';
  value: number | null;
  since: string | null;
  silencedBy: number | null;
}

export interface Rule extends Alert {
  domains: DomainState[];
}

export interface Silence {
  id: number;
  createdBy: number;
  domainIds: 'all' | number[];
  alertIds: number[] | null;
  startsAt: string | null;
  endsAt: string | null;
  recurrence: { weekdays: string[]; start: string; end: string; timezone: string } | null;
  comment: string;
  state: 'active' | 'pending' | 'expired';
  endedAt: string | null;
  createdAt: string;
}

export interface HistoryEntry {
  id: number;
  alertId: number;
  alertName: string;
  domainId: number;
  domain: string;
  from: 'ok' | 'firing';
  to: 'ok' | 'firing';
  at: string;
  value: number | null;
  notified: boolean;
  silencedBy: number | null;
}

export interface HistoryPage {
  entries: HistoryEntry[];
  pagination: { page: number; pages: number; total: number };
}


/** An alert firing now on a domain (GET /api/logs/alerts/firing), as the fleet names it. */
export interface FiringAlert {
  domainId: number;
  name: string;
}
