/**
 * Hostile input for every operation of the app's own OpenAPI document (/api/openapi.json), against
 * the real app on the embedded stores, as a signed-in administrator and as a plain user, with ids
 * that exist (the plain user's domain holds logs, an alert and an export) so that what passes
 * validation goes down to Postgres and ClickHouse.
 *
 * For every operation the document is read for its path and query parameters and its JSON body;
 * a valid request is built from the schemas (with real ids and a few values the schemas cannot
 * make up, such as a fresh e-mail address), checked to pass validation, and then every parameter
 * and body field (nested ones too) is replaced in turn by hostile values: wrong types, null, NUL
 * and lone surrogates, huge, negative and fractional numbers, very long strings, SQL and
 * parameter metacharacters, dates outside what the stores hold. Besides: duplicated and unknown
 * query parameters, unknown and duplicated body fields, bodies that are no object or no JSON.
 * Dates out of range and numbers at their maximum are also tried beside each optional parameter
 * alone, because each filter takes another path to the store (a status filter alone counts per
 * hour, a referrer search asks the rollups first).
 *
 * Every answer must be 2xx or 4xx with the envelope: `success` false and an `error` string on an
 * error, and on 422 `details` an object of strings keyed by top-level field names. Values are
 * fixed lists plus fast-check samples from a fixed seed, so a run sends the same requests every
 * time (about 17,000 of them, 20-30 s here; bounded by the document's size, not by time).
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import fc from 'fast-check';
import { simpleParser } from 'mailparser';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { issuePersonalToken } from '../../../src/auth/service.js';
import { randomToken, tokenHash } from '../../../src/auth/tokens.js';
import { upsertInvitation } from '../../../src/domains/invitations-store.js';
import { DIMENSION_NAMES, FILTER_OPS, METRIC_NAMES } from '../../../src/stats/registry.js';
import { ADMIN_EMAIL, ADMIN_PASSWORD, call, login, startTestApp, type CallResult, type TestApp } from '../../support/app.js';
import { seedLogs, type SeededLogs } from '../../support/logs.js';
import { uniqueTag } from '../../support/users.js';
import { HOUR_MS } from '../../../core/durations.js';

const SEED = 13;

type Schema = Record<string, any>;

interface Param {
  name: string;
  in: 'path' | 'query';
  required: boolean;
  schema: Schema;
}

interface Operation {
  method: string;
  path: string;
  params: Param[];
  body: Schema | null;
  secured: boolean;
}

/** A value sent as is in a URL (already percent-encoded), or one to encode. */
type UrlValue = { raw: string } | { text: string };

interface Request {
  path: Record<string, UrlValue>;
  query: [string, UrlValue][];
  /** A JSON value, or raw text with its content type. */
  body?: { json: unknown } | { text: string; contentType: string };
  /** What was changed, for the report of a failure. */
  label: string;
}

let t: TestApp;
/** A reset token from an e-mail in the outbox, for the reset operation's valid request. */
let resetToken = 'not-a-real-reset-token';
let doc: Schema;
let seeded: SeededLogs;
let plain: Actor;
let admin: Actor;
let downloadFile: string;

interface Actor {
  kind: 'admin' | 'user' | 'anonymous';
  id: number;
  token: string;
  email: string;
  password: string;
}

let ipSeq = 0;
/** Every request comes from an address of its own, so that no address throttle cuts the run short. */
const nextIp = () => {
  ipSeq++;
  return `10.${(ipSeq >> 16) & 255}.${(ipSeq >> 8) & 255}.${ipSeq & 255}`;
};

async function newUser(role: 'user' | 'admin' = 'user'): Promise<Actor> {
  const email = `${uniqueTag('hostile')}@example.com`;
  const password = 'hostile-password-1';
  const created = await call(t.app, 'POST', '/api/users', { token: admin.token, body: { email, password, role }, ip: nextIp() });
  if (created.status !== 201) throw new Error(`create user: ${created.status} ${JSON.stringify(created.body)}`);
  const session = await login(t.app, email, password, nextIp());
  return { kind: role, id: created.body.data.id, token: session.accessToken, email, password };
}

/** Asks for a password reset of `user` as the administrator and reads the token from the e-mail in the outbox. */
async function resetTokenOf(user: Actor): Promise<string> {
  const res = await call(t.app, 'POST', `/api/users/${user.id}/reset-password`, { token: admin.token, body: { email: user.email }, ip: nextIp() });
  if (res.status !== 200) throw new Error(`reset request: ${res.status} ${JSON.stringify(res.body)}`);
  const dir = path.join(t.dataDir, 'outbox');
  for (const file of await fs.readdir(dir)) {
    const mail = await simpleParser(await fs.readFile(path.join(dir, file)));
    const to = [mail.to ?? []].flat().flatMap((a) => a.value.map((v) => v.address));
    const token = /reset-password\?token=([A-Za-z0-9_%.~-]+)/.exec(mail.text ?? '')?.[1];
    if (to.includes(user.email) && token) return decodeURIComponent(token);
  }
  throw new Error(`no reset e-mail for ${user.email} in the outbox`);
}

async function newDomain(): Promise<number> {
  const res = await call(t.app, 'POST', '/api/domains', { token: admin.token, body: { name: `${uniqueTag('hostile')}.example.com`, ownerId: plain.id }, ip: nextIp() });
  if (res.status !== 201) throw new Error(`create domain: ${res.status} ${JSON.stringify(res.body)}`);
  return res.body.data.id;
}

/** A pending invitation to the domain, stored directly (inviting through the API counts against the inviter's quota); its id. */
async function newInvitation(domainId: number): Promise<number> {
  const row = await upsertInvitation(t.runtime.db, { domainId, email: `${uniqueTag('invited')}@example.com`, role: 'viewer', hash: tokenHash(randomToken()), invitedBy: plain.id, expiresAt: new Date(Date.now() + HOUR_MS) });
  return row.id;
}

