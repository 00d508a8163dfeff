import { HOUR_MS } from '../../core/durations.js';
import { z } from '@hono/zod-openapi';
import { EMAIL_ADDRESS } from '../../core/formats.js';
import { domainIdParams } from '../domains/schemas.js';
import { bodyWholeNumber, idParam } from '../http/query.js';
import { filtersField, type QueryFilter } from '../stats/query/filters.js';
import { NOTIFICATIONS_PER_TARGET_PER_HOUR } from './limits.js';

/**
 * What an alert watches: a metric of the statistics' registry (src/stats/registry.ts) that a
 * threshold can watch, computed by the registry's SQL, or `requestChange` (the relative change of
 * the requests against the same window 7 days earlier, src/alerts/metrics.ts). `requestCount` is
 * the specification's name for `requests` and stays accepted.
 */
export const CONDITIONS = [
  'errorRate',
  'clientErrorRate',
  'requests',
  'requestCount',
  'bandwidth',
  'visitors',
  'averageResponseTime',
  'p50ResponseTime',
  'p95ResponseTime',
  'p99ResponseTime',
  'maxResponseTime',
  'requestChange',
] as const;
export const OPERATORS = ['greaterThan', 'greaterThanOrEqual', 'lessThan', 'lessThanOrEqual'] as const;
export const METHODS = ['email', 'webhook'] as const;

export type Condition = (typeof CONDITIONS)[number];
export type Operator = (typeof OPERATORS)[number];
export type NotificationMethod = (typeof METHODS)[number];

/** An alert's definition: what a create takes whole and an update in part. */
export interface AlertDefinition {
  name: string;
  condition: Condition;
  operator: Operator;
  threshold: number;
  duration: number;
  /** The rows the metric is computed over (the query endpoint's filters, as written); [] = all. */
  filters: FilterTuple[];
  notificationMethod: NotificationMethod;
  notificationTarget: string;
  enabled: boolean;
}

/** The domains a rule covers: every domain its creator sees at evaluation, or a list. */
export type AlertScope = { domains: 'all' } | { domainIds: number[] };

/** The most domains a rule's list may name (beyond it, `"all"` is what one means). */
export const SCOPE_DOMAINS_MAX = 10_000;

/** A filter as a user writes it, `[operator, dimension, [values…]]`: how an alert keeps and shows its filters. */
export type FilterTuple = [string, string, unknown[]];

/**
 * The filters an alert takes: the query endpoint's (src/stats/query/filters.ts), same syntax, same
 * checks and messages, but not on the domain dimension, which the alert's domain or scope chooses.
 * The filters are kept as written (a CIDR as its text), and parsed again where they are used
 * (queryFiltersOf).
 */
export const alertFiltersField = z
  .array(z.unknown(), { message: 'must be an array of filters' })
  .superRefine((filters, ctx) => {
    const parsed = filtersField.safeParse(filters);
    if (!parsed.success) {
      for (const issue of parsed.error.issues) ctx.addIssue({ code: 'custom', path: issue.path, message: issue.message });
      return;
    }
    parsed.data.forEach((f, i) => {
      if (f.dimension === 'domain') ctx.addIssue({ code: 'custom', path: [i, 1], message: "takes no filter in an alert: the alert's domain or its scope chooses the domains" });
    });
  })
  .transform((filters) => filters as FilterTuple[])
  .openapi({
    type: 'array',
    description: 'Optional: the metric is computed over the rows these filters match, in the syntax and limits of POST /api/logs/query (any dimension but domain and time); [] = all rows',
    example: [['glob', 'path', ['/checkout*']]],
  });

/** Validated filters as the query builder takes them. */
export const queryFiltersOf = (filters: readonly FilterTuple[]): QueryFilter[] => filtersField.parse(filters);

/** A list of ids in a body (1 to `max`, duplicates dropped, ascending). */
export const idList = (what: string, max: number = SCOPE_DOMAINS_MAX) =>
  z
    .array(bodyWholeNumber(1, 2 ** 31 - 1), { message: `must be an array of ${what}s` })
    .min(1, { message: 'must not be empty' })
    .max(max, { message: `must have at most ${max} ids` })
    .transform((ids) => [...new Set(ids)].sort((a, b) => a - b));

export const scopeField = z
  .union([z.strictObject({ domains: z.literal('all', { message: 'must be "all"' }) }), z.strictObject({ domainIds: idList('domain id', SCOPE_DOMAINS_MAX) })], {
    message: 'must be {"domains": "all"} or {"domainIds": [1, 2, …]}',
  })
  .openapi('AlertScope', {
    description: '`{"domains": "all"}`: every domain the creator sees at each evaluation, domains added later included; `{"domainIds": [...]}`: those domains (each must be visible to the creator)',
    example: { domains: 'all' },
  });

