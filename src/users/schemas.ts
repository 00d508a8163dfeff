import { z } from '@hono/zod-openapi';
import { checkDateOrder, checkPageDepth, dateRangeQuery, idParam, pageQuery } from '../http/query.js';
import { EMAIL_ADDRESS } from '../../core/formats.js';
import { ACTIONS, RESOURCES } from './permissions.js';

export const emailField = z
  .string({ message: 'is required' })
  .trim()
  .toLowerCase()
  .max(254, { message: 'must be at most 254 characters' })
  .regex(EMAIL_ADDRESS, { message: 'must be an e-mail address' })
  .openapi({ example: 'ada@example.com' });

export const passwordField = z
  .string({ message: 'is required' })
  .min(8, { message: 'must be at least 8 characters' })
  .max(128, { message: 'must be at most 128 characters' })
  .openapi({ example: 'correct horse battery', format: 'password' });

const nameField = z
  .string({ message: 'must be a string' })
  .trim()
  .max(200, { message: 'must be at most 200 characters' });
const roleField = z.enum(['admin', 'user'], { message: 'must be admin or user' });
const activeField = z.boolean({ message: 'must be true or false' });

/** Read-only fields of a User that clients may send back; they are accepted and ignored. */
const readOnlyFields = {
  id: z.unknown().optional().openapi({ description: 'read-only; ignored' }),
  createdAt: z.unknown().optional().openapi({ description: 'read-only; ignored' }),
  updatedAt: z.unknown().optional().openapi({ description: 'read-only; ignored' }),
  lastLoginAt: z.unknown().optional().openapi({ description: 'read-only; ignored' }),
};

export const userSchema = z
  .object({
    id: z.number().int(),
    name: z.string(),
    email: z.string(),
    role: roleField,
    active: z.boolean(),
    lastLoginAt: z.string().nullable(),
    createdAt: z.string(),
    updatedAt: z.string(),
  })
  .openapi('User');

export const userIdParams = z.object({ id: idParam('id') });

export const listUsersQuery = z
  .object({
    ...pageQuery(),
    search: z.string().max(254).optional(),
    role: roleField.optional(),
  })
  .superRefine(checkPageDepth);

export const createUserBody = z
  .strictObject({
    name: nameField.default(''),
    email: emailField,
    password: passwordField,
    role: roleField.default('user'),
    active: activeField.default(true),
    ...readOnlyFields,
  })
  .openapi('CreateUser');

export const updateUserBody = z
  .strictObject({
    name: nameField.optional(),
    email: emailField.optional(),
    role: roleField.optional(),
    active: activeField.optional(),
    currentPassword: z.string().max(1024).optional().openapi({ description: "required to change one's own e-mail", format: 'password' }),
    ...readOnlyFields,
  })
  .openapi('UpdateUser');

export const passwordBody = z
  .strictObject({
    currentPassword: z.string().max(1024).optional(),
    newPassword: passwordField,
    confirmPassword: z.string({ message: 'is required' }),
  })
  .superRefine((body, ctx) => {
    if (body.newPassword !== body.confirmPassword) ctx.addIssue({ code: 'custom', path: ['confirmPassword'], message: 'must equal newPassword' });
  })
  .openapi('PasswordChange');

export const resetRequestBody = z.strictObject({ email: emailField }).openapi('PasswordResetRequest');

export const permissionEntrySchema = z
  .strictObject({
    resource: z.enum(RESOURCES, { message: `must be one of ${RESOURCES.join(', ')}` }),
    actions: z.array(z.enum(ACTIONS, { message: `must be one of ${ACTIONS.join(', ')}` })),
  })
  .openapi('Permission');

export const permissionsBody = z
  .strictObject({ permissions: z.array(permissionEntrySchema, { message: 'must be an array of permission entries' }) })
  .superRefine((body, ctx) => {
    body.permissions.forEach((entry, i) => {
      if (body.permissions.findIndex((e) => e.resource === entry.resource) !== i) {
        ctx.addIssue({ code: 'custom', path: ['permissions', i, 'resource'], message: `${entry.resource} is listed more than once` });
      }
    });
  })
  .openapi('PermissionsUpdate');

export const activityQuery = z.object({ ...pageQuery(), ...dateRangeQuery(false) }).superRefine(checkDateOrder).superRefine(checkPageDepth);

export const activitySchema = z
  .object({
    id: z.number().int(),
    action: z.string(),
    resource: z.string(),
    details: z.string(),
    ipAddress: z.string(),
    userAgent: z.string(),
    timestamp: z.string(),
  })
  .openapi('Activity');

/** A personal access token as listed: never its secret. */
export const personalTokenSchema = z
  .object({
    id: z.number().int(),
    name: z.string(),
    createdAt: z.string(),
    lastUsedAt: z.string().nullable(),
    revokedAt: z.string().nullable(),
  })
  .openapi('PersonalToken');

/** A token just created: with its secret, shown this once. */
export const createdTokenSchema = personalTokenSchema.extend({ token: z.string().openapi({ description: 'The secret (thk_…), shown once; send it as `Authorization: Bearer …`' }) }).openapi('CreatedPersonalToken');

export const createTokenBody = z
  .strictObject({ name: z.string({ message: 'is required' }).trim().min(1, { message: 'is required' }).max(100, { message: 'must be at most 100 characters' }) })
  .openapi('CreatePersonalToken');

export const tokenParams = userIdParams.extend({ tokenId: idParam('tokenId') });
