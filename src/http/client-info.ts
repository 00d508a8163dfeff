import { getConnInfo } from '@hono/node-server/conninfo';
import type { Context } from 'hono';
import { isIP } from 'node:net';
import type { ClientInfo } from '../activity/store.js';

/**
 * The client address: the socket's peer, or, with TRUST_PROXY, the last address in
 * X-Forwarded-For, which is the one the trusted proxy itself saw (earlier entries are the
 * client's word and could be forged to dodge throttling).
 */
export function clientInfo(c: Context, trustProxy: boolean): ClientInfo {
  const userAgent = c.req.header('user-agent') ?? '';
  if (trustProxy) {
    const forwarded = c.req.header('x-forwarded-for');
    const last = forwarded?.split(',').map((s) => s.trim()).filter(Boolean).pop();
    if (last && isIP(last)) return { ipAddress: last, userAgent };
  }
  let ipAddress = '';
  try {
    ipAddress = getConnInfo(c).remote.address ?? '';
  } catch {
    // No socket behind the request (app.request in tests, or another adapter).
  }
  return { ipAddress: ipAddress.replace(/^::ffff:/, ''), userAgent };
}
