/**
 * The dashboard (web/, served by src/web/) end to end in headless Chromium (Debian's `chromium`,
 * driven by playwright-core; CHROMIUM_PATH overrides where it is): sign-in, the fleet overview
 * against the API's own answers, the state in the URL across reloads, sign-out, accessibility
 * (axe-core: no serious or critical violation) and no request outside the server's origin.
 */
import fs from 'node:fs';
import { createRequire } from 'node:module';
import type { AddressInfo } from 'node:net';
import { serve, type ServerType } from '@hono/node-server';
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createApp } from '../src/app.js';
import { insertDomain } from '../src/domains/store.js';
import { NODE_SERVER_OPTIONS } from '../src/http/node-server.js';
import { buildWebAssets } from '../src/web/assets.js';
import { ADMIN_EMAIL, ADMIN_PASSWORD, call, createUserAndLogin, login, startTestApp, type TestApp } from './support/app.js';
import { generateRows, insertRows, HOUR } from './support/query-rows.js';

const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
const AXE = fs.readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8');
const PASSWORD = 'correct horse battery staple';

let t: TestApp;
let server: ServerType;
let base: string;
let browser: Browser;
let admin: string;
let alice: { id: number; token: string };
const aliceDomains = ['shop.alice.example', 'blog.alice.example', 'api.alice.example'];
let aliceIds: number[] = [];
/** A log value that would run script if the page put it into HTML. */
const SCRIPT_URL = '/x"><img src=x onerror="window.__hacked=1"><script>window.__hacked=1</script>';
let context: BrowserContext;
/** Requests of the current test's pages to anywhere but the server, and loads their CSP refused. */
let foreign: string[] = [];

beforeAll(async () => {
  t = await startTestApp();
  const app = createApp(t.runtime, { web: await buildWebAssets() });
  server = await new Promise<ServerType>((resolve) => {
    const s = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1', serverOptions: NODE_SERVER_OPTIONS }, () => resolve(s));
  });
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  admin = (await login(t.app, ADMIN_EMAIL, ADMIN_PASSWORD)).accessToken;
  alice = await createUserAndLogin(t.app, admin, { email: 'alice@example.com', password: PASSWORD });
  const ids: number[] = [];
  for (const name of aliceDomains) ids.push((await insertDomain(t.runtime.db, { name, ownerId: alice.id })).id);
  aliceIds = ids;
  const others = [];
  for (const name of ['bob.example', 'nobody.example']) others.push((await insertDomain(t.runtime.db, { name, ownerId: null })).id);
  // Rows over the last 24 hours for all but one domain of alice's (it shows zeros) and one other.
  const now = Date.now();
  const rows = [ids[0]!, ids[1]!, others[0]!].flatMap((domain, i) => generateRows({ seed: 40 + i, domain, count: 200 + 150 * i, from: now - 23 * HOUR, to: now - 60_000 }));
  // Hostile values in the first domain's rows: a URL and a user agent carrying markup.
  const hostile = generateRows({ seed: 99, domain: ids[0]!, count: 30, from: now - 3 * HOUR, to: now - 2 * HOUR, firstId: 50_001 }).map((r) => ({ ...r, url: SCRIPT_URL, agent: `<script>window.__hacked=1</script>${r.agent}` }));
  await insertRows(t.runtime.clickhouse, [...rows, ...hostile]);
  browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
}, 120_000);

afterAll(async () => {
  await browser?.close();
  await new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()));
  await t?.close();
});

async function newPage(): Promise<Page> {
  context = await browser.newContext();
  foreign = [];
  const page = await context.newPage();
  page.on('request', (request) => {
    if (!request.url().startsWith(`${base}/`) && !request.url().startsWith('data:')) foreign.push(request.url());
  });
  // What the page's CSP stopped before it became a request counts too.
  page.on('console', (message) => {
    if (message.type() === 'error' && message.text().includes('Content Security Policy')) foreign.push(message.text());
  });
  return page;
}

afterEach(async () => {
  await context?.close();
  expect(foreign, 'requests outside the server').toEqual([]);
});

