import { z } from '@hono/zod-openapi';
import { HOST_NAME } from '../../core/formats.js';
import { checkPageDepth, idParam, pageQuery } from '../http/query.js';

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
  })
  .openapi('Domain');

export const domainIdParams = z.object({ domainId: idParam('domainId') });

export const listDomainsQuery = z
  .object({
    ...pageQuery(),
    search: z.string().max(253).optional(),
  })
  .superRefine(checkPageDepth);

export const createDomainBody = z.strictObject({ name: domainNameField, ownerId: ownerIdField.optional() }).openapi('CreateDomain');

export const updateDomainBody = z.strictObject({ name: domainNameField.optional(), ownerId: ownerIdField.optional() }).openapi('UpdateDomain');