/** What a threshold means per condition, and its range. */
const fraction = (c: Condition) => ({ min: 0, max: 1, rule: `must be a fraction from 0 to 1 for ${c}` });
const count = (what: string) => ({ min: 0, max: Number.MAX_SAFE_INTEGER, rule: `must be a number of ${what}, 0 or more` });
const milliseconds = (c: Condition) => ({ min: 0, max: HOUR_MS, rule: `must be milliseconds from 0 to ${HOUR_MS} for ${c}` });
const THRESHOLD_RULES: Record<Condition, { min: number; max: number; rule: string }> = {
  errorRate: fraction('errorRate'),
  clientErrorRate: fraction('clientErrorRate'),
  requests: count('requests'),
  requestCount: count('requests'),
  bandwidth: count('bytes'),
  visitors: count('visitors'),
  averageResponseTime: milliseconds('averageResponseTime'),
  p50ResponseTime: milliseconds('p50ResponseTime'),
  p95ResponseTime: milliseconds('p95ResponseTime'),
  p99ResponseTime: milliseconds('p99ResponseTime'),
  maxResponseTime: milliseconds('maxResponseTime'),
  requestChange: { min: -1, max: 1_000_000, rule: 'must be a relative change from -1 (traffic gone) up, for requestChange (0: unchanged, -0.7: 70 % fewer requests)' },
};

const oneOf = (values: readonly string[]) => `must be one of ${values.join(', ')}`;

const fields = {
  name: z
    .string({ message: 'is required' })
    .trim()
    .min(1, { message: 'must not be empty' })
    .max(200, { message: 'must be at most 200 characters' }),
  condition: z.enum(CONDITIONS, { message: oneOf(CONDITIONS) }),
  operator: z.enum(OPERATORS, { message: oneOf(OPERATORS) }),
  threshold: z.number({ message: 'must be a number' }).finite({ message: 'must be a number' }),
  duration: z
    .number({ message: 'must be a whole number of seconds from 60 to 86400' })
    .int({ message: 'must be a whole number of seconds from 60 to 86400' })
    .min(60, { message: 'must be a whole number of seconds from 60 to 86400' })
    .max(86_400, { message: 'must be a whole number of seconds from 60 to 86400' }),
  notificationMethod: z.enum(METHODS, { message: oneOf(METHODS) }),
  notificationTarget: z.string({ message: 'is required' }).trim().min(1, { message: 'is required' }).max(2048, { message: 'must be at most 2048 characters' }),
  enabled: z.boolean({ message: 'must be true or false' }),
  filters: alertFiltersField.default([]),
};

function isHttpsUrl(text: string): boolean {
  try {
    const url = new URL(text);
    return url.protocol === 'https:' && url.hostname !== '' && url.username === '' && url.password === '';
  } catch {
    return false;
  }
}

/**
 * The rules between fields, checked on the whole definition (after an update is merged into the
 * stored alert): the threshold's range for its condition, the target's form for its method.
 * Returns the offending fields with their messages.
 */
export function definitionProblems(d: AlertDefinition): Record<string, string> {
  const problems: Record<string, string> = {};
  const { min, max, rule } = THRESHOLD_RULES[d.condition];
  if (d.threshold < min || d.threshold > max) problems.threshold = rule;
  if (d.notificationMethod === 'email' && !EMAIL_ADDRESS.test(d.notificationTarget.toLowerCase())) {
    problems.notificationTarget = 'must be an e-mail address for the email method';
  }
  if (d.notificationMethod === 'webhook' && !isHttpsUrl(d.notificationTarget)) {
    problems.notificationTarget = 'must be an https URL (without user or password) for the webhook method';
  }
  return problems;
}

const withDefinitionRules = <T extends z.ZodType<AlertDefinition>>(schema: T) =>
  schema.superRefine((d, ctx) => {
    for (const [field, message] of Object.entries(definitionProblems(d))) ctx.addIssue({ code: 'custom', path: [field], message });
  });

export const createAlertBody = withDefinitionRules(
  z.strictObject({ ...fields, enabled: fields.enabled.default(true) }),
).openapi('CreateAlert');

/** A rule over many domains: a domain alert's fields plus its scope. */
export const createRuleBody = withDefinitionRules(z.strictObject({ ...fields, enabled: fields.enabled.default(true), scope: scopeField }))
  .openapi('CreateRule', {
    example: { name: '5xx across the fleet', condition: 'errorRate', operator: 'greaterThan', threshold: 0.05, duration: 300, notificationMethod: 'email', notificationTarget: 'oncall@example.com', scope: { domains: 'all' } },
  });

