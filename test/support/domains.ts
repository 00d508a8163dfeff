import type { App } from '../../src/app.js';
import { call } from './app.js';

let domainSeq = 0;
/** A domain name no other in this test process has: `tag-pid-n.example.com` (files share a Postgres server). */
export function uniqueDomainName(tag = 'site'): string {
  return `${tag}-${process.pid}-${++domainSeq}.example.com`;
}

/**
 * A domain registered through the API by an administrator (`admin` is its token), owned by
 * `ownerId` (null: by nobody), named `name` or a unique name led by `tag`.
 */
export async function registerDomain(
  app: App,
  admin: string,
  { ownerId, tag, name = uniqueDomainName(tag) }: { ownerId: number | null; tag?: string; name?: string },
): Promise<{ id: number; name: string }> {
  const res = await call(app, 'POST', '/api/domains', { token: admin, body: { name, ownerId } });
  if (res.status !== 201) throw new Error(`registering ${name}: ${res.status} ${JSON.stringify(res.body)}`);
  return { id: res.body.data.id as number, name };
}
