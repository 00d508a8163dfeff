import { z } from '@hono/zod-openapi';
import { HOST_NAME } from '../../core/formats.js';
import { checkPageDepth, idParam, pageQuery } from '../http/query.js';
import { emailField, passwordField } from '../users/schemas.js';

/** A host name, lower-cased, without a trailing dot. */
export const domainNameField = z
  .string({ message: 'is required' })
  .trim()
  .toLowerCase()
  .transform((name) => name.replace(/\.$/, ''))
  .pipe(z.string().regex(HOST_NAME, { message: 'must be a host name such as shop.example.com' }))
  .openapi({ type: 'string', example: 'shop.example.com' });

const ownerIdField = z
  .number({ message: 'must be a user id or null' })
  .int({ message: 'must be a user id or null' })
  .positive({ message: 'must be a user id or null' })
  // User ids are Postgres integers; a larger number would fail in the query, not as a 422.
  .max(2 ** 31 - 1, { message: 'must be a user id or null' })
  .nullable();

export const domainSchema = z
  .object({
    id: z.number().int(),
    name: z.string(),
    ownerId: z.number().int().nullable(),
    createdAt: z.string(),
    updatedAt: z.string(),
    role: z
      .enum(['viewer', 'editor'])
      .optional()
      .openapi({ description: "Only on a domain shared with the caller, through a membership or a group: the caller's role on it (the best of its grants). Absent for its owner and administrators." }),
  })
  .openapi('Domain');

export const domainIdParams = z.object({ domainId: idParam('domainId') });

export const listDomainsQuery = z
  .object({
    ...pageQuery(),
    search: z.string().max(253).optional(),
    ingest: z
      .enum(['true', 'false'], { message: 'must be true or false' })
      .transform((v) => v === 'true')
      .optional()
      .openapi({ type: 'string', enum: ['true', 'false'], description: "With each domain's last log line (`ingest`): one more read, of ClickHouse" }),
  })
  .superRefine(checkPageDepth);

/** When a domain's last line was stored, and whether that is longer ago than INGEST_STALE_S. */
export const lastLineSchema = z.object({
  lastLineAt: z.string().nullable().openapi({ description: 'When its last line (access or error) was stored; null: never' }),
  secondsSinceLastLine: z.number().nullable().openapi({ description: 'Seconds (to the millisecond) from then to this answer, on the store’s clock; null: never' }),
  stale: z.boolean().openapi({ description: 'No line for longer than staleAfterS (false for a domain that never had one)' }),
  staleAfterS: z.number().int().openapi({ description: 'INGEST_STALE_S' }),
});

export const listedDomainSchema = domainSchema
  .extend({
    ingest: lastLineSchema.nullable().optional().openapi({ description: 'With `ingest=true`: its last log line; null without `domains: read`' }),
  })
  .openapi('ListedDomain');

const lineCounts = { lastHour: z.number().int(), lastDay: z.number().int() };

export const ingestHealthSchema = lastLineSchema
  .extend({
    lastAccessLineAt: z.string().nullable(),
    lastErrorLineAt: z.string().nullable(),
    stored: z.object(lineCounts).openapi({ description: 'Access and error lines stored: this minute and the 59 (1,439) before it' }),
    rejected: z.object({
      ...lineCounts,
      byCause: z.array(z.object({ cause: z.string().nullable().openapi({ description: 'null: rejected before causes were recorded' }), ...lineCounts })),
    }),
    sources: z.array(
      z.object({
        name: z.string().openapi({ example: 'access /var/log/nginx/shop.access.log' }),
        state: z.string().openapi({ description: 'running, waiting for domain, retrying, stopped, failed or starting' }),
        lagBytes: z.number().int(),
        reportedAt: z.string(),
        reporting: z.boolean().openapi({ description: 'false: its worker has not reported for 30 s; the figures are its last' }),
      }),
    ),
  })
  .openapi('IngestHealth');

export const createDomainBody = z.strictObject({ name: domainNameField, ownerId: ownerIdField.optional() }).openapi('CreateDomain');

/** How many names one bulk add takes: they are registered in one transaction. */
export const MAX_BULK_NAMES = 10_000;

// The names are checked one by one in the service (checkDomainNames), with domainNameField, so
// that every invalid one is reported, not only the first, and the command line reports them by line.
export const bulkCreateDomainsBody = z
  .strictObject({
    names: z
      .array(z.string({ message: 'must be a list of host names' }).openapi({ example: 'shop.example.com' }), { message: 'must be a list of host names' })
      .min(1, { message: 'must hold at least one name' })
      .max(MAX_BULK_NAMES, { message: `must hold at most ${MAX_BULK_NAMES.toLocaleString('en-US')} names` }),
    ownerId: ownerIdField.optional(),
  })
  .openapi('BulkCreateDomains');

