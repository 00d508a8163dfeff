import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MAX_BODY_BYTES } from '../../../src/app.js';
import { ADMIN_EMAIL, ADMIN_PASSWORD, call, login, startTestApp, type CallResult, type TestApp } from '../../support/app.js';

let t: TestApp;
let adminToken: string;
let adminId: number;

beforeAll(async () => {
  t = await startTestApp();
  const session = await login(t.app, ADMIN_EMAIL, ADMIN_PASSWORD);
  adminToken = session.accessToken;
  adminId = session.user.id;
});

afterAll(async () => {
  await t?.close();
});

/** Nothing of the server's insides: no stack frames, file paths or exception names. */
function expectNoLeak(body: unknown): void {
  const text = typeof body === 'string' ? body : JSON.stringify(body);
  expect(text).not.toMatch(/\n\s*at\s|\bat\s+[\w.<>]+\s+\(|\bat\s+(file|node):/);
  expect(text).not.toMatch(/\/work\/|\/home\/|\/tmp\/|node_modules|file:\/\/|\.[cm]?[jt]s:\d+/);
  expect(text).not.toMatch(/ZodError|TypeError|SyntaxError|ReferenceError|HTTPException|PGlite|Unexpected (token|end)|stack/i);
}

/** The error envelope (docs/reference/http.md#the-envelope): JSON, `success: false`, an `error` text, optional string `details`. */
function expectError(res: CallResult, status: number, error?: string): void {
  expect(res.status).toBe(status);
  expect(res.headers.get('content-type')).toMatch(/^application\/json/);
  expect(res.body.success).toBe(false);
  expect(typeof res.body.error).toBe('string');
  expect(res.body.error.length).toBeGreaterThan(0);
  if (error !== undefined) expect(res.body.error).toBe(error);
  for (const key of Object.keys(res.body)) expect(['success', 'error', 'details']).toContain(key);
  if ('details' in res.body) {
    expect(typeof res.body.details).toBe('object');
    for (const value of Object.values(res.body.details)) expect(typeof value).toBe('string');
  }
  expectNoLeak(res.body);
}

/** Sends a raw body through the app, bypassing the JSON helper. */
async function raw(method: string, url: string, body: string | undefined, headers: Record<string, string>): Promise<CallResult> {
  const response = await t.app.request(url, { method, headers, body });
  const text = await response.text();
  const parsed = (response.headers.get('content-type') ?? '').includes('json') ? JSON.parse(text) : text;
  return { status: response.status, headers: response.headers, body: parsed };
}

/** A JSON object of exactly `bytes` bytes: `{"email":"a@example.com","password":"xxx…"}`. */
function jsonOfSize(bytes: number): string {
  const head = '{"email":"a@example.com","password":"';
  const tail = '"}';
  return head + 'x'.repeat(bytes - head.length - tail.length) + tail;
}

describe('envelopes', () => {
  it('a read answers { success: true, data }', async () => {
    const res = await call(t.app, 'GET', `/api/users/${adminId}`, { token: adminToken });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^application\/json/);
    expect(Object.keys(res.body).sort()).toEqual(['data', 'success']);
    expect(res.body.success).toBe(true);
    expect(res.body.data).toMatchObject({ id: adminId, email: ADMIN_EMAIL, role: 'admin' });
    expect(res.body.data).not.toHaveProperty('password');
    expect(res.body.data).not.toHaveProperty('passwordHash');
    expect(res.body.data).not.toHaveProperty('password_hash');
  });

  it('a create answers 201 { success: true, data }', async () => {
    const res = await call(t.app, 'POST', '/api/domains', { token: adminToken, body: { name: 'envelope.example.com' } });
    expect(res.status).toBe(201);
    expect(Object.keys(res.body).sort()).toEqual(['data', 'success']);
    expect(res.body.data.name).toBe('envelope.example.com');
  });

  it('a delete answers { success: true, message }', async () => {
    const created = await call(t.app, 'POST', '/api/domains', { token: adminToken, body: { name: 'to-delete.example.com' } });
    const res = await call(t.app, 'DELETE', `/api/domains/${created.body.data.id}`, { token: adminToken });
    expect(res.status).toBe(200);
    expect(Object.keys(res.body).sort()).toEqual(['message', 'success']);
    expect(res.body.success).toBe(true);
    expect(typeof res.body.message).toBe('string');
  });

  it('a list answers data.<items> and data.pagination', async () => {
    const res = await call(t.app, 'GET', '/api/users?limit=1', { token: adminToken });
    expect(res.status).toBe(200);
    expect(Object.keys(res.body.data).sort()).toEqual(['pagination', 'users']);
    expect(res.body.data.pagination).toEqual({ page: 1, limit: 1, total: 1, pages: 1 });
  });

  it('an error answers { success: false, error }, a validation failure adds details', async () => {
    const notFound = await call(t.app, 'GET', '/api/users/999999', { token: adminToken });
    expectError(notFound, 404, 'User not found');
    expect(notFound.body).not.toHaveProperty('details');

    const invalid = await call(t.app, 'POST', '/api/users', { token: adminToken, body: { password: 'short' } });
    expectError(invalid, 422, 'Validation failed');
    expect(Object.keys(invalid.body.details).sort()).toEqual(['email', 'password']);
  });

  it('401 carries WWW-Authenticate: Bearer', async () => {
    for (const authorization of [undefined, 'Bearer', 'Basic YWRtaW46YWRtaW4=', 'Bearer not-a-jwt', 'Bearer thk_unknown']) {
      const res = await call(t.app, 'GET', '/api/users', authorization ? { headers: { authorization } } : {});
      expectError(res, 401, 'Authentication required');
      expect(res.headers.get('www-authenticate')).toBe('Bearer');
    }
  });
});

