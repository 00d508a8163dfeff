import { z } from '@hono/zod-openapi';
import { idParam } from '../http/query.js';
import { memberRoleField, userIdField } from '../domains/schemas.js';

/** How many domains one request may grant a group: as many as a bulk registration. */
export const GRANT_MAX_DOMAINS = 10_000;

const groupNameField = z
  .string({ message: 'is required' })
  .trim()
  .min(1, { message: 'is required' })
  .max(100, { message: 'must be at most 100 characters' })
  .openapi({ example: 'Support' });

export const groupIdParams = z.object({ groupId: idParam('groupId') });
export const groupMemberParams = groupIdParams.extend({ userId: idParam('userId') });
/** A grant's domain in a path: a domain id, or `all` for the grant on every domain. */
export const groupDomainParams = groupIdParams.extend({
  domainId: z
    .union([z.literal('all'), idParam('domainId')], { message: 'must be a domain id or all' })
    .openapi({ param: { name: 'domainId', in: 'path' }, example: 'all' }),
});

export const groupBody = z.strictObject({ name: groupNameField }).openapi('GroupName');
export const groupMemberBody = z.strictObject({ userId: userIdField }).openapi('AddGroupMember');
export const groupGrantBody = z
  .strictObject({
    domains: z
      .union(
        [
          z.literal('all'),
          z
            .array(z.number().int().positive().max(2 ** 31 - 1), { message: 'must be domain ids or "all"' })
            .min(1, { message: 'must name at least one domain' })
            .max(GRANT_MAX_DOMAINS, { message: `must name at most ${GRANT_MAX_DOMAINS} domains` }),
        ],
        { message: 'must be domain ids or "all"' },
      )
      .openapi({ description: 'the domains, by id, or `"all"`: every domain, those registered later too' }),
    role: memberRoleField,
  })
  .openapi('GrantGroup');

export const groupSchema = z
  .object({
    id: z.number().int(),
    name: z.string(),
    createdAt: z.string(),
    updatedAt: z.string(),
    members: z.array(z.object({ userId: z.number().int(), name: z.string(), email: z.string(), addedAt: z.string() })).openapi({ description: 'by user id' }),
    domains: z
      .array(
        z.object({
          domainId: z.number().int().nullable().openapi({ description: 'null: the grant on every domain' }),
          name: z.string().nullable(),
          role: z.enum(['viewer', 'editor']),
          grantedAt: z.string(),
        }),
      )
      .openapi({ description: 'its grants: the one on every domain first, then by domain id' }),
  })
  .openapi('Group');
