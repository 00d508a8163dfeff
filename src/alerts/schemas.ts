import { z } from '@hono/zod-openapi';
import { EMAIL_ADDRESS } from '../../core/formats.js';
import { domainIdParams } from '../domains/schemas.js';
import { idParam } from '../http/query.js';
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
  notificationMethod: NotificationMethod;
  notificationTarget: string;
  enabled: boolean;
}

/** What a threshold means per condition, and its range. */
const fraction = (c: Condition) => ({ min: 0, max: 1, rule: `must be a fraction from 0 to 1 for ${c}` });
const count = (what: string) => ({ min: 0, max: Number.MAX_SAFE_INTEGER, rule: `must be a number of ${what}, 0 or more` });
const milliseconds = (c: Condition) => ({ min: 0, max: 3_600_000, rule: `must be milliseconds from 0 to 3600000 for ${c}` });
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

/** Any subset of the fields; the rules between fields are checked once merged (service). */
export const updateAlertBody = z
  .strictObject({
    name: fields.name.optional(),
    condition: fields.condition.optional(),
    operator: fields.operator.optional(),
    threshold: fields.threshold.optional(),
    duration: fields.duration.optional(),
    notificationMethod: fields.notificationMethod.optional(),
    notificationTarget: fields.notificationTarget.optional(),
    enabled: fields.enabled.optional(),
  })
  .openapi('UpdateAlert');

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
    state: z.enum(['ok', 'firing']),
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