describe('unknown routes', () => {
  it.each([
    ['GET', '/nope'],
    ['GET', '/api'],
    ['GET', '/api/nope'],
    ['POST', '/api/nope'],
    ['GET', '/api/logs/nothing'],
    ['GET', '/healthz/deeper'],
  ])('%s %s is a JSON 404', async (method, url) => {
    const res = await call(t.app, method, url);
    expectError(res, 404, 'Not found');
  });

  it.each([
    ['GET', '/api/users/1/nothing'],
    ['GET', '/api/domains/1/nothing'],
    ['PATCH', '/api/domains/1'],
    ['DELETE', '/api/domains'],
  ])('%s %s (authenticated) is a JSON 404', async (method, url) => {
    const res = await call(t.app, method, url, { token: adminToken });
    expectError(res, 404, 'Not found');
  });
});

describe('request bodies', () => {
  const jsonRequired = 'Request body must be valid JSON (Content-Type: application/json)';

  it.each([
    ['text/plain', '{"email":"a@example.com","password":"whatever-1"}'],
    ['text/plain', 'email=a@example.com'],
    ['application/x-www-form-urlencoded', 'email=a%40example.com&password=whatever-1'],
    ['application/json', '{"email":"a@example.com","password":'],
    ['application/json', "{'email':'a@example.com'}"],
    ['application/json', 'not json'],
    ['application/json', ''],
  ])('%s %j is 400', async (contentType, body) => {
    const res = await raw('POST', '/api/auth/login', body, { 'content-type': contentType });
    expectError(res, 400, jsonRequired);
  });

  it('a body with no Content-Type is 400', async () => {
    const res = await raw('POST', '/api/auth/login', '{"email":"a@example.com","password":"whatever-1"}', {});
    expectError(res, 400);
  });

  it('non-JSON bodies are 400 on authenticated routes too', async () => {
    for (const [contentType, body] of [
      ['text/plain', 'name=x.example.com'],
      ['application/json', '{"name":'],
    ] as const) {
      const res = await raw('POST', '/api/domains', body, { 'content-type': contentType, authorization: `Bearer ${adminToken}` });
      expectError(res, 400, jsonRequired);
    }
  });

  it('JSON that is not an object is 422', async () => {
    for (const body of ['[]', 'null', '"x"', '42']) {
      const res = await raw('POST', '/api/domains', body, { 'content-type': 'application/json', authorization: `Bearer ${adminToken}` });
      expectError(res, 422, 'Validation failed');
    }
  });

  it(`a body of exactly ${MAX_BODY_BYTES} bytes is read; one byte more is 413`, async () => {
    expect(MAX_BODY_BYTES).toBe(1024 * 1024);
    const atLimit = await raw('POST', '/api/auth/login', jsonOfSize(MAX_BODY_BYTES), { 'content-type': 'application/json' });
    // Read and validated: the password is longer than 128 characters.
    expect(atLimit.status).not.toBe(413);
    expect([401, 422]).toContain(atLimit.status);

    const over = await raw('POST', '/api/auth/login', jsonOfSize(MAX_BODY_BYTES + 1), { 'content-type': 'application/json' });
    expectError(over, 413);
    expect(over.headers.get('connection')).toBe('close');
  });

  it('an oversized body is 413 whatever its declared length, route or authentication', async () => {
    const big = jsonOfSize(2 * MAX_BODY_BYTES);
    const declared = await raw('POST', '/api/auth/login', big, { 'content-type': 'application/json', 'content-length': String(big.length) });
    expectError(declared, 413);
    const anonymous = await raw('POST', '/api/domains', big, { 'content-type': 'application/json' });
    expectError(anonymous, 413);
    const authed = await raw('PUT', `/api/users/${adminId}`, big, { 'content-type': 'application/json', authorization: `Bearer ${adminToken}` });
    expectError(authed, 413);
    const text = await raw('POST', '/api/domains', big, { 'content-type': 'text/plain', authorization: `Bearer ${adminToken}` });
    expectError(text, 413);
  });

  it('an unknown field is 422 with details naming it', async () => {
    const loginRes = await call(t.app, 'POST', '/api/auth/login', { body: { email: ADMIN_EMAIL, password: ADMIN_PASSWORD, rememberMe: true } });
    expectError(loginRes, 422, 'Validation failed');
    expect(loginRes.body.details).toEqual({ rememberMe: 'Unknown field' });

    const domain = await call(t.app, 'POST', '/api/domains', { token: adminToken, body: { name: 'unknown-field.example.com', colour: 'red', owner: 1 } });
    expectError(domain, 422, 'Validation failed');
    expect(domain.body.details).toEqual({ colour: 'Unknown field', owner: 'Unknown field' });

    const nested = await call(t.app, 'PUT', `/api/users/${adminId}/permissions`, {
      token: adminToken,
      body: { permissions: [{ resource: 'logs', actions: ['read'], scope: 'all' }] },
    });
    expectError(nested, 422, 'Validation failed');
    // details maps top-level field names (the specification's); where in the field leads the message.
    expect(nested.body.details).toEqual({ permissions: '[0]: Unknown field scope' });
  });

  it("the read-only user fields are accepted and ignored", async () => {
    const res = await call(t.app, 'POST', '/api/users', {
      token: adminToken,
      body: { email: 'readonly@example.com', password: 'password-123', id: 424242, createdAt: '2000-01-01T00:00:00.000Z', updatedAt: 'x', lastLoginAt: '2000-01-01T00:00:00.000Z' },
    });
    expect(res.status).toBe(201);
    expect(res.body.data.id).not.toBe(424242);
    expect(res.body.data.createdAt).not.toBe('2000-01-01T00:00:00.000Z');
    expect(res.body.data.lastLoginAt).toBeNull();
  });
});

