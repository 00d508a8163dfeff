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