/** A fresh user made a viewer of the domain (by its owner, the plain user); its id. */
async function newMember(domainId: number): Promise<number> {
  const member = await newUser();
  const res = await call(t.app, 'POST', `/api/domains/${domainId}/members`, { token: plain.token, body: { userId: member.id, role: 'viewer' }, ip: nextIp() });
  if (res.status !== 201) throw new Error(`add member: ${res.status} ${JSON.stringify(res.body)}`);
  return member.id;
}

/** A fresh group with a fresh member and a grant on a fresh domain (by the administrator); their ids. */
async function newGroup(): Promise<{ groupId: number; userId: number; domainId: number }> {
  const as = (method: string, path: string, body: unknown) => call(t.app, method, path, { token: admin.token, body, ip: nextIp() });
  const group = await as('POST', '/api/groups', { name: uniqueTag('hostile-group') });
  if (group.status !== 201) throw new Error(`create group: ${group.status} ${JSON.stringify(group.body)}`);
  const [userId, domainId, groupId] = [(await newUser()).id, await newDomain(), group.body.data.id as number];
  for (const [path, body] of [[`/api/groups/${groupId}/members`, { userId }], [`/api/groups/${groupId}/domains`, { domains: [domainId], role: 'viewer' }]] as const) {
    const res = await as('POST', path, body);
    if (res.status >= 300) throw new Error(`fill group: ${res.status} ${JSON.stringify(res.body)}`);
  }
  return { groupId, userId, domainId };
}

const alertBody = () => ({ name: 'hostile', condition: 'errorRate', operator: 'greaterThan', threshold: 0.5, duration: 300, notificationMethod: 'email', notificationTarget: 'ops@example.com' });

async function newAlert(domainId: number): Promise<number> {
  const res = await call(t.app, 'POST', `/api/logs/domains/${domainId}/alerts`, { token: plain.token, body: alertBody(), ip: nextIp() });
  if (res.status !== 201) throw new Error(`create alert: ${res.status} ${JSON.stringify(res.body)}`);
  return res.body.data.id;
}

/** A rule of the plain user over a new domain of theirs (the /api/logs/alerts/{alertId} operations). */
async function newRule(): Promise<number> {
  const domainId = await newDomain();
  const res = await call(t.app, 'POST', '/api/logs/alerts', { token: plain.token, body: { ...alertBody(), scope: { domainIds: [domainId] } }, ip: nextIp() });
  if (res.status !== 201) throw new Error(`create rule: ${res.status} ${JSON.stringify(res.body)}`);
  return res.body.data.id;
}

/** A silence of the administrator's over a new domain (silences need alerts:update, which a new user lacks). */
async function newSilence(): Promise<number> {
  const body = { domainIds: [await newDomain()], endsAt: new Date(Date.now() + 3_600_000).toISOString(), comment: 'hostile' };
  const res = await call(t.app, 'POST', '/api/logs/silences', { token: admin.token, body, ip: nextIp() });
  if (res.status !== 201) throw new Error(`create silence: ${res.status} ${JSON.stringify(res.body)}`);
  return res.body.data.id;
}

beforeAll(async () => {
  t = await startTestApp();
  const session = await login(t.app, ADMIN_EMAIL, ADMIN_PASSWORD, nextIp());
  admin = { kind: 'admin', id: session.user.id, token: session.accessToken, email: ADMIN_EMAIL, password: ADMIN_PASSWORD };
  plain = await newUser();
  seeded = await seedLogs(t, { access: 300, errors: 100, ownerId: plain.id, tag: 'hostile' });
  const exported = await call(t.app, 'POST', `/api/logs/domains/${seeded.domain.id}/export`, {
    token: plain.token,
    body: { type: 'access', startDate: new Date(seeded.access[0]!.timestamp).toISOString() },
    ip: nextIp(),
  });
  if (exported.status !== 201) throw new Error(`export: ${exported.status} ${JSON.stringify(exported.body)}`);
  downloadFile = new URL(exported.body.data.downloadUrl).pathname.split('/').pop()!;
  doc = (await call(t.app, 'GET', '/api/openapi.json')).body;
}, 120_000);

afterAll(async () => {
  await t?.close();
});

// ---------------------------------------------------------------------------------------------
// The document
// ---------------------------------------------------------------------------------------------

/** The schema with its $ref (and those of its properties and items, as they are reached) resolved. */
function resolve(schema: Schema | undefined): Schema {
  if (!schema) return {};
  if (schema.$ref) return resolve(doc.components.schemas[String(schema.$ref).split('/').pop()!]);
  return schema;
}

function operations(): Operation[] {
  const out: Operation[] = [];
  for (const [path, item] of Object.entries<Schema>(doc.paths)) {
    for (const [method, op] of Object.entries<Schema>(item)) {
      const params = (op.parameters ?? []).map((p: Schema) => ({ name: p.name, in: p.in, required: Boolean(p.required), schema: resolve(p.schema) }));
      // A body of several forms (POST /api/logs/query: one query or a batch) is fuzzed in its first.
      const body = op.requestBody ? alternatives(resolve(op.requestBody.content['application/json'].schema))[0]! : null;
      out.push({ method: method.toUpperCase(), path, params, body, secured: Boolean(op.security?.length) });
    }
  }
  return out;
}

/** The schemas of a value's alternatives (oneOf, anyOf) or the schema itself. */
const alternatives = (schema: Schema): Schema[] => (schema.oneOf ?? schema.anyOf ?? [schema]).map(resolve);
const typesOf = (schema: Schema): string[] => alternatives(schema).flatMap((s) => (Array.isArray(s.type) ? s.type : s.type ? [s.type] : []));

// ---------------------------------------------------------------------------------------------
// Valid values
// ---------------------------------------------------------------------------------------------