describe('client address', () => {
  async function lastActivity() {
    const res = await call(t.app, 'GET', `/api/users/${adminId}/activity?limit=1`, { token: adminToken });
    return res.body.data.activities[0] as { action: string; ipAddress: string; userAgent: string };
  }

  it('with TRUST_PROXY, the last X-Forwarded-For address is the client (earlier ones are the client’s word)', async () => {
    await call(t.app, 'POST', '/api/domains', { token: adminToken, body: { name: 'xff.example.com' }, ip: '198.51.100.1, 203.0.113.50', headers: { 'user-agent': 'xff-test' } });
    expect(await lastActivity()).toMatchObject({ action: 'domain.create', ipAddress: '203.0.113.50', userAgent: 'xff-test' });
    await call(t.app, 'POST', '/api/domains', { token: adminToken, body: { name: 'xff6.example.com' }, ip: '2001:db8::1' });
    expect(await lastActivity()).toMatchObject({ action: 'domain.create', ipAddress: '2001:db8::1' });
  });

  it('an X-Forwarded-For that is not an address is not recorded', async () => {
    await call(t.app, 'POST', '/api/domains', { token: adminToken, body: { name: 'xff-bad.example.com' }, ip: "'; drop table users; --" });
    const entry = await lastActivity();
    expect(entry.action).toBe('domain.create');
    expect(entry.ipAddress).not.toContain('drop');
  });
});

