/**
 * The one-use links tailhouse e-mails (password reset, e-mail confirmation, domain invitation):
 * one scheme for all of them. A link carries a random token (256 bits, tokens.ts); only its
 * SHA-256 is stored, with an expiry, in the link's own table; a link is spent once, atomically,
 * in the transaction that does what it grants. Unknown, spent, withdrawn and expired links answer
 * alike (`422` on `token`, "… link is unknown, already used or expired"), and unknown ones are
 * throttled per client address (throttle.ts checkLink).
 */
import type { ClientInfo } from '../activity/store.js';
import type { Db } from '../../core/db/postgres.js';
import { invalidField } from '../http/errors.js';
import { checkLink } from './throttle.js';
import { randomToken, tokenHash } from './tokens.js';

export interface NewLink {
  /** The secret, for the e-mail only: never stored, never logged. */
  token: string;
  /** What is stored. */
  hash: string;
  expiresAt: Date;
  /** `${baseUrl}${page}?token=…`: the page that posts the token to the API. */
  url: string;
}

/** A new link to `page` (e.g. `/reset-password`), valid `ttlS` seconds. */
export function newLink(baseUrl: string, page: string, ttlS: number): NewLink {
  const token = randomToken();
  return { token, hash: tokenHash(token), expiresAt: new Date(Date.now() + ttlS * 1000), url: `${baseUrl}${page}?token=${encodeURIComponent(token)}` };
}

/** The refusal of a link that is unknown, already used, withdrawn or expired: `noun` is e.g. "Reset link". */
export const invalidLink = (noun: string) => invalidField('token', `${noun} is unknown, already used or expired`);

export interface Redemption<L, P, T> {
  /** "Reset link", "Invitation link": leads the refusal's text. */
  noun: string;
  /** Looks the live link up by its hash (nothing spent); undefined when unknown, used or expired. */
  find: (db: Db, hash: string) => Promise<L | undefined>;
  /** Work done after the link was found and before the transaction (hashing a password): a junk token costs none of it. */
  prepare: (link: L) => Promise<P>;
  /** In one transaction: spends the link (undefined when another use won) and does what it grants. */
  spend: (tx: Db, hash: string, prepared: P) => Promise<T | undefined>;
}

/**
 * Redeems an e-mailed link: finds it (counted against the client address when unknown, see
 * checkLink), prepares, then spends it and applies it in one transaction; of two concurrent uses
 * one wins, the other is refused like an unknown link.
 */
export async function redeemLink<L, P, T>(db: Db, client: ClientInfo, token: string, how: Redemption<L, P, T>): Promise<T> {
  const hash = tokenHash(token);
  const link = await checkLink(db, client.ipAddress, () => how.find(db, hash));
  if (link === undefined) throw invalidLink(how.noun);
  const prepared = await how.prepare(link);
  const done = await db.transaction(async (tx) => {
    const result = await how.spend(tx, hash, prepared);
    if (result === undefined) throw invalidLink(how.noun);
    return result;
  });
  return done;
}