async function signIn(page: Page, email: string, password: string): Promise<void> {
  await page.getByLabel('E-mail').fill(email);
  await page.getByLabel('Password').fill(password);
  await page.getByRole('button', { name: 'Sign in' }).click();
}

/** axe-core over the page as it is: no serious or critical violation. */
async function expectAccessible(page: Page, what: string): Promise<void> {
  // Evaluated through the debugging protocol: the page's CSP (rightly) refuses inline scripts.
  await page.evaluate(AXE);
  const violations = await page.evaluate(async () => {
    const result = await (window as any).axe.run(document, { resultTypes: ['violations'] });
    return result.violations.filter((v: any) => v.impact === 'serious' || v.impact === 'critical').map((v: any) => `${v.id}: ${v.help} (${v.nodes.length})`);
  });
  expect(violations, what).toEqual([]);
}

const fleetNames = (page: Page) => page.locator('table.fleet tbody th[scope=row]').allTextContents();

describe('the dashboard', () => {
  it('signs in from any URL and returns there; the fleet lists exactly the visible domains with the API figures', async () => {
    const page = await newPage();
    await page.goto(`${base}/?sort=name`);
    await page.waitForURL(`${base}/signin?next=${encodeURIComponent('/?sort=name')}`);
    await expectAccessible(page, 'sign-in');
    await signIn(page, 'alice@example.com', PASSWORD);
    await page.waitForURL(`${base}/?sort=name`);
    await expect.poll(() => fleetNames(page)).toEqual([...aliceDomains].sort());
    // The figures are the query endpoint's for the same 24 hours.
    const { body } = await call(t.app, 'POST', '/api/logs/query', { token: alice.token, body: { metrics: ['requests'], dimensions: ['domain'], dateRange: '24h' } });
    const requests = new Map(body.data.results.map((r: any) => [r.dimensions[0], r.metrics[0]]));
    for (const name of aliceDomains) {
      const cell = page.locator('table.fleet tbody tr').filter({ has: page.getByRole('link', { name, exact: true }) }).locator('td').first();
      expect(await cell.textContent(), name).toBe(new Intl.NumberFormat('en').format(Number(requests.get(name) ?? 0)));
    }
    // A sparkline per domain, of 25 hourly points.
    await expect.poll(() => page.locator('svg.sparkline').count()).toBe(3);
    await expectAccessible(page, 'fleet');
  });

  it('keeps sort and search in the URL across a reload, and the session through its cookie', async () => {
    const page = await newPage();
    await page.goto(`${base}/signin`);
    await signIn(page, 'alice@example.com', PASSWORD);
    await page.waitForURL(`${base}/`);
    await page.getByRole('button', { name: /^Domain/ }).click();
    await page.waitForURL(`${base}/?sort=name&dir=asc`);
    await page.getByRole('button', { name: /^Domain/ }).click();
    await page.waitForURL(`${base}/?sort=name&dir=desc`);
    await expect.poll(() => fleetNames(page)).toEqual([...aliceDomains].sort().reverse());
    await page.getByLabel('Search domains').fill('blog');
    await page.waitForURL(/q=blog/);
    await expect.poll(() => fleetNames(page)).toEqual(['blog.alice.example']);
    // No token in the page's storage; the refresh token is a cookie its scripts cannot read.
    expect(await page.evaluate(() => [localStorage.length, sessionStorage.length, document.cookie])).toEqual([0, 0, '']);
    const [cookie] = await context.cookies();
    expect(cookie).toMatchObject({ httpOnly: true, sameSite: 'Strict', path: '/api/auth/session' });
    await page.reload();
    await expect.poll(() => fleetNames(page)).toEqual(['blog.alice.example']);
    expect(page.url()).toBe(`${base}/?sort=name&dir=desc&q=blog`);
    // Typing in the search replaces the history entry; back goes to the sort before it.
    await page.goBack();
    await expect.poll(() => page.url()).toBe(`${base}/?sort=name&dir=asc`);
    await expect.poll(() => fleetNames(page)).toEqual([...aliceDomains].sort());
  });

  it('an administrator sees every domain; a wrong password shows the API message; sign-out ends the session', async () => {
    const page = await newPage();
    await page.goto(base);
    await signIn(page, ADMIN_EMAIL, 'not the password');
    await expect(page.getByRole('alert').textContent()).resolves.toBe('Invalid email or password');
    await signIn(page, ADMIN_EMAIL, ADMIN_PASSWORD);
    await expect.poll(() => fleetNames(page)).toHaveLength(aliceDomains.length + 2);
    await page.getByRole('button', { name: 'Sign out' }).click();
    await page.waitForURL(`${base}/signin`);
    expect(await context.cookies()).toEqual([]);
    await page.goto(`${base}/`);
    await page.waitForURL(/\/signin\?next=/);
  });

  it('a session that ends while the page is open returns to sign-in, and then to where the user was', async () => {
    const page = await newPage();
    await page.goto(`${base}/?q=shop`);
    await signIn(page, 'alice@example.com', PASSWORD);
    await expect.poll(() => fleetNames(page)).toEqual(['shop.alice.example']);
    // Every session of alice's ends (an administrator setting her password does that).
    const reset = await call(t.app, 'PUT', `/api/users/${alice.id}/password`, { token: admin, body: { newPassword: PASSWORD, confirmPassword: PASSWORD } });
    expect(reset.status, JSON.stringify(reset.body)).toBe(200);
    await page.reload();
    await page.waitForURL(`${base}/signin?next=${encodeURIComponent('/?q=shop')}`);
    await signIn(page, 'alice@example.com', PASSWORD);
    await page.waitForURL(`${base}/?q=shop`);
    await expect.poll(() => fleetNames(page)).toEqual(['shop.alice.example']);
  });

  it('unknown dashboard paths are the page; unknown API paths stay JSON 404s; the page loads nothing from elsewhere', async () => {
    const page = await newPage();
    const res = await page.goto(`${base}/no/such/page`);
    expect(res?.status()).toBe(200);
    expect(res?.headers()['content-security-policy']).toContain("script-src 'self'");
    const api = await fetch(`${base}/api/nothing-here`);
    expect(api.status).toBe(404);
    expect(await api.json()).toEqual({ success: false, error: 'Not found' });
    expect((await fetch(`${base}/assets/app-nothing.js`)).status).toBe(404);
  });
});