describe('health', () => {
  it('GET /healthz needs no token', async () => {
    const res = await call(t.app, 'GET', '/healthz');
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^application\/json/);
    expect(res.body).toEqual({ success: true });
  });

  it('GET /readyz needs no token and checks both stores', async () => {
    const res = await call(t.app, 'GET', '/readyz');
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ success: true });
  });

  it('ignores a bad token', async () => {
    expect((await call(t.app, 'GET', '/healthz', { token: 'garbage' })).status).toBe(200);
    expect((await call(t.app, 'GET', '/readyz', { token: 'garbage' })).status).toBe(200);
  });
});

describe('OpenAPI document', () => {
  const EXPECTED: Record<string, string[]> = {
    '/api/auth/login': ['post'],
    '/api/auth/refresh': ['post'],
    '/api/auth/logout': ['post'],
    '/api/auth/reset-password': ['post'],
    '/api/users': ['get', 'post'],
    '/api/users/{id}': ['delete', 'get', 'put'],
    '/api/users/{id}/password': ['put'],
    '/api/users/{id}/reset-password': ['post'],
    '/api/users/{id}/permissions': ['get', 'put'],
    '/api/users/{id}/activity': ['get'],
    '/api/domains': ['get', 'post'],
    '/api/domains/bulk': ['post'],
    '/api/domains/{domainId}': ['delete', 'get', 'put'],
    '/api/domains/{domainId}/ingest': ['get'],
  };
  const HTTP_METHODS = ['get', 'put', 'post', 'delete', 'patch', 'head', 'options', 'trace'];
  let doc: any;

  beforeAll(async () => {
    const res = await call(t.app, 'GET', '/api/openapi.json');
    expect(res.status).toBe(200);
    doc = res.body;
  });

  it('is OpenAPI 3.1 with info and the bearer scheme', () => {
    expect(doc.openapi).toMatch(/^3\.1\.\d+$/);
    expect(doc.info.title).toBe('tailhouse');
    expect(typeof doc.info.version).toBe('string');
    expect(doc.servers).toEqual([{ url: 'http://tailhouse.test' }]);
    expect(doc.components.securitySchemes.bearerAuth).toMatchObject({ type: 'http', scheme: 'bearer' });
  });

  it('lists every /api/auth, /api/users and /api/domains path with its methods', () => {
    for (const [path, methods] of Object.entries(EXPECTED)) {
      expect(doc.paths, path).toHaveProperty([path]);
      const documented = Object.keys(doc.paths[path]).filter((k) => HTTP_METHODS.includes(k)).sort();
      expect(documented, path).toEqual(methods);
    }
  });

  it('every documented operation of those areas answers (none is a 404 route)', async () => {
    const paths = Object.keys(doc.paths).filter((p) => /^\/api\/(auth|users|domains)(\/|$)/.test(p));
    expect(paths.length).toBeGreaterThanOrEqual(Object.keys(EXPECTED).length);
    for (const path of paths) {
      for (const method of Object.keys(doc.paths[path]).filter((k) => HTTP_METHODS.includes(k))) {
        const url = path.replace(/\{[^}]+\}/g, '2000000000');
        const res = await call(t.app, method.toUpperCase(), url, method === 'get' || method === 'delete' ? {} : { body: {} });
        expect(res.body, `${method} ${path}`).not.toEqual({ success: false, error: 'Not found' });
        // The dashboard's cookie session refuses first what lacks its header (src/auth/browser-session.ts).
        const refusals = path.startsWith('/api/auth/session') ? [403] : [400, 401, 422];
        expect(refusals, `${method} ${path} -> ${res.status}`).toContain(res.status);
      }
    }
  });

  it('users and domains operations require bearerAuth; auth operations do not', () => {
    for (const [path, methods] of Object.entries(EXPECTED)) {
      for (const method of methods) {
        const op = doc.paths[path][method];
        expect(typeof op.summary, `${method} ${path}`).toBe('string');
        if (path.startsWith('/api/auth/')) expect(op.security ?? [], `${method} ${path}`).toEqual([]);
        else expect(op.security, `${method} ${path}`).toEqual([{ bearerAuth: [] }]);
      }
    }
  });

  it('documents 201 for creates and the path parameters', () => {
    expect(doc.paths['/api/users'].post.responses).toHaveProperty('201');
    expect(doc.paths['/api/domains'].post.responses).toHaveProperty('201');
    expect(doc.paths['/api/auth/login'].post.responses).toHaveProperty('200');
    expect(doc.paths['/api/auth/login'].post.responses).toHaveProperty('429');
    const params = doc.paths['/api/domains/{domainId}'].get.parameters as { name: string; in: string }[];
    expect(params).toContainEqual(expect.objectContaining({ name: 'domainId', in: 'path' }));
    const userParams = doc.paths['/api/users/{id}'].get.parameters as { name: string; in: string }[];
    expect(userParams).toContainEqual(expect.objectContaining({ name: 'id', in: 'path' }));
    expect(doc.components.schemas).toHaveProperty('Domain');
    expect(doc.components.schemas).toHaveProperty('User');
  });
});

