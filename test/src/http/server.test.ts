import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { serve, type ServerType } from '@hono/node-server';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createApp, MAX_BODY_BYTES } from '../../../src/app.js';
import { THROTTLES } from '../../../src/auth/throttle.js';
import { ADMIN_EMAIL, ADMIN_PASSWORD, startTestApp, type TestApp } from '../../support/app.js';

// A real listening server (node's http stack, real sockets) over a runtime with TRUST_PROXY off.
let t: TestApp;
let server: ServerType;
let base: string;

beforeAll(async () => {
  t = await startTestApp({ TRUST_PROXY: 'false' });
  expect(t.runtime.config.trustProxy).toBe(false);
  const app = createApp(t.runtime);
  server = await new Promise<ServerType>((resolve) => {
    const s = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' }, () => resolve(s));
  });
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(async () => {
  if (server) {
    await new Promise<void>((resolve) => {
      server.close(() => resolve());
      if ('closeAllConnections' in server) server.closeAllConnections();
    });
  }
  await t?.close();
});

async function fetchJson(path: string, init: RequestInit = {}) {
  const res = await fetch(base + path, init);
  const text = await res.text();
  return { status: res.status, headers: res.headers, body: (res.headers.get('content-type') ?? '').includes('json') ? JSON.parse(text) : text };
}

async function signIn(headers: Record<string, string> = {}) {
  const res = await fetchJson('/api/auth/login', {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify({ email: ADMIN_EMAIL, password: ADMIN_PASSWORD }),
  });
  expect(res.status).toBe(200);
  return res.body.data as { accessToken: string; user: { id: number } };
}

async function latestActivity(token: string, userId: number) {
  const res = await fetchJson(`/api/users/${userId}/activity?limit=1`, { headers: { authorization: `Bearer ${token}` } });
  expect(res.status).toBe(200);
  return res.body.data.activities[0] as { action: string; ipAddress: string; userAgent: string };
}

/** Sends a chunked body (no Content-Length) of `bytes` bytes with node's http client. */
function postChunked(path: string, bytes: number): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = http.request(base + path, { method: 'POST', headers: { 'content-type': 'application/json', 'transfer-encoding': 'chunked' } }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (body += chunk));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    // The server may answer and close before all is sent; the answer is what counts.
    req.on('error', reject);
    const chunk = Buffer.alloc(64 * 1024, 'x');
    let sent = 0;
    const pump = () => {
      while (sent < bytes) {
        const piece = chunk.subarray(0, Math.min(chunk.length, bytes - sent));
        sent += piece.length;
        if (!req.write(piece)) return void req.once('drain', pump);
      }
      req.end();
    };
    req.write('{"email":"a@example.com","password":"');
    pump();
  });
}

describe('a real listening server', () => {
  it('answers health probes over the wire', async () => {
    const health = await fetchJson('/healthz');
    expect(health.status).toBe(200);
    expect(health.body).toEqual({ success: true });
    const ready = await fetchJson('/readyz');
    expect(ready.status).toBe(200);
    expect(ready.body).toEqual({ success: true });
    expect(health.headers.get('x-content-type-options')).toBe('nosniff');
  });

  it('without TRUST_PROXY records the socket address and ignores X-Forwarded-For', async () => {
    const session = await signIn({ 'x-forwarded-for': '198.51.100.23', 'user-agent': 'real-client/1.0' });
    const login = await latestActivity(session.accessToken, session.user.id);
    expect(login).toMatchObject({ action: 'login.succeeded', ipAddress: '127.0.0.1', userAgent: 'real-client/1.0' });

    const created = await fetchJson('/api/domains', {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${session.accessToken}`, 'x-forwarded-for': '203.0.113.9, 10.0.0.1', 'user-agent': 'real-client/2.0' },
      body: JSON.stringify({ name: 'socket.example.com' }),
    });
    expect(created.status).toBe(201);
    const entry = await latestActivity(session.accessToken, session.user.id);
    expect(entry).toMatchObject({ action: 'domain.create', ipAddress: '127.0.0.1', userAgent: 'real-client/2.0' });
  });

  it('a body over 1 MiB is 413, with Content-Length or chunked', async () => {
    const declared = await fetchJson('/api/domains', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: `{"name":"${'a'.repeat(MAX_BODY_BYTES)}"}`,
    });
    expect(declared.status).toBe(413);
    expect(declared.body).toEqual({ success: false, error: expect.any(String) });
    // The unread rest of the body makes the connection unusable; the client must be told.
    expect(declared.headers.get('connection')).toBe('close');
    const next = await fetchJson('/healthz');
    expect(next.status).toBe(200);

    const chunked = await postChunked('/api/auth/login', 2 * MAX_BODY_BYTES);
    expect(chunked.status).toBe(413);
    expect(JSON.parse(chunked.body)).toEqual({ success: false, error: expect.any(String) });
  });

  it('an unknown route is a JSON 404 over the wire', async () => {
    const res = await fetchJson('/api/nothing-here');
    expect(res.status).toBe(404);
    expect(res.headers.get('content-type')).toMatch(/^application\/json/);
    expect(res.body).toEqual({ success: false, error: 'Not found' });
  });

  // Last: it blocks logins from 127.0.0.1 for the rest of the file.
  it('a forged X-Forwarded-For does not dodge the per-address login throttle', async () => {
    for (let i = 0; i < THROTTLES['login-address'].max; i++) {
      const res = await fetchJson('/api/auth/login', {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-forwarded-for': `192.0.2.${i + 1}` },
        body: JSON.stringify({ email: `nobody${i}@example.com`, password: 'wrong-password' }),
      });
      expect(res.status).toBe(401);
    }
    const blocked = await fetchJson('/api/auth/login', {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-forwarded-for': '192.0.2.200' },
      body: JSON.stringify({ email: 'someone-else@example.com', password: 'wrong-password' }),
    });
    expect(blocked.status).toBe(429);
    expect(Number(blocked.headers.get('retry-after'))).toBeGreaterThan(0);
  });
});