/** A parameter or body field the valid request leaves out: GET …/stats takes a period or a startDate, not both; a silence a window or a recurrence. */
const OMITTED = Symbol('omitted');

/**
 * Valid requests that take other paths: an alert notified by e-mail and one by webhook, an export
 * of access and one of error entries. Variant `i` takes the i-th of these values.
 */
const VARIANTS: Record<string, unknown[]> = {
  notificationMethod: ['email', 'webhook'],
  notificationTarget: ['ops@example.com', 'https://93.184.215.14/hooks/tailhouse?token=abc'],
  type: ['access', 'error'],
  filters: [{ statusCode: [500, '4xx'], url: '/item', ipAddress: '10.0.0.0/8', method: ['GET'] }, { level: ['error'] }],
};
/**
 * The stats query's valid requests: a series with filters, and a breakdown by domain with others. Its
 * schema allows what it refuses together (two time dimensions, orderBy naming what was not asked) and
 * describes filters as tuples, which validOf cannot fill.
 */
const QUERY_VARIANTS: Record<string, unknown[]> = {
  dimensions: [['time:hour', 'url'], ['domain', 'statusClass', 'bot']],
  filters: [
    [['is', 'statusClass', ['5xx']], ['glob', 'url', ['/item*']], ['contains', 'userAgent', ['bot']]],
    [['cidr', 'ipAddress', ['10.0.0.0/8', '2001:db8::/32']], ['isNot', 'bot', [true]], ['is', 'statusCode', [404]], ['is', 'domain', ['x.example.com']]],
  ],
  orderBy: [[['time:hour', 'asc']], [['requests', 'desc']]],
  dateRange: ['custom', 'custom'],
};
/** An alert's or rule's filters are the query's tuples (none, or a path and bots left out). */
const ALERT_VARIANTS: Record<string, unknown[]> = {
  ...VARIANTS,
  filters: [[], [['glob', 'path', ['/checkout*']], ['isNot', 'bot', [true]]]],
};
/** A silence is a fixed window or a weekly recurrence, never both (its domainIds: knownValid). */
const SILENCE_VARIANTS: Record<string, unknown[]> = {
  alertIds: [OMITTED, OMITTED],
  startsAt: [new Date(Date.now() + HOUR_MS).toISOString(), OMITTED],
  endsAt: [new Date(Date.now() + 2 * HOUR_MS).toISOString(), OMITTED],
  recurrence: [OMITTED, { weekdays: ['sun'], start: '02:00', end: '04:00', timezone: 'Europe/Paris' }],
};
/** A member is named by user id or, an invitation, by e-mail address: never both. */
const memberVariants = (): Record<string, unknown[]> => ({ userId: [admin.id, OMITTED], email: [OMITTED, `${uniqueTag('invited')}@example.com`] });
const variantsFor = (op: Operation) =>
  op.path === '/api/logs/query'
    ? QUERY_VARIANTS
    : op.path.startsWith('/api/logs/silences')
      ? SILENCE_VARIANTS
      : op.path.includes('/alerts')
        ? ALERT_VARIANTS
        : op.path.endsWith('/members') && op.method === 'POST'
          ? op.path.startsWith('/api/groups')
            ? { userId: [admin.id] }
            : memberVariants()
          : VARIANTS;
const variantsOf = (op: Operation) => Math.max(1, ...Object.keys(op.body?.properties ?? {}).map((k) => variantsFor(op)[k]?.length ?? 1));


/** What the schemas cannot tell: values that must be fresh, real or consistent with others. */
function knownValid(name: string, op: Operation, ctx: Context, variant: number): unknown {
  const variants = variantsFor(op)[name];
  if (variants && op.body?.properties?.[name]) return variants[variant % variants.length];
  switch (name) {
    case 'email':
      if (op.path === '/api/auth/login') return ctx.actor.email;
      if (op.path.endsWith('/reset-password') && op.path.startsWith('/api/users')) return ctx.targetEmail;
      return `${uniqueTag('fresh')}@example.com`;
    case 'password':
      return op.path === '/api/auth/login' ? ctx.actor.password : 'hostile-password-2';
    case 'currentPassword':
      return ctx.actor.password;
    case 'newPassword':
    case 'confirmPassword':
      return 'hostile-password-3';
    case 'refreshToken':
      return ctx.refreshToken;
    case 'token':
      return resetToken;
    case 'name':
      return op.path.startsWith('/api/domains') ? `${uniqueTag('fresh')}.example.com` : 'hostile name';
    case 'ownerId':
      return plain.id;
    // A member to add: a user that is not the domain's owner.
    case 'userId':
      return admin.id;
    case 'threshold':
      return 0.5;
    case 'query':
      return 'item';
    case 'period':
      return op.params.some((p) => p.name === 'startDate') ? OMITTED : undefined;
    case 'startDate':
      return new Date(seeded.access[0]!.timestamp - HOUR_MS).toISOString();
    case 'endDate':
      return new Date(Date.now() + 60_000).toISOString();
    case 'url':
      return '/item';
    case 'ipAddress':
      return '10.0.0.0/8';
    case 'statusCode':
      return op.params.some((p) => p.name === 'statusCode') ? '5xx' : [500, '4xx'];
    case 'method':
      return op.params.some((p) => p.name === 'method') ? 'GET' : ['GET'];
    case 'level':
      return op.params.some((p) => p.name === 'level') ? 'error' : ['error'];
    case 'permissions':
      return [{ resource: 'logs', actions: ['read'] }];
    case 'domains':
      return [seeded.domain.id];
    case 'domainIds':
      return op.path.startsWith('/api/logs/silences') ? [seeded.domain.id] : undefined;
    default:
      return undefined;
  }
}

