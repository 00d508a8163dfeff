import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import { jwtVerify, SignJWT } from 'jose';
import { z } from 'zod';

export const ACCESS_TOKEN_TTL_S = 15 * 60;
export const REFRESH_TOKEN_TTL_S = 30 * 24 * 3600;
export const PERSONAL_TOKEN_PREFIX = 'thk_';

/** An opaque random token (32 bytes, base64url) with an optional prefix. */
export const randomToken = (prefix = '') => prefix + randomBytes(32).toString('base64url');

/** Tokens are stored as SHA-256: they carry 256 random bits, so a slow hash adds nothing. */
export const tokenHash = (token: string) => createHash('sha256').update(token).digest('hex');

/** JWT_SECRET, or a secret generated once into DATA_DIR/jwt-secret with mode 0600. */
export async function loadJwtSecret(configured: string | undefined, dataDir: string): Promise<Uint8Array> {
  if (configured) return new TextEncoder().encode(configured);
  const file = path.join(dataDir, 'jwt-secret');
  await fs.mkdir(dataDir, { recursive: true });
  try {
    await fs.writeFile(file, randomBytes(48).toString('base64url'), { mode: 0o600, flag: 'wx' });
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
  }
  return new TextEncoder().encode((await fs.readFile(file, 'utf8')).trim());
}

const hmacKeys = new WeakMap<Uint8Array, Promise<CryptoKey>>();

/**
 * The secret as a WebCrypto HMAC key, imported once per secret: handed the raw bytes, jose would
 * import them again for every token (a sixth of the CPU of an authenticated request, bench/auth).
 */
function hmacKey(secret: Uint8Array): Promise<CryptoKey> {
  let key = hmacKeys.get(secret);
  if (!key) {
    key = crypto.subtle.importKey('raw', secret as Uint8Array<ArrayBuffer>, { name: 'HMAC', hash: 'SHA-256' }, false, ['sign', 'verify']);
    hmacKeys.set(secret, key);
  }
  return key;
}

export interface AccessClaims {
  userId: number;
  /** The user's token_version when issued; a later bump invalidates the token. */
  version: number;
  /**
   * The session the token belongs to (claim `sid`): the `family` of the refresh tokens of one
   * sign-in. Once that family is revoked (logout, refresh-token reuse), the token is refused.
   */
  session: string;
}

export async function signAccessToken(secret: Uint8Array, claims: AccessClaims, now = new Date()): Promise<string> {
  const iat = Math.floor(now.getTime() / 1000);
  return new SignJWT({ ver: claims.version, sid: claims.session })
    .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
    .setSubject(String(claims.userId))
    .setIssuedAt(iat)
    .setExpirationTime(iat + ACCESS_TOKEN_TTL_S)
    .setIssuer('tailhouse')
    .sign(await hmacKey(secret));
}

/** The claims of a verified token, with when it stops being valid. */
export interface VerifiedClaims extends AccessClaims {
  expiresAt: Date;
}

/** Tokens this process has verified, per secret, with their claims and expiry (epoch seconds). */
const verifiedTokens = new WeakMap<Uint8Array, Map<string, { claims: VerifiedClaims; exp: number }>>();
const VERIFIED_TOKENS_MAX = 10_000;

/**
 * The payload of a token this service signed (jose has checked its signature, issuer and expiry).
 * A token without `sid` (signed before sessions were named in tokens) is refused like a malformed
 * one: its session could not be checked, and a client gets a new one from its refresh token.
 */
const accessPayload = z.object({
  sub: z.string().regex(/^[1-9]\d{0,14}$/).transform(Number),
  ver: z.number().int(),
  sid: z.uuid(),
  // Every token this service signs expires; one without `exp` is not one of them.
  exp: z.number(),
});

/**
 * The claims of a valid token, or undefined for anything forged, expired or malformed.
 *
 * A client sends the same access token with every request for its 15 minutes, so a token whose
 * signature has been checked once is remembered (by its whole text, so only that exact string
 * matches) until it expires: the WebCrypto HMAC was the largest single cost of an authenticated
 * request (bench/auth). Expiry is still checked on every use, exactly as jose does. Revocation
 * does not depend on this: the user's token_version and the session's refresh tokens are read
 * with the user's row on every request (findUserWithPermissions).
 */
export async function verifyAccessToken(secret: Uint8Array, token: string): Promise<VerifiedClaims | undefined> {
  let cache = verifiedTokens.get(secret);
  if (!cache) {
    cache = new Map();
    verifiedTokens.set(secret, cache);
  }
  const known = cache.get(token);
  if (known) {
    if (known.exp > Math.floor(Date.now() / 1000)) return known.claims;
    cache.delete(token);
    return undefined;
  }
  try {
    const { payload } = await jwtVerify(token, await hmacKey(secret), { algorithms: ['HS256'], issuer: 'tailhouse' });
    const parsed = accessPayload.safeParse(payload);
    if (!parsed.success) return undefined;
    const { sub, ver, sid, exp } = parsed.data;
    const claims = { userId: sub, version: ver, session: sid, expiresAt: new Date(exp * 1000) };
    if (cache.size >= VERIFIED_TOKENS_MAX) cache.clear();
    cache.set(token, { claims, exp });
    return claims;
  } catch {
    return undefined;
  }
}