describe('API reference page', () => {
  it('GET /api/docs is HTML whose assets are all served locally', async () => {
    const page = await t.app.request('/api/docs');
    expect(page.status).toBe(200);
    expect(page.headers.get('content-type')).toMatch(/^text\/html/);
    const html = await page.text();
    expect(html).toMatch(/<!doctype html>/i);
    expect(html).not.toMatch(/https?:\/\//i);

    const urls = [...html.matchAll(/<(?:script|link)\b[^>]*\b(?:src|href)="([^"]+)"/gi)].map((m) => m[1]!);
    expect(urls.length).toBeGreaterThanOrEqual(3);
    const expectedTypes: [RegExp, RegExp][] = [
      [/\.css$/, /^text\/css/],
      [/\.js$/, /^(text|application)\/javascript/],
      [/\.png$/, /^image\/png/],
    ];
    for (const url of urls) {
      expect(url, url).toMatch(/^\/(?!\/)/);
      const asset = await t.app.request(url);
      expect(asset.status, url).toBe(200);
      const type = expectedTypes.find(([ext]) => ext.test(url));
      expect(type, `no expected type for ${url}`).toBeDefined();
      expect(asset.headers.get('content-type'), url).toMatch(type![1]);
      expect((await asset.arrayBuffer()).byteLength, url).toBeGreaterThan(0);
    }
    expect(urls.some((u) => u.endsWith('.css'))).toBe(true);
    expect(urls.filter((u) => u.endsWith('.js')).length).toBeGreaterThanOrEqual(2);
  });

  it('the init script loads the local OpenAPI document', async () => {
    const init = await t.app.request('/api/docs/init.js');
    expect(init.status).toBe(200);
    const text = await init.text();
    expect(text).toContain("'/api/openapi.json'");
    expect(text).not.toMatch(/https?:\/\//);
  });

  it('serves only its own assets', async () => {
    for (const url of ['/api/docs/assets/package.json', '/api/docs/assets/..%2Fpackage.json', '/api/docs/assets/..%2F..%2F..%2Fpackage.json', '/api/docs/assets/index.html']) {
      const res = await call(t.app, 'GET', url);
      expectError(res, 404);
    }
  });
});

// Last: these close the stores of this file's runtime.
describe('when the stores stop answering', () => {
  it('/readyz answers 503 once ClickHouse is closed, /healthz still 200', async () => {
    await t.runtime.clickhouse.close();
    const ready = await call(t.app, 'GET', '/readyz');
    expectError(ready, 503);
    expect(ready.body.error).toContain('clickhouse');
    expect(ready.body.error).not.toContain('postgres');
    const health = await call(t.app, 'GET', '/healthz');
    expect(health.status).toBe(200);
    expect(health.body).toEqual({ success: true });
  });

  it('an unexpected failure is a 500 "Internal server error" without a stack trace', async () => {
    // Closing Postgres under the app makes every authenticated request fail unexpectedly. The
    // runtime closes it again in afterAll; let that second close be a no-op.
    const db = t.runtime.db;
    const closeOnce = db.close.bind(db);
    let closed: Promise<void> | undefined;
    db.close = () => (closed ??= closeOnce());
    await db.close();

    for (const [method, url, body] of [
      ['GET', '/api/users', undefined],
      ['GET', `/api/domains`, undefined],
      ['POST', '/api/domains', { name: 'after-close.example.com' }],
    ] as const) {
      const res = await call(t.app, method, url, { token: adminToken, ...(body ? { body } : {}) });
      expectError(res, 500, 'Internal server error');
      expect(res.body).toEqual({ success: false, error: 'Internal server error' });
    }
    const login500 = await call(t.app, 'POST', '/api/auth/login', { body: { email: ADMIN_EMAIL, password: ADMIN_PASSWORD } });
    expectError(login500, 500, 'Internal server error');

    const ready = await call(t.app, 'GET', '/readyz');
    expectError(ready, 503);
    expect(ready.body.error).toContain('postgres');
  });
});