/** A valid value of a schema; arrays of an enum hold every value (a search over all fields), whatever their default. */
function validOf(schema: Schema): unknown {
  const s = alternatives(schema)[0]!;
  const items = s.type === 'array' ? resolve(s.items) : undefined;
  if (items?.enum) return [...items.enum];
  if (s.example !== undefined) return s.example;
  if (s.default !== undefined) return s.default;
  if (s.enum) return s.enum[0];
  const type = typesOf(s).find((x) => x !== 'null');
  switch (type) {
    case 'integer':
    case 'number':
      return Math.max(1, s.minimum ?? 1);
    case 'boolean':
      return true;
    case 'array': {
      const items = resolve(s.items);
      return items.enum ? [...items.enum] : [validOf(items)];
    }
    case 'object':
      return Object.fromEntries(Object.entries<Schema>(s.properties ?? {}).map(([k, v]) => [k, validOf(resolve(v))]));
    default:
      return 'x';
  }
}

interface Context {
  actor: Actor;
  /** Path parameters: real ids. */
  ids: Record<string, string>;
  targetEmail: string;
  refreshToken: string;
}

function validField(name: string, schema: Schema, op: Operation, ctx: Context, variant = 0): unknown {
  return knownValid(name, op, ctx, variant) ?? validOf(schema);
}

function validBody(op: Operation, ctx: Context, variant = 0): Record<string, unknown> {
  const body: Record<string, unknown> = {};
  for (const [name, schema] of Object.entries<Schema>(op.body!.properties ?? {})) {
    if (schema.description === 'read-only; ignored') continue;
    const value = validField(name, resolve(schema), op, ctx, variant);
    if (value !== OMITTED) body[name] = value;
  }
  return body;
}

const text = (value: unknown): UrlValue => ({ text: String(value) });

function validQuery(op: Operation, ctx: Context, which: (p: Param) => boolean): [string, UrlValue][] {
  return op.params
    .filter((p) => p.in === 'query' && (p.required || which(p)))
    .map((p): [string, unknown] => [p.name, validField(p.name, p.schema, op, ctx)])
    .filter(([, value]) => value !== OMITTED)
    .map(([name, value]) => [name, text(value)]);
}

// ---------------------------------------------------------------------------------------------
// Hostile values
// ---------------------------------------------------------------------------------------------

const LONG = 'a'.repeat(10_000);
const VERY_LONG = 'b'.repeat(70_000);
const SQL = ["' OR 1=1 --", "'); DROP TABLE users; --", '{f0:String}', '%_\\*', '\\', '"', '`', '$1'];
const BROKEN_TEXT = ['a\u0000b', '\u0000', '\ud800', 'x\udc00y', '\udfff\ud800'];
const DATES_OUT_OF_RANGE = ['1969-12-31T23:59:59.999Z', '1969-12-31', '1970-01-01T00:00:00+01:00', '1900-01-01T00:00:00Z', '0001-01-01', '9999-12-31', '2106-02-07T06:28:16Z', '2200-01-01'];
const DATES_ODD = ['1970-01-01T00:00:00Z', '2106-02-06T23:59:59.999Z', '2026-02-30', '2026-13-01', 'yesterday', '+275760-09-13T00:00:00Z', '2026-11-21T25:00:00Z'];
const NUMBERS = [0, -1, 1.5, -0.5, 2 ** 31, 2 ** 31 - 1, 2 ** 32, 2 ** 53 + 2, 1e12, 1e15, 1e308, -1e308, 20_000];

/** Random odd text and JSON values from the fixed seed. */
const sampledText = fc.sample(fc.string({ unit: 'binary', maxLength: 24 }), { seed: SEED, numRuns: 6 });
const sampledJson = fc.sample(fc.jsonValue({ maxDepth: 2 }), { seed: SEED + 1, numRuns: 4 });

/** A valid text with NUL, lone surrogates or much more text in it: it may pass the field's own checks (a URL strips a trailing NUL). */
const spoiled = (valid: string) => [`${valid}\u0000`, `\u0000${valid}`, `${valid.slice(0, 1)}\u0000${valid.slice(1)}`, `${valid}\ud800`, `\udc00${valid}`, `${valid}${LONG}`];

/** Hostile values for a JSON field of `schema` whose valid value is `valid`. */
function hostileJson(schema: Schema, valid: unknown): unknown[] {
  const types = typesOf(schema);
  const out: unknown[] = [null, true, {}, [], [null], { $gt: '' }, ...sampledJson, '', ' ', ...BROKEN_TEXT, LONG, VERY_LONG, ...SQL, ...sampledText, ...NUMBERS];
  if (typeof valid === 'string') out.push(...spoiled(valid));
  if (Array.isArray(valid) && typeof valid[0] === 'string') out.push(...spoiled(valid[0]).map((v) => [v]));
  if (alternatives(schema).some((s) => s.format === 'date-time')) out.push(...DATES_OUT_OF_RANGE, ...DATES_ODD, 1_700_000_000_000);
  if (types.includes('integer') || types.includes('number')) out.push('1', '1e3', Number.MAX_SAFE_INTEGER, schema.maximum, schema.maximum + 1, schema.minimum - 1);
  if (types.includes('array')) {
    const item = validOf(resolve(schema.items));
    out.push([item, item], new Array(1000).fill(item), ...BROKEN_TEXT.map((b) => [b]), [LONG], [item, null], [[item]]);
  }
  if (types.includes('object')) {
    for (const [k, v] of Object.entries<Schema>(schema.properties ?? {})) out.push({ [k]: validOf(resolve(v)), unknownField: 1 });
  }
  return out.filter((v) => v !== undefined && !(typeof v === 'number' && Number.isNaN(v)));
}

