import { Algorithm, hash, verify } from '@node-rs/argon2';

// argon2id with the OWASP-recommended cost (19 MiB, 2 passes); runs on libuv's thread pool.
const OPTIONS = { algorithm: Algorithm.Argon2id, memoryCost: 19456, timeCost: 2, parallelism: 1 } as const;

export const hashPassword = (password: string) => hash(password, OPTIONS);

let dummyHash: Promise<string> | undefined;

/**
 * Verifies a password against a stored hash, or, with no hash (unknown e-mail), against a dummy
 * one, so that an unknown account costs the same time as a wrong password.
 */
export async function verifyPassword(storedHash: string | undefined, password: string): Promise<boolean> {
  if (storedHash === undefined) {
    dummyHash ??= hashPassword('tailhouse-timing-equaliser');
    await verify(await dummyHash, password).catch(() => false);
    return false;
  }
  return verify(storedHash, password).catch(() => false);
}