const optionalFields = {
  name: fields.name.optional(),
  condition: fields.condition.optional(),
  operator: fields.operator.optional(),
  threshold: fields.threshold.optional(),
  duration: fields.duration.optional(),
  filters: alertFiltersField.optional(),
  notificationMethod: fields.notificationMethod.optional(),
  notificationTarget: fields.notificationTarget.optional(),
  enabled: fields.enabled.optional(),
};

/** Any subset of the fields; the rules between fields are checked once merged (service). */
export const updateAlertBody = z.strictObject(optionalFields).openapi('UpdateAlert');

/** A rule's fields, its scope among them (a domain's alert keeps its domain). */
export const updateRuleBody = z.strictObject({ ...optionalFields, scope: scopeField.optional() }).openapi('UpdateRule');

const filterJson = z.array(z.tuple([z.string(), z.string(), z.array(z.unknown())])).openapi({ example: [['glob', 'path', ['/checkout*']]] });

export const alertSchema = z
  .object({
    id: z.number().int(),
    name: z.string(),
    condition: z.enum(CONDITIONS),
    operator: z.enum(OPERATORS),
    threshold: z.number(),
    duration: z.number().int().openapi({ description: 'seconds' }),
    notificationMethod: z.enum(METHODS),
    notificationTarget: z.string(),
    enabled: z.boolean(),
    filters: filterJson.openapi({ description: 'Beyond the specification: the rows the metric is computed over; [] = all' }),
    domainId: z.number().int().nullable().openapi({ description: "Beyond the specification: a domain's alert: its domain; a rule over many domains: null" }),
    scope: z.union([z.object({ domains: z.literal('all') }), z.object({ domainIds: z.array(z.number().int()) })]).openapi({ description: "Beyond the specification: the domains it covers (a domain's alert: its own)" }),
    createdBy: z.number().int().nullable().openapi({ description: 'Beyond the specification: the user who created it (null: a deleted user)' }),
    state: z.enum(['ok', 'firing']).openapi({ description: 'firing when it fires on any domain it covers' }),
    lastTriggeredAt: z.string().nullable(),
    // Beyond the specification: how the alert's notifications fare (src/alerts/delivery.ts).
    lastDeliveryError: z.string().nullable().openapi({
      description:
        `Beyond the specification: the error of the last failed delivery of a notification of this alert (ends with "(given up after N attempts)" once retries stopped), or why its notification is held back (at most ${NOTIFICATIONS_PER_TARGET_PER_HOUR} notifications an hour go to one target); null when none failed or was held since the last success`,
    }),
    lastDeliveredAt: z.string().nullable().openapi({
      description: 'Beyond the specification: when a notification of this alert was last delivered (ISO 8601, UTC, ms); null: never',
    }),
    createdAt: z.string(),
  })
  .openapi('Alert');

export const alertParams = domainIdParams.extend({ alertId: idParam('alertId') });
export const ruleParams = z.object({ alertId: idParam('alertId') });

/** One domain of an alert: its state there, the last round's value, since when, and any silence holding its notifications. */
export const domainStateSchema = z
  .object({
    domainId: z.number().int(),
    domain: z.string(),
    state: z.enum(['ok', 'firing']),
    value: z.number().nullable().openapi({ description: "The last round's value (null: no data, or not evaluated yet)" }),
    since: z.string().nullable().openapi({ description: 'When the state began (null: ok since ever)' }),
    silencedBy: z.number().int().nullable().openapi({ description: 'The silence holding its notifications back now, or null' }),
  })
  .openapi('AlertDomainState');

export const ruleSchema = alertSchema
  .extend({
    domains: z.array(domainStateSchema).openapi({ description: 'GET one: every domain it covers, visible to the caller; lists: only those firing' }),
  })
  .openapi('AlertRule');

export const firingAlertSchema = alertSchema
  .extend({
    alertId: z.number().int(),
    domainId: z.number().int(),
    domain: z.string(),
    since: z.string().nullable(),
    value: z.number().nullable(),
    silencedBy: z.number().int().nullable(),
  })
  .openapi('FiringAlert');

export const historyEntrySchema = z
  .object({
    id: z.number().int(),
    alertId: z.number().int(),
    alertName: z.string(),
    domainId: z.number().int(),
    domain: z.string(),
    from: z.enum(['ok', 'firing']),
    to: z.enum(['ok', 'firing']),
    at: z.string(),
    value: z.number().nullable(),
    notified: z.boolean().openapi({ description: 'Whether the change went into a notification' }),
    silencedBy: z.number().int().nullable().openapi({ description: 'The silence that held the notification back, or null' }),
  })
  .openapi('AlertHistoryEntry');