/** Hostile values for a query or path parameter whose valid value is `valid`, as written in a URL. */
function hostileUrl(schema: Schema, valid: string): UrlValue[] {
  const raw = [
    '',
    '%20',
    '%00',
    'a%00b',
    '%ED%A0%80',
    '%C0%80',
    '%FF',
    '%',
    '%E2%82',
    '-1',
    '0',
    '1.5',
    '1e3',
    '0x10',
    '+1',
    '%201',
    '2147483648',
    '4294967296',
    '9007199254740993',
    '1000000000000',
    '99999999999999999999999',
    'null',
    'true',
    '%5B%5D',
    '..%2F..%2Fetc',
  ].map((r) => ({ raw: r }));
  const texts = [...SQL, LONG, VERY_LONG, ...sampledText.filter((s) => !/\p{Cs}/u.test(s))].map((s) => ({ text: s }));
  const out: UrlValue[] = [...raw, ...texts, ...['%00', '%ED%A0%80', '%FF'].map((bad) => ({ raw: `${encodeURIComponent(valid)}${bad}` })), { text: `${valid}${LONG}` }];
  if (schema.format === 'date-time') out.push(...[...DATES_OUT_OF_RANGE, ...DATES_ODD].map((d) => ({ text: d })));
  if (schema.maximum !== undefined) out.push({ text: String(schema.maximum) }, { text: String(schema.maximum + 1) });
  return out;
}

// ---------------------------------------------------------------------------------------------
// Requests
// ---------------------------------------------------------------------------------------------

const encode = (v: UrlValue) => ('raw' in v ? v.raw : encodeURIComponent(v.text));

function urlOf(op: Operation, req: Request): string {
  const path = op.path.replace(/\{(\w+)\}/g, (_, name: string) => {
    const value = req.path[name];
    if (!value) throw new Error(`no value for the path parameter ${name} of ${op.method} ${op.path}`);
    return encode(value);
  });
  const query = req.query.map(([k, v]) => `${encodeURIComponent(k)}=${encode(v)}`).join('&');
  return query ? `${path}?${query}` : path;
}

interface Answer {
  op: Operation;
  actor: Actor['kind'];
  label: string;
  status: number;
  /** An event stream (a live tail): its body is its first message, not JSON (call() leaves the stream after it). */
  stream: boolean;
  body: unknown;
}

async function send(op: Operation, actor: Actor, req: Request): Promise<Answer> {
  const headers: Record<string, string> = {};
  let body: string | undefined;
  if (req.body && 'json' in req.body) body = JSON.stringify(req.body.json);
  else if (req.body) {
    body = req.body.text;
    headers['content-type'] = req.body.contentType;
  }
  const res: CallResult = await call(t.app, op.method, urlOf(op, req), { ...(actor.kind === 'anonymous' ? {} : { token: actor.token }), body, headers, ip: nextIp() }).catch(
    (err: Error) => ({ status: -1, headers: new Headers(), body: `unparsable answer: ${err.message}` }),
  );
  const stream = (res.headers.get('content-type') ?? '').startsWith('text/event-stream');
  return { op, actor: actor.kind, label: req.label, status: res.status, stream, body: res.body };
}

/** What is wrong with an answer (empty when it is a 2xx/4xx with the envelope). */
function problems(answer: Answer, allowedKeys: Set<string>): string[] {
  const { status, body } = answer;
  const out: string[] = [];
  if (status < 200 || status >= 500) out.push(`status ${status}`);
  const download = answer.op.path === '/api/downloads/{file}' && status === 200;
  if (download) return out;
  if (answer.stream) return status === 200 && typeof body === 'string' && body.startsWith('retry: ') ? out : [...out, 'an event stream that is no 200 or does not start with retry:'];
  if (typeof body !== 'object' || body === null) return [...out, 'body is not a JSON object'];
  const envelope = body as { success?: unknown; error?: unknown; details?: unknown };
  if (status >= 400) {
    if (envelope.success !== false) out.push('success is not false');
    if (typeof envelope.error !== 'string') out.push('error is not a string');
    if ('data' in envelope) out.push('an error carries data');
  } else if (envelope.success !== true) out.push('success is not true');
  if (status === 422) {
    const details = envelope.details;
    if (typeof details !== 'object' || details === null || Array.isArray(details)) out.push('details is not an object');
    else {
      for (const [key, message] of Object.entries(details)) {
        if (typeof message !== 'string') out.push(`details.${key} is not a string`);
        if (!allowedKeys.has(key)) out.push('a details key is not a top-level field');
      }
    }
  }
  return out;
}

