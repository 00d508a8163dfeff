import { z } from '@hono/zod-openapi';
import { emailField, passwordField, userSchema } from '../users/schemas.js';

export const loginBody = z
  .strictObject({ email: emailField, password: z.string({ message: 'is required' }).min(1, { message: 'is required' }).max(1024) })
  .openapi('Login');

const tokenField = z.string({ message: 'is required' }).min(1, { message: 'is required' }).max(512, { message: 'is not a valid token' });

export const refreshBody = z.strictObject({ refreshToken: tokenField }).openapi('Refresh');

export const confirmEmailBody = z.strictObject({ token: tokenField }).openapi('EmailConfirmation');

export const resetPasswordBody = z.strictObject({ token: tokenField, newPassword: passwordField }).openapi('PasswordReset');

export const sessionSchema = z
  .object({
    accessToken: z.string(),
    refreshToken: z.string(),
    tokenType: z.literal('Bearer'),
    expiresIn: z.number().int().openapi({ description: 'seconds until the access token expires' }),
    user: userSchema,
  })
  .openapi('Session');

/** The dashboard's session (src/auth/browser-session.ts): the refresh token is in a cookie, not here. */
export const browserSessionSchema = sessionSchema.omit({ refreshToken: true }).openapi('BrowserSession');
