import { DAY_MS } from '../../../core/durations.js';
import { z } from '@hono/zod-openapi';
import { idParam } from '../../http/query.js';
import { idList } from '../schemas.js';
import { recurrenceSchema } from '../recurrence.js';

/** The longest fixed silence: a maintenance longer than a quarter is a disabled alert, not a silence. */
export const SILENCE_MAX_DAYS = 90;

const instant = z.iso.datetime({ offset: true, message: 'must be an ISO 8601 date-time with a time zone, e.g. 2026-12-01T02:00:00Z' });
export const createSilenceBody = z
  .strictObject({
    domainIds: z.union([z.literal('all'), idList('domain id')], { message: 'must be "all" or an array of domain ids' }),
    alertIds: idList('alert id').optional(),
    startsAt: instant.optional(),
    endsAt: instant.optional(),
    recurrence: recurrenceSchema.optional(),
    comment: z.string({ message: 'is required' }).trim().min(1, { message: 'must not be empty: say why notifications are held' }).max(1000, { message: 'must be at most 1000 characters' }),
  })
  .superRefine((s, ctx) => {
    const fixed = s.startsAt !== undefined || s.endsAt !== undefined;
    if (s.recurrence !== undefined && fixed) {
      ctx.addIssue({ code: 'custom', path: ['recurrence'], message: 'takes the place of startsAt and endsAt: give one or the other' });
      return;
    }
    if (s.recurrence !== undefined) return;
    if (s.endsAt === undefined) {
      ctx.addIssue({ code: 'custom', path: ['endsAt'], message: 'is required (or a weekly recurrence instead of startsAt and endsAt)' });
      return;
    }
    const start = s.startsAt === undefined ? Date.now() : Date.parse(s.startsAt);
    const end = Date.parse(s.endsAt);
    if (end <= start) ctx.addIssue({ code: 'custom', path: ['endsAt'], message: 'must be after startsAt (or after now, when startsAt is left out)' });
    else if (end - start > SILENCE_MAX_DAYS * DAY_MS) ctx.addIssue({ code: 'custom', path: ['endsAt'], message: `must be at most ${SILENCE_MAX_DAYS} days after startsAt` });
  })
  .openapi('CreateSilence', {
    example: { domainIds: [1, 2], startsAt: '2026-12-01T22:00:00Z', endsAt: '2026-12-02T00:00:00Z', comment: 'PHP 8.4 upgrade' },
  });

export type CreateSilence = z.infer<typeof createSilenceBody>;

export const silenceSchema = z
  .object({
    id: z.number().int(),
    createdBy: z.number().int(),
    domainIds: z.union([z.literal('all'), z.array(z.number().int())]),
    alertIds: z.array(z.number().int()).nullable().openapi({ description: 'null: every alert' }),
    startsAt: z.string().nullable().openapi({ description: 'A fixed window: its start; a recurrence: the current or next window\'s start' }),
    endsAt: z.string().nullable().openapi({ description: 'A fixed window: its end (exclusive); a recurrence: the current or next window\'s end' }),
    recurrence: recurrenceSchema.nullable(),
    comment: z.string(),
    state: z.enum(['active', 'pending', 'expired']).openapi({ description: 'active: holding notifications now; pending: a window to come; expired: over or ended' }),
    endedAt: z.string().nullable().openapi({ description: 'When it was ended through the API; null otherwise' }),
    createdAt: z.string(),
  })
  .openapi('Silence');

export const silenceListQuery = z.object({
  state: z.enum(['active', 'expired'], { message: 'must be active (in force and to come) or expired' }).default('active'),
});

export const silenceParams = z.object({ silenceId: idParam('silenceId') });