/** Every request of one operation for one actor: the valid one first, then the hostile ones. */
function requestsOf(op: Operation, ctx: Context): Request[] {
  const ids = Object.fromEntries(Object.entries(ctx.ids).map(([k, v]) => [k, text(v)]));
  const full = () => validQuery(op, ctx, () => true);
  const minimal = () => validQuery(op, ctx, () => false);
  const optional = op.params.filter((p) => p.in === 'query' && !p.required);
  const out: Request[] = [];
  const body = op.body ? () => ({ json: validBody(op, ctx) }) : () => undefined;
  const add = (label: string, parts: Partial<Request>) => out.push({ path: ids, query: full(), body: body(), label, ...parts });
  add('valid', {});

  // Path parameters.
  for (const p of op.params.filter((x) => x.in === 'path')) {
    for (const v of hostileUrl(p.schema, ctx.ids[p.name]!)) add(`path ${p.name}=${JSON.stringify(v).slice(0, 60)}`, { path: { ...ids, [p.name]: v } });
  }
  // Query parameters: each hostile value on the full and the minimal query; dates out of range and
  // numbers at their maximum also beside each optional parameter alone.
  for (const p of op.params.filter((x) => x.in === 'query')) {
    const others = (q: [string, UrlValue][]) => q.filter(([k]) => k !== p.name);
    for (const v of hostileUrl(p.schema, String(validField(p.name, p.schema, op, ctx)))) {
      const label = `query ${p.name}=${JSON.stringify(v).slice(0, 60)}`;
      add(label, { query: [...others(full()), [p.name, v]] });
      add(`${label} (alone)`, { query: [...others(minimal()), [p.name, v]] });
    }
    const shaping = [
      ...(p.schema.format === 'date-time' ? DATES_OUT_OF_RANGE.map((d) => ({ text: d })) : []),
      ...(p.schema.maximum !== undefined ? [{ text: String(p.schema.maximum) }] : []),
    ];
    for (const v of shaping) {
      for (const o of optional.filter((x) => x.name !== p.name)) {
        add(`query ${p.name}=${JSON.stringify(v)} with ${o.name}`, { query: [...validQuery(op, ctx, (x) => x === o), [p.name, v]] });
      }
    }
    add(`query ${p.name} twice`, { query: [...full(), [p.name, text(validField(p.name, p.schema, op, ctx))]] });
    add(`query ${p.name} twice, once hostile`, { query: [...full(), [p.name, { raw: '%00' }]] });
    add(`query ${p.name}[]`, { query: [...others(full()), [`${p.name}[]`, text(validField(p.name, p.schema, op, ctx))]] });
  }
  const maxed = op.params.filter((p) => p.in === 'query' && p.schema.maximum !== undefined);
  if (maxed.length > 1) add('query: every number at its maximum', { query: [...full().filter(([k]) => !maxed.some((m) => m.name === k)), ...maxed.map((m): [string, UrlValue] => [m.name, text(m.schema.maximum)])] });
  if (op.params.some((p) => p.in === 'query') || op.method === 'GET') add('query: unknown parameter', { query: [...full(), ['zzz', { raw: '%00' }]] });

  for (let variant = 0; op.body && variant < variantsOf(op); variant++) {
    const valid = () => validBody(op, ctx, variant);
    const tag = variant > 0 ? ` (variant ${variant})` : '';
    if (variant > 0) add(`valid${tag}`, { body: { json: valid() } });
    // Body fields, and one level of nested fields (filters.url, permissions[0].resource).
    for (const [name, raw] of Object.entries<Schema>(op.body.properties ?? {})) {
      const schema = resolve(raw);
      for (const v of hostileJson(schema, valid()[name])) add(`body ${name}=${JSON.stringify(v)?.slice(0, 60)}${tag}`, { body: { json: { ...valid(), [name]: v } } });
      add(`body without ${name}${tag}`, { body: { json: Object.fromEntries(Object.entries(valid()).filter(([k]) => k !== name)) } });
      // Nested fields: those the document names, and for an object it describes only in words
      // (the export's filters), the keys of the valid value.
      const nested = alternatives(schema).some((s) => typesOf(s).includes('array')) ? resolve(schema.items) : schema;
      const validInner = valid()[name];
      const subs = new Map(Object.entries<Schema>(nested.properties ?? {}).map(([k, v]) => [k, resolve(v)]));
      if (validInner && typeof validInner === 'object' && !Array.isArray(validInner)) for (const k of Object.keys(validInner)) if (!subs.has(k)) subs.set(k, {});
      for (const [sub, subSchema] of subs) {
        const inner = valid()[name];
        const first = (Array.isArray(inner) ? inner[0] : inner) as Record<string, unknown>;
        for (const v of hostileJson(subSchema, first?.[sub])) {
          const changed = Array.isArray(inner) ? [{ ...first, [sub]: v }] : { ...first, [sub]: v };
          add(`body ${name}.${sub}=${JSON.stringify(v)?.slice(0, 60)}${tag}`, { body: { json: { ...valid(), [name]: changed } } });
        }
      }
    }
    const maxedFields = Object.entries<Schema>(op.body.properties ?? {}).filter(([, s]) => resolve(s).maximum !== undefined);
    if (maxedFields.length > 1) add(`body: every number at its maximum${tag}`, { body: { json: { ...valid(), ...Object.fromEntries(maxedFields.map(([k, s]) => [k, resolve(s).maximum])) } } });
    // Dates out of range beside each search field alone and each filter alone.
    for (const [name, raw] of Object.entries<Schema>(op.body.properties ?? {})) {
      if (resolve(raw).format !== 'date-time') continue;
      for (const d of DATES_OUT_OF_RANGE) {
        for (const field of ['fields', 'filters']) {
          const choices = valid()[field];
          if (!choices || typeof choices !== 'object') continue;
          const singles = Array.isArray(choices) ? choices.map((f) => [f]) : Object.entries(choices).map(([k, v]) => ({ [k]: v }));
          for (const one of singles) add(`body ${name}=${d} with ${field} ${JSON.stringify(one)}${tag}`, { body: { json: { ...valid(), [field]: one, [name]: d } } });
        }
      }
    }
  }
  if (op.body) {
    for (const json of [null, [], 'text', 123, true, {}]) add(`body ${JSON.stringify(json)}`, { body: { json } });
    add('body with an unknown field', { body: { json: { ...validBody(op, ctx), unknownField: 'x' } } });
    add('body with a NUL in an unknown field name', { body: { json: { ...validBody(op, ctx), 'a\u0000b': 'x' } } });
    const validText = JSON.stringify(validBody(op, ctx));
    add('body with __proto__', { body: { text: `${validText.slice(0, -1)}${validText.length > 2 ? ',' : ''}"__proto__":{"admin":true}}`, contentType: 'application/json' } });
    const first = Object.keys(op.body.properties ?? {})[0];
    if (first) add('body with a duplicated field', { body: { text: `${validText.slice(0, -1)}${validText.length > 2 ? ',' : ''}"${first}":"\\u0000"}`, contentType: 'application/json' } });
    add('body not JSON', { body: { text: '{"a":', contentType: 'application/json' } });
    add('body as text/plain', { body: { text: validText, contentType: 'text/plain' } });
    add('body deeply nested', { body: { text: `${'['.repeat(5000)}${']'.repeat(5000)}`, contentType: 'application/json' } });
  }
  return out;
}