describe('the domain dashboard', () => {
  /** The query endpoint's answer for alice's first domain over 24 hours, with `filters`. */
  const apiAnswer = async (body: Record<string, unknown>) =>
    (await call(t.app, 'POST', '/api/logs/query', { token: admin, body: { domains: [aliceIds[0]], dateRange: '24h', ...body } })).body.data;
  const tile = (page: Page, metric: string) => page.locator(`.tile [data-metric="${metric}"]`);
  const panelEntries = (page: Page, title: string) => page.getByRole('region', { name: title }).locator('tbody th .entry').allTextContents();
  const format = (n: number) => new Intl.NumberFormat('en').format(n);
  const filtersInUrl = (page: Page) => new URL(page.url()).searchParams.getAll('f');

  it('shows the API figures; a click on a top URL filters every panel, the tiles and the URL; reload keeps the view', async () => {
    const page = await newPage();
    await page.goto(`${base}/signin`);
    await signIn(page, 'alice@example.com', PASSWORD);
    await page.getByRole('link', { name: aliceDomains[0] }).click();
    await page.waitForURL(`${base}/domains/${aliceIds[0]}`);
    const all = await apiAnswer({ metrics: ['requests', 'visitors'] });
    await expect.poll(() => tile(page, 'requests').textContent()).toBe(format(all.results[0].metrics[0]));
    expect(await tile(page, 'visitors').textContent()).toBe(format(all.results[0].metrics[1]));
    const topUrls = (await apiAnswer({ metrics: ['requests'], dimensions: ['url'], limit: 10 })).results.map((r: any) => (r.dimensions[0] === '' ? '(none)' : r.dimensions[0]));
    await expect.poll(() => panelEntries(page, 'Top URLs')).toEqual(topUrls);
    await expect.poll(() => page.locator('.chart canvas').count()).toBeGreaterThanOrEqual(4);
    await expectAccessible(page, 'domain dashboard');

    // The hostile URL is among the top ones: it shows as text, and nothing of it runs.
    expect(topUrls).toContain(SCRIPT_URL);
    expect(await page.evaluate(() => (window as any).__hacked)).toBeUndefined();

    const chosen = topUrls[1]!;
    await page.getByRole('region', { name: 'Top URLs' }).getByRole('button', { name: chosen, exact: true }).click();
    await expect.poll(() => filtersInUrl(page)).toEqual([`is:url:${chosen}`]);
    await expect(page.getByRole('list', { name: 'Filters' }).textContent()).resolves.toContain(`URL is ${chosen}`);
    const filtered = await apiAnswer({ metrics: ['requests'], filters: [['is', 'url', [chosen]]] });
    await expect.poll(() => tile(page, 'requests').textContent()).toBe(format(filtered.results[0].metrics[0]));
    await expect.poll(() => panelEntries(page, 'Top URLs')).toEqual([chosen]);
    const browsers = (await apiAnswer({ metrics: ['requests'], dimensions: ['browser'], filters: [['is', 'url', [chosen]]], limit: 10 })).results.map((r: any) => r.dimensions[0] || '(none)');
    await expect.poll(() => panelEntries(page, 'Browsers')).toEqual(browsers);

    await page.reload();
    await expect.poll(() => tile(page, 'requests').textContent()).toBe(format(filtered.results[0].metrics[0]));
    await expect.poll(() => panelEntries(page, 'Top URLs')).toEqual([chosen]);
    // Removing the chip brings every figure back; back returns to the filtered view.
    await page.getByRole('button', { name: `Remove filter URL is ${chosen}` }).click();
    await page.waitForURL(`${base}/domains/${aliceIds[0]}`);
    await expect.poll(() => tile(page, 'requests').textContent()).toBe(format(all.results[0].metrics[0]));
    await page.goBack();
    await expect.poll(() => panelEntries(page, 'Top URLs')).toEqual([chosen]);
    expect(await page.evaluate(() => (window as any).__hacked)).toBeUndefined();
  });

  it('excludes an entry, compares with the previous period and changes the period, all in the URL', async () => {
    const page = await newPage();
    await page.goto(`${base}/domains/${aliceIds[0]}?period=7d`);
    await signIn(page, 'alice@example.com', PASSWORD);
    await page.waitForURL(`${base}/domains/${aliceIds[0]}?period=7d`);
    const top = (await apiAnswer({ dateRange: '7d', metrics: ['requests'], dimensions: ['statusCode'], limit: 1 })).results[0].dimensions[0];
    await expect.poll(() => panelEntries(page, 'Status codes')).toContain(String(top));
    await page.getByRole('button', { name: `Exclude Status code ${top}` }).click();
    await expect.poll(() => filtersInUrl(page)).toEqual([`isNot:statusCode:${top}`]);
    expect(new URL(page.url()).searchParams.get('period')).toBe('7d');
    const rest = await apiAnswer({ dateRange: '7d', metrics: ['requests'], filters: [['isNot', 'statusCode', [top]]] });
    await expect.poll(() => tile(page, 'requests').textContent()).toBe(format(rest.results[0].metrics[0]));
    await expect.poll(() => panelEntries(page, 'Status codes')).not.toContain(String(top));

    await page.getByLabel('Compare with the previous period').check();
    await expect.poll(() => page.url()).toContain('compare=1');
    // All rows lie in the last 24 hours: the week before has none.
    await expect.poll(() => page.locator('.tile .change').first().textContent()).toBe('no earlier figure');

    await page.getByLabel('Period', { exact: true }).selectOption('1h');
    await expect.poll(() => page.url()).toContain('period=1h');
    const hour = await apiAnswer({ dateRange: '1h', metrics: ['requests'], filters: [['isNot', 'statusCode', [top]]] });
    await expect.poll(() => tile(page, 'requests').textContent()).toBe(format(hour.results[0].metrics[0]));
  });

  it("another owner's domain is the API's 404 as a message", async () => {
    const page = await newPage();
    await page.goto(`${base}/signin?next=${encodeURIComponent('/domains/999999')}`);
    await signIn(page, 'alice@example.com', PASSWORD);
    await expect(page.getByRole('alert').textContent()).resolves.toBe('Domain not found');
  });
});