const bulkNameResultSchema = z
  .object({
    name: z.string().openapi({ description: 'the name as stored (normalised as a single create normalises it)' }),
    status: z.enum(['created', 'exists', 'duplicate']).openapi({ description: 'created; exists: registered before, left as it is (its owner too); duplicate: given earlier in this request' }),
    id: z.number().int().openapi({ description: "the domain's id" }),
  })
  .openapi('BulkNameResult');

export const bulkDomainsResultSchema = z
  .object({
    results: z.array(bulkNameResultSchema).openapi({ description: 'one per name given, in the order given' }),
    counts: z.object({ created: z.number().int(), exists: z.number().int(), duplicate: z.number().int() }),
  })
  .openapi('BulkDomainsResult');

export const updateDomainBody = z.strictObject({ name: domainNameField.optional(), ownerId: ownerIdField.optional() }).openapi('UpdateDomain');

/** A user's id, as ownerIdField but never null. */
export const userIdField = z
  .number({ message: 'must be a user id' })
  .int({ message: 'must be a user id' })
  .positive({ message: 'must be a user id' })
  .max(2 ** 31 - 1, { message: 'must be a user id' })
  .openapi({ example: 7 });

export const memberRoleField = z
  .enum(['viewer', 'editor'], { message: 'must be viewer or editor' })
  .openapi({ description: 'viewer: sees the domain, reads its logs, statistics and alerts; editor: also creates, changes and deletes its alerts and silences' });

export const memberParams = z.object({ domainId: idParam('domainId'), userId: idParam('userId') });

/** Exactly one of `userId` (a user, at once) and `email` (an invitation, src/domains/invitations.ts). */
export const shareDomainBody = z
  .strictObject({
    userId: userIdField.optional(),
    email: emailField.optional().openapi({ description: 'invite this address instead of naming a user: answered alike whether or not it has an account' }),
    role: memberRoleField,
  })
  .superRefine((body, ctx) => {
    if (body.userId !== undefined && body.email !== undefined) ctx.addIssue({ code: 'custom', path: ['email'], message: 'give either userId or email, not both' });
    if (body.userId === undefined && body.email === undefined) ctx.addIssue({ code: 'custom', path: ['userId'], message: 'is required (or email, to invite an address)' });
  })
  .openapi('ShareDomain');

export const invitationParams = z.object({ domainId: idParam('domainId'), invitationId: idParam('invitationId') });

export const invitationSchema = z
  .object({
    id: z.number().int(),
    email: z.string().openapi({ description: 'the address invited, as the inviter typed it (lower-cased)' }),
    role: z.enum(['viewer', 'editor']),
    invitedBy: z.number().int().nullable().openapi({ description: 'the inviting user; null: deleted since (the invitation is then void)' }),
    expiresAt: z.string().openapi({ description: 'when its link stops working' }),
    createdAt: z.string(),
  })
  .openapi('DomainInvitation');

export const acceptInvitationBody = z
  .strictObject({
    token: z.string({ message: 'is required' }).min(1, { message: 'is required' }).max(512, { message: 'is not a valid token' }),
    name: z.string({ message: 'must be a string' }).trim().max(200, { message: 'must be at most 200 characters' }).optional().openapi({ description: 'for a new account' }),
    password: passwordField.optional().openapi({ description: 'required when the address has no account yet: the new account\'s password' }),
  })
  .openapi('AcceptInvitation');

export const memberSchema = z
  .object({
    userId: z.number().int(),
    name: z.string().nullable().openapi({ description: "the member's name; null unless the caller is an administrator" }),
    email: z.string().nullable().openapi({ description: "the member's e-mail address; null unless the caller is an administrator: members are added by user id, and an owner must not collect other users' addresses by walking the ids" }),
    role: z.enum(['viewer', 'editor']),
    grantedBy: z.number().int().nullable().openapi({ description: 'who gave the role last; null: the command line, or a user deleted since' }),
    createdAt: z.string(),
    updatedAt: z.string().openapi({ description: 'when the role last changed' }),
  })
  .openapi('DomainMember');

export const groupSeeingSchema = z
  .object({
    groupId: z.number().int(),
    name: z.string(),
    role: z.enum(['viewer', 'editor']),
    allDomains: z.boolean().openapi({ description: "true: the group's grant on every domain" }),
  })
  .openapi('DomainGroup');