/** Whether the valid request is real throughout: a token from an e-mail is known for the password reset only. */
const knowsEveryValue = (op: Operation) => !op.body?.properties?.token || op.path === '/api/auth/reset-password';

/** Fields a 422 of the operation may name: its parameters, its body's top-level fields, and what the request added. */
function allowedDetailKeys(op: Operation): Set<string> {
  return new Set([...op.params.map((p) => p.name), ...Object.keys(op.body?.properties ?? {}), 'body', 'unknownField', 'zzz', '__proto__', 'a\u0000b']);
}

/**
 * The actors and ids an operation runs with. What it changes or deletes is made fresh for it (a
 * domain, an alert, a user; a user changing itself is a fresh user), so that the other operations
 * keep their domain, alert and sessions.
 */
async function contextsOf(op: Operation): Promise<Context[]> {
  const changes = op.method === 'PUT' || op.method === 'DELETE';
  const names = [...op.path.matchAll(/\{(\w+)\}/g)].map((m) => m[1]!);
  const last = names[names.length - 1];
  const contexts: Context[] = [];
  const session = async (actor: Actor) => (await login(t.app, actor.email, actor.password, nextIp())).refreshToken;
  if (!op.secured) {
    const actor = await newUser();
    if (op.path === '/api/auth/reset-password') resetToken = await resetTokenOf(actor);
    const ids = Object.fromEntries(names.map((name) => [name, name === 'file' ? downloadFile : '']));
    if (Object.values(ids).includes('')) throw new Error(`no real value known for a path parameter of ${op.method} ${op.path}`);
    return [{ actor: { ...actor, kind: 'anonymous' }, ids, targetEmail: actor.email, refreshToken: await session(actor) }];
  }
  for (const kind of ['admin', 'user'] as const) {
    let actor = kind === 'admin' ? admin : plain;
    const ids: Record<string, string> = {};
    let targetEmail = plain.email;
    // A group's operations name the group, then one of its members or the domain it was granted.
    const group = names[0] === 'groupId' ? await newGroup() : undefined;
    for (const name of names) {
      const fresh = changes && name === last;
      if (group && (name === 'groupId' || name === 'userId' || name === 'domainId')) ids[name] = String(group[name]);
      // An alert's operations get a domain of their own: creating alerts fills the seeded one up to its cap.
      else if (name === 'domainId') ids[name] = String(fresh || names.includes('alertId') ? await newDomain() : seeded.domain.id);
      else if (name === 'alertId') ids[name] = String(ids.domainId === undefined ? await newRule() : await newAlert(Number(ids.domainId)));
      else if (name === 'silenceId') ids[name] = String(await newSilence());
      // A member of the domain, to remove.
      else if (name === 'userId') ids[name] = String(await newMember(Number(ids.domainId)));
      else if (name === 'invitationId') ids[name] = String(await newInvitation(Number(ids.domainId)));
      else if (name === 'file') ids[name] = downloadFile;
      // A token of the user the path names (`id` comes first in the path).
      else if (name === 'tokenId') ids[name] = String((await issuePersonalToken(t.runtime.db, Number(ids.id), 'hostile')).row.id);
      else if (name === 'id') {
        // A user operation: the administrator on another user, the plain user on itself.
        const target = fresh || kind === 'admin' ? await newUser() : plain;
        if (kind === 'user' && fresh) actor = target;
        ids[name] = String(kind === 'user' ? actor.id : target.id);
        targetEmail = kind === 'user' ? actor.email : target.email;
      } else throw new Error(`no real value known for the path parameter ${name} of ${op.method} ${op.path}`);
    }
    contexts.push({ actor, ids, targetEmail, refreshToken: 'not-a-real-refresh-token' });
  }
  return contexts;
}

describe('hostile input for every operation of the OpenAPI document', () => {
  it('every answer is 2xx or 4xx with the envelope, and a valid request passes validation', async () => {
    const ops = operations();
    expect(ops.length).toBeGreaterThanOrEqual(29);
    // Failures grouped by operation and kind, with the first requests of each group.
    const failures = new Map<string, string[]>();
    const fail = (group: string, example: string) => failures.set(group, [...(failures.get(group) ?? []), example]);
    let sent = 0;
    const started = Date.now();
    for (const op of ops) {
      const allowed = allowedDetailKeys(op);
      for (const ctx of await contextsOf(op)) {
        const requests = requestsOf(op, ctx);
        for (const req of requests) {
          const answer = await send(op, ctx.actor, req);
          sent++;
          const where = `${op.method} ${op.path} as ${ctx.actor.kind}`;
          const body = JSON.stringify(answer.body).slice(0, 240);
          if (req.label.startsWith('valid') && answer.status === 422 && knowsEveryValue(op)) fail(`${where}: the valid request is refused`, body);
          const found = problems(answer, allowed);
          if (found.length > 0) fail(`${where}: ${found.join(', ')}`, `${req.label.slice(0, 160)} -> ${answer.status} ${body}`);
        }
      }
    }
    const count = [...failures.values()].reduce((n, list) => n + list.length, 0);
    const summary = `${sent} requests in ${((Date.now() - started) / 1000).toFixed(1)} s, ${count} failures`;
    const report = [...failures].map(([group, examples]) => `${group} (${examples.length}×), e.g. ${examples.slice(0, 2).join(' | ')}`);
    expect(report, summary).toEqual([]);
  }, 600_000);
});

/**
 * POST /api/logs/query's body is a small language (lists of names, filters as tuples of lists), so
 * beside the field-by-field values above it gets whole bodies generated from a fixed seed: valid
 * names mixed with junk, lists empty, nested and huge (thousands of entries, long strings), the
 * fields present or not. Whatever the mix, no answer is a 5xx.
 */
