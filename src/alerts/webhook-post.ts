/**
 * One webhook POST, over node:https (node:http only for origins the code allows), following no
 * redirect: a webhook is one request to the URL the user gave.
 *
 * The connection's own name lookup is the address check: the addresses a name resolves to are
 * judged (addresses.ts) and the connection goes to exactly those. A check before the request and a
 * second resolution by the connection would let a DNS answer that changes in between (DNS
 * rebinding: public for the check, 127.0.0.1 for the connection) point the POST at the server's own
 * network. An address literal is judged as it is (a connection to one looks nothing up).
 */
import http from 'node:http';
import https from 'node:https';
import { isIP, type LookupFunction } from 'node:net';
import { nonPublicRange, systemResolve, type AddressRule, type ResolveAll } from './addresses.js';

export interface WebhookRequest {
  headers: Record<string, string>;
  body: string;
  signal: AbortSignal;
}

/** Sends one POST; resolves with the answer's status once its head arrives (the body is not read). */
export type WebhookPost = (url: URL, request: WebhookRequest) => Promise<number>;

const refusal = (host: string, address: string, range: string) => new Error(`webhook host ${host} is a non-public address (${address}: ${range}): refused`);

/** The POST itself; `lookup` replaces the system's name lookup for the connection. */
export function postOnce(url: URL, request: WebhookRequest, lookup?: LookupFunction): Promise<number> {
  return new Promise((resolve, reject) => {
    const client = url.protocol === 'https:' ? https : http;
    const req = client.request(
      url,
      {
        method: 'POST',
        headers: { ...request.headers, 'content-length': String(Buffer.byteLength(request.body)) },
        signal: request.signal,
        // A connection of its own: nothing pooled outlives the request or is reused by another target.
        agent: false,
        ...(lookup ? { lookup } : {}),
      },
      (res) => {
        resolve(res.statusCode ?? 0);
        res.destroy();
      },
    );
    req.on('error', reject);
    req.end(request.body);
  });
}

/**
 * A lookup for the connection that resolves with `resolve` and fails with the refusal when any of
 * the name's addresses is not public; otherwise it hands the connection those addresses (of the
 * family asked for, all of them when asked for all).
 */
export function publicOnlyLookup(resolve: ResolveAll = systemResolve, rule: AddressRule = nonPublicRange): LookupFunction {
  return (hostname, options, callback) => {
    const done = callback as (err: Error | null, address: string | { address: string; family: number }[], family?: number) => void;
    resolve(hostname).then(
      (addresses) => {
        for (const address of addresses) {
          const range = rule(address);
          if (range !== null) return done(refusal(hostname, address, range), '');
        }
        const entries = addresses.map((address) => ({ address, family: isIP(address) })).filter((e) => !options.family || e.family === options.family);
        if (entries.length === 0) return done(Object.assign(new Error(`getaddrinfo ENOTFOUND ${hostname}`), { code: 'ENOTFOUND' }), '');
        if (options.all) return done(null, entries);
        return done(null, entries[0]!.address, entries[0]!.family);
      },
      (err: Error) => done(err, ''),
    );
  };
}

/** The POST for users' targets: only addresses `rule` allows (public ones), judged by the connection's own lookup. */
export function publicPost(resolve: ResolveAll = systemResolve, rule: AddressRule = nonPublicRange): WebhookPost {
  const lookup = publicOnlyLookup(resolve, rule);
  return (url, request) => {
    const host = url.hostname.replace(/^\[|\]$/g, '');
    if (isIP(host)) {
      const range = rule(host);
      if (range !== null) return Promise.reject(refusal(url.hostname, host, range));
    }
    return postOnce(url, request, lookup);
  };
}