describe('POST /api/logs/query with generated bodies', () => {
  it('no generated body gets a 5xx, and every error has the envelope', async () => {
    const junk = fc.oneof(fc.constant(null), fc.boolean(), fc.integer(), fc.double(), fc.string({ maxLength: 40 }), fc.constant(LONG), fc.constant([]), fc.constant({}), fc.constant([[[[]]]]));
    /** A list: empty, short, or huge (an entry thousands of times, within the 1 MiB body limit). */
    const listOf = <T>(item: fc.Arbitrary<T>) =>
      fc.oneof(
        { arbitrary: fc.array(item, { minLength: 1, maxLength: 4 }), weight: 6 },
        { arbitrary: fc.constant([]), weight: 1 },
        { arbitrary: item.map((x) => new Array(JSON.stringify(x ?? null).length > 100 ? 50 : 3000).fill(x)), weight: 1 },
      );
    const value = fc.oneof(fc.string({ maxLength: 30 }), fc.constantFrom('5xx', '/item*', '*', '10.0.0.0/8', '2001:db8::/32', "' OR 1=1 --", '%_\\', 'x'.repeat(5000)), fc.integer({ min: -1, max: 70_000 }), fc.boolean());
    /** Filters that pass validation, their value lists empty to huge (up to the 1,000 a filter takes). */
    const validFilter = fc.oneof(
      fc.constantFrom<unknown[]>(['is', 'statusClass', ['5xx', '4xx']], ['isNot', 'bot', [true]], ['is', 'statusCode', [404, 500]], ['is', 'domain', ['x.example.com']]),
      fc.tuple(fc.constantFrom('glob', 'contains', 'is', 'isNot'), fc.constantFrom('url', 'path', 'userAgent', 'referrer'), fc.array(fc.oneof(fc.string({ minLength: 1, maxLength: 30 }), fc.constant('/item*')), { minLength: 1, maxLength: 1000 })),
      fc.tuple(fc.constant('cidr'), fc.constant('ipAddress'), fc.array(fc.constantFrom('10.0.0.0/8', '2001:db8::/32', '203.0.113.7'), { minLength: 1, maxLength: 100 })),
    );
    const plainDimensions = DIMENSION_NAMES.filter((d) => !d.startsWith('time'));
    /** Bodies of valid names in valid places (what validation lets through to the store, an empty orderBy included). */
    const validBody = fc
      .record({
        metrics: fc.uniqueArray(fc.constantFrom(...METRIC_NAMES), { minLength: 1, maxLength: 4 }),
        dimensions: fc.tuple(fc.uniqueArray(fc.constantFrom(...plainDimensions), { maxLength: 3 }), fc.option(fc.constantFrom('time', 'time:hour', 'time:day'), { nil: undefined })),
        filters: fc.array(validFilter, { maxLength: 4 }),
        dateRange: fc.constantFrom('1h', '24h', '7d', '30d'),
        compare: fc.option(fc.constant('previous'), { nil: undefined }),
        limit: fc.integer({ min: 1, max: 10_000 }),
      })
      .chain(({ dimensions: [plain, time], ...rest }) => {
        const dimensions = time ? [time, ...plain] : plain;
        const asked = [...rest.metrics, ...dimensions];
        return fc.subarray(asked).chain((named) =>
          fc.tuple(...named.map((name) => fc.tuple(fc.constant(name), fc.constantFrom('asc', 'desc')))).map((orderBy) => ({ domains: [seeded.domain.id], ...rest, dimensions, orderBy })),
        );
      });
    /** Bodies with junk anywhere: names that are none, lists in the wrong places, nesting. */
    const sometimes = <T>(arbitrary: fc.Arbitrary<T>) => fc.oneof({ arbitrary, weight: 4 }, { arbitrary: junk, weight: 1 });
    const nameOr = (names: readonly string[]) => sometimes(fc.constantFrom(...names));
    const hostileBody = fc.record(
      {
        domains: sometimes(listOf(fc.oneof(fc.integer({ min: -5, max: 2 ** 32 }), fc.constant(seeded.domain.id)))),
        metrics: sometimes(listOf(nameOr(METRIC_NAMES))),
        dimensions: sometimes(listOf(nameOr(DIMENSION_NAMES))),
        filters: sometimes(listOf(sometimes(fc.tuple(nameOr(FILTER_OPS), nameOr(DIMENSION_NAMES), sometimes(listOf(sometimes(value))))))),
        orderBy: sometimes(listOf(sometimes(fc.tuple(nameOr([...METRIC_NAMES, ...DIMENSION_NAMES]), nameOr(['asc', 'desc']))))),
        dateRange: nameOr(['1h', '24h', '7d', '30d', 'custom']),
        startDate: fc.oneof(fc.constantFrom(...DATES_ODD, ...DATES_OUT_OF_RANGE), junk),
        compare: nameOr(['previous']),
        limit: sometimes(fc.integer({ min: -1, max: 20_000 })),
        page: sometimes(fc.integer({ min: -1, max: 200 })),
      },
      { requiredKeys: [] },
    );
    const body = fc.oneof(validBody, hostileBody);
    const bodies = fc.sample(body, { seed: SEED + 2, numRuns: 300 });
    const failures: string[] = [];
    const statuses = new Map<number, number>();
    for (const json of bodies) {
      const text = JSON.stringify(json);
      const res = await call(t.app, 'POST', '/api/logs/query', { token: plain.token, body: text, ip: nextIp() });
      statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1);
      const envelopeOk = res.status < 400 ? res.body?.success === true : res.body?.success === false && typeof res.body.error === 'string';
      if (res.status >= 500 || !envelopeOk) failures.push(`${res.status} ${JSON.stringify(res.body).slice(0, 200)} for ${text.slice(0, 300)}`);
    }
    // The generator reaches the store too: many bodies are answered, not all refused.
    expect(statuses.get(200) ?? 0, JSON.stringify([...statuses])).toBeGreaterThan(50);
    expect(failures.slice(0, 5), `${failures.length} of ${bodies.length}`).toEqual([]);
  }, 300_000);
});
