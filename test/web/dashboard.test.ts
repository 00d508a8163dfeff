/**
 * The dashboard (web/, served by src/web/) end to end in headless Chromium (Debian's `chromium`,
 * driven by playwright-core; CHROMIUM_PATH overrides where it is): sign-in, the fleet overview
 * against the API's own answers, the state in the URL across reloads, sign-out, accessibility
 * (axe-core: no serious or critical violation) and no request outside the server's origin.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { type Page, type Request } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from '../../core/db/sql.js';
import { parseIngestConfig } from '../../ingest/config.js';
import { startIngest, type IngestWorker } from '../../ingest/worker.js';
import { createLogger } from '../../core/log.js';
import { insertDomain } from '../../src/domains/store.js';
import { type BrowserApp, expectAccessible, signIn, startBrowserApp, watchedPages } from '../support/browser.js';
import { ADMIN_EMAIL, ADMIN_PASSWORD, call, createUserAndLogin, login, type TestApp } from '../support/app.js';
import { generateRows, insertRows } from '../support/query-rows.js';
import { PANELS } from '../../web/src/panels.js';
import { HOUR_MS } from '../../core/durations.js';

const PASSWORD = 'correct horse battery staple';

let t: TestApp;
let site: BrowserApp;
let base: string;
let admin: string;
let alice: { id: number; token: string };
const aliceDomains = ['shop.alice.example', 'blog.alice.example', 'api.alice.example'];
let aliceIds: number[] = [];
/** A log value that would run script if the page put it into HTML. */
const SCRIPT_URL = '/x"><img src=x onerror="window.__hacked=1"><script>window.__hacked=1</script>';
// Each flow drives a browser through several pages: up to 90 s on a loaded 2-core machine (the
// describes say so); expect.poll's own deadlines keep each wait bounded.

beforeAll(async () => {
  site = await startBrowserApp();
  ({ t, base } = site);
  admin = (await login(t.app, ADMIN_EMAIL, ADMIN_PASSWORD)).accessToken;
  alice = await createUserAndLogin(t.app, admin, { email: 'alice@example.com', password: PASSWORD });
  const ids: number[] = [];
  for (const name of aliceDomains) ids.push((await insertDomain(t.runtime.db, { name, ownerId: alice.id })).id);
  aliceIds = ids;
  const others = [];
  for (const name of ['bob.example', 'nobody.example']) others.push((await insertDomain(t.runtime.db, { name, ownerId: null })).id);
  // Rows over the last 24 hours for all but one domain of alice's (it shows zeros) and one other.
  const now = Date.now();
  const rows = [ids[0]!, ids[1]!, others[0]!].flatMap((domain, i) => generateRows({ seed: 40 + i, domain, count: 200 + 150 * i, from: now - 23 * HOUR_MS, to: now - 60_000 }));
  // Hostile values in the first domain's rows: a URL and a user agent carrying markup.
  const hostile = generateRows({ seed: 99, domain: ids[0]!, count: 30, from: now - 3 * HOUR_MS, to: now - 2 * HOUR_MS, firstId: 50_001 }).map((r) => ({ ...r, url: SCRIPT_URL, agent: `<script>window.__hacked=1</script>${r.agent}` }));
  await insertRows(t.runtime.clickhouse, [...rows, ...hostile]);
  // An alert of shop's, firing as the evaluator would have left it: the fleet shows it.
  const alert = await call(t.app, 'POST', `/api/logs/domains/${ids[0]}/alerts`, {
    token: alice.token,
    body: { name: 'shop is failing', condition: 'errorRate', operator: 'greaterThan', threshold: 0.01, duration: 300, notificationMethod: 'email', notificationTarget: 'oncall@example.com', enabled: true },
  });
  await t.runtime.db.query(sql`
    insert into alert_states (alert_id, domain_id, state, state_changed_at, last_triggered_at, notified_state, last_notified_at)
    values (${alert.body.data.id}, ${ids[0]!}, 'firing', now(), now(), 'firing', now())`);
}, 120_000);

afterAll(async () => {
  await site?.close();
});

const newPage = watchedPages(() => site);


const fleetNames = (page: Page) => page.locator('table.fleet tbody th[scope=row]').allTextContents();

describe('the dashboard', { timeout: 90_000 }, () => {
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
    // A sparkline per domain, of 24 whole hours: the 23 before this one solid, the line to this one
    // (still filling) dashed, so that it does not read as a fall.
    await expect.poll(() => page.locator('svg.sparkline').count()).toBe(3);
    const lines = await page.locator('svg.sparkline').evaluateAll((svgs) =>
      svgs.map((svg) => [...svg.querySelectorAll('polyline')].map((l) => `${l.getAttribute('class') ?? 'solid'} ${l.getAttribute('points')!.split(' ').length}`)),
    );
    expect(lines).toEqual(Array(3).fill(['solid 23', 'partial 2']));
    // The alerts firing now, by domain.
    const firing = async (name: string) => page.locator('table.fleet tbody tr').filter({ has: page.getByRole('link', { name, exact: true }) }).locator('td.firing').textContent();
    expect(await firing('shop.alice.example')).toBe('shop is failing');
    expect(await firing('blog.alice.example')).toBe('none');
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
    const [cookie] = await page.context().cookies();
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
    expect(await page.context().cookies()).toEqual([]);
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

  it('at a phone width (375 px) no page scrolls sideways: wide tables scroll in their own focusable region', async () => {
    const page = await newPage({ width: 375, height: 800 });
    await page.goto(`${base}/signin`);
    await signIn(page, ADMIN_EMAIL, ADMIN_PASSWORD);
    await page.waitForURL(`${base}/`);
    const id = aliceIds[0];
    // Each page with what shows it has drawn: its widest table, or the dashboard's panels answered.
    const pages: [string, string][] = [
      ['/', 'table.fleet tbody tr'],
      [`/domains/${id}`, '.panel table'],
      [`/domains/${id}/logs`, 'table.entries tbody tr'],
      [`/domains/${id}/alerts`, 'table.alerts tbody tr'],
      [`/domains/${id}/members`, 'form[aria-label="Invite by e-mail"]'],
      ['/admin', 'table.entries tbody tr'],
      ['/admin?tab=domains', 'table.entries tbody tr'],
      ['/admin?tab=groups', 'form[aria-label="New group"]'],
      ['/account', 'form'],
    ];
    for (const [path, drawn] of pages) {
      await page.goto(`${base}${path}`);
      await page.locator(drawn).first().waitFor();
      const widths = await page.evaluate(() => ({ page: document.documentElement.scrollWidth, view: document.documentElement.clientWidth }));
      expect(widths.page, path).toBeLessThanOrEqual(widths.view);
    }
    // A panel of two figures has room for the longest values a big domain's month gives (this
    // dataset's are short: they are written into the first row).
    await page.goto(`${base}/domains/${id}`);
    await page.locator('.panel table.figures-2 tbody tr').first().waitFor();
    const overflowing = await page.evaluate(() =>
      [...document.querySelectorAll('.panel table.figures-2 tbody tr:first-child')].flatMap((row) => {
        const cells = [...row.querySelectorAll<HTMLElement>('td.number')];
        cells.forEach((cell, i) => (cell.textContent = i === 0 ? '1,929,231' : '100.00 %'));
        return cells.filter((cell) => cell.scrollWidth > cell.clientWidth).map((cell) => cell.textContent);
      }),
    );
    expect(overflowing).toEqual([]);
    // A long entry (a user agent) shows three lines at most, the whole of it in its title.
    const lines = await page.evaluate(() => {
      const entry = document.querySelector<HTMLElement>('.panel .entry')!;
      entry.textContent = 'x';
      const line = entry.clientHeight;
      entry.textContent = 'Mozilla/5.0 (Linux; Android 13; SM-A536B) '.repeat(20);
      return entry.clientHeight / line;
    });
    expect(lines).toBeLessThanOrEqual(3);
    // The fleet's table is wider than the phone: its region scrolls, and the keyboard reaches it.
    await page.goto(`${base}/`);
    const region = page.getByRole('region', { name: 'Domains' });
    await region.locator('tbody tr').first().waitFor();
    expect(await region.evaluate((e) => e.scrollWidth > e.clientWidth)).toBe(true);
    await region.focus();
    await page.keyboard.press('ArrowRight');
    await expect.poll(() => region.evaluate((e) => e.scrollLeft)).toBeGreaterThan(0);
    await expectAccessible(page, 'the fleet at 375 px');
    // Where a table fits, its box is no stop of Tab's.
    await page.context().close();
    const wide = await newPage();
    await wide.goto(`${base}/signin?next=%2Faccount`);
    await signIn(wide, ADMIN_EMAIL, ADMIN_PASSWORD);
    const tokens = wide.locator('div.scroll[aria-label="Personal access tokens"]');
    await tokens.locator('table').waitFor();
    expect(await tokens.getAttribute('tabindex')).toBeNull();
  });
});

describe('the domain dashboard', { timeout: 90_000 }, () => {
  /** The query endpoint's answer for alice's first domain over 24 hours, with `filters`. */
  const apiAnswer = async (body: Record<string, unknown>) =>
    (await call(t.app, 'POST', '/api/logs/query', { token: admin, body: { domains: [aliceIds[0]], dateRange: '24h', ...body } })).body.data;
  const tile = (page: Page, metric: string) => page.locator(`.tile [data-metric="${metric}"]`);
  const panelEntries = (page: Page, title: string) => page.getByRole('region', { name: title }).locator('tbody th .entry').allTextContents();
  const format = (n: number) => new Intl.NumberFormat('en').format(n);
  const filtersInUrl = (page: Page) => new URL(page.url()).searchParams.getAll('f');

  it('shows the API figures; a click on a top page filters every panel, the tiles and the URL, and lists its full URLs; reload keeps the view', async () => {
    const page = await newPage();
    await page.goto(`${base}/signin`);
    await signIn(page, 'alice@example.com', PASSWORD);
    await page.getByRole('link', { name: aliceDomains[0] }).click();
    await page.waitForURL(`${base}/domains/${aliceIds[0]}`);
    const all = await apiAnswer({ metrics: ['requests', 'visitors'] });
    await expect.poll(() => tile(page, 'requests').textContent()).toBe(format(all.results[0].metrics[0]));
    expect(await tile(page, 'visitors').textContent()).toBe(format(all.results[0].metrics[1]));
    const shown = (r: any) => (r.dimensions[0] === '' ? '(none)' : r.dimensions[0]);
    const topPaths = (await apiAnswer({ metrics: ['requests'], dimensions: ['path'], limit: 10 })).results.map(shown);
    await expect.poll(() => panelEntries(page, 'Top pages')).toEqual(topPaths);
    await expect.poll(() => page.locator('.chart canvas').count()).toBeGreaterThanOrEqual(4);
    await expectAccessible(page, 'domain dashboard');

    // The hostile URL is among the top pages: it shows as text, and nothing of it runs.
    expect(topPaths).toContain(SCRIPT_URL);
    expect(await page.evaluate(() => (window as any).__hacked)).toBeUndefined();

    // A page with several query strings: a click filters by its path, and the panel lists its full URLs.
    const urlsOf = async (path: string) => (await apiAnswer({ metrics: ['requests'], dimensions: ['url'], filters: [['is', 'path', [path]]], limit: 10 })).results.map(shown);
    let chosen = '';
    for (const path of topPaths) if ((await urlsOf(path)).length > 1 && !chosen) chosen = path;
    expect(chosen, 'a top page with several full URLs').not.toBe('');
    const variants = await urlsOf(chosen);
    await page.getByRole('region', { name: 'Top pages' }).getByRole('button', { name: chosen, exact: true }).click();
    await expect.poll(() => filtersInUrl(page)).toEqual([`is:path:${chosen}`]);
    await expect(page.getByRole('list', { name: 'Filters' }).textContent()).resolves.toContain(`Path is ${chosen}`);
    const filtered = await apiAnswer({ metrics: ['requests'], filters: [['is', 'path', [chosen]]] });
    await expect.poll(() => tile(page, 'requests').textContent()).toBe(format(filtered.results[0].metrics[0]));
    await expect.poll(() => panelEntries(page, `Full URLs of ${chosen}`)).toEqual(variants);
    const browsers = (await apiAnswer({ metrics: ['requests'], dimensions: ['browser'], filters: [['is', 'path', [chosen]]], limit: 10 })).results.map((r: any) => r.dimensions[0] || '(none)');
    await expect.poll(() => panelEntries(page, 'Browsers')).toEqual(browsers);
    // A full URL narrows to it.
    await page.getByRole('region', { name: `Full URLs of ${chosen}` }).getByRole('button', { name: variants[1], exact: true }).click();
    await expect.poll(() => filtersInUrl(page)).toEqual([`is:path:${chosen}`, `is:url:${variants[1]}`]);
    await expect.poll(() => panelEntries(page, `Full URLs of ${chosen}`)).toEqual([variants[1]]);

    await page.reload();
    await expect.poll(() => panelEntries(page, `Full URLs of ${chosen}`)).toEqual([variants[1]]);
    // Removing the chips brings every figure back; back returns to the filtered view.
    await page.getByRole('button', { name: `Remove filter URL is ${variants[1]}` }).click();
    await expect.poll(() => tile(page, 'requests').textContent()).toBe(format(filtered.results[0].metrics[0]));
    await page.getByRole('button', { name: `Remove filter Path is ${chosen}` }).click();
    await page.waitForURL(`${base}/domains/${aliceIds[0]}`);
    await expect.poll(() => tile(page, 'requests').textContent()).toBe(format(all.results[0].metrics[0]));
    await expect.poll(() => panelEntries(page, 'Top pages')).toEqual(topPaths);
    await page.goBack();
    await expect.poll(() => panelEntries(page, `Full URLs of ${chosen}`)).toEqual(variants);
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

  it('asks for a view in two batches sent at once, the headline (tiles and charts) first, then the panels; charts name their buckets in words', async () => {
    const page = await newPage();
    // The order in which the page sends its queries and gets their answers (signed in straight to the dashboard: the fleet page asks its own).
    const events: string[] = [];
    const kind = (r: Request) => {
      const { queries } = JSON.parse(r.postData() ?? '{}');
      if (!Array.isArray(queries)) return 'single';
      return (queries[0].dimensions ?? []).length === 0 ? `headline of ${queries.length}` : `panels of ${queries.length}`;
    };
    const isQuery = (r: Request) => r.url().endsWith('/api/logs/query');
    page.on('request', (r) => isQuery(r) && events.push(`send ${kind(r)}`));
    page.on('requestfinished', (r) => isQuery(r) && events.push(`answer ${kind(r)}`));
    await page.goto(`${base}/signin?next=${encodeURIComponent(`/domains/${aliceIds[0]}`)}`);
    await signIn(page, 'alice@example.com', PASSWORD);
    await expect.poll(() => events.filter((e) => e.startsWith('answer')).length).toBe(2);
    expect(events.slice(0, 2)).toEqual(['send headline of 3', `send panels of ${PANELS.length}`]);
    expect(events.slice(2).sort()).toEqual(['answer headline of 3', `answer panels of ${PANELS.length}`]);
    await expect.poll(() => page.locator('section.panel table').count()).toBeGreaterThan(0);
    // 24 hours in automatic buckets are 5-minute ones.
    await expect.poll(() => page.locator('figcaption').allTextContents()).toContain('Requests per 5 minutes, by status class');
  });

  it("draws a chart's y axis in compact figures, as wide as its labels, and its time axis in UTC and 24 hours", async () => {
    // A browser in New York: uPlot's own time labels would be its local times, in 12 hours.
    const page = await newPage(undefined, 'America/New_York');
    // Every text drawn on a canvas, with its left edge there.
    await page.addInitScript(() => {
      const drawn: { text: string; left: number; canvas: HTMLCanvasElement }[] = [];
      (window as any).__drawn = drawn;
      const fillText = CanvasRenderingContext2D.prototype.fillText;
      CanvasRenderingContext2D.prototype.fillText = function (text: string, x: number, y: number, maxWidth?: number) {
        const width = this.measureText(text).width;
        drawn.push({ text, left: this.textAlign === 'right' ? x - width : this.textAlign === 'center' ? x - width / 2 : x, canvas: this.canvas });
        return fillText.call(this, text, x, y, maxWidth);
      };
    });
    // Requests by the million: the API's answer for the chart by status class, its figures scaled.
    await page.route(`${base}/api/logs/query`, async (route) => {
      const response = await route.fetch();
      const body = await response.json();
      const { queries } = JSON.parse(route.request().postData() ?? '{}');
      if (Array.isArray(queries) && queries.length === 3) for (const row of body.data.answers[2].data.results) row.metrics = row.metrics.map((m: number) => m * 1_000_000);
      await route.fulfill({ response, json: body });
    });
    await page.goto(`${base}/signin?next=${encodeURIComponent(`/domains/${aliceIds[0]}`)}`);
    await signIn(page, 'alice@example.com', PASSWORD);
    await expect.poll(() => page.locator('.chart canvas').count()).toBeGreaterThanOrEqual(4);
    const labels = () =>
      page.evaluate(() => {
        const first = document.querySelector('.chart canvas');
        return ((window as any).__drawn as { text: string; left: number; canvas: HTMLCanvasElement }[]).filter((d) => d.canvas === first).map(({ text, left }) => ({ text, left }));
      });
    await expect.poll(async () => (await labels()).length).toBeGreaterThan(0);
    const drawn = await labels();
    const times = drawn.filter((d) => /^\d\d:\d\d$|^\d{4}-\d\d-\d\d$/.test(d.text));
    const figures = drawn.filter((d) => !times.includes(d));
    expect(times.length, 'time labels HH:MM or YYYY-MM-DD').toBeGreaterThan(0);
    expect(figures.map((d) => d.text)).toContainEqual(expect.stringMatching(/^\d+(\.\d+)?M$/));
    for (const f of figures) {
      expect(f.text).toMatch(/^\d+(\.\d+)?[kMGT]?$/);
      expect(f.left, `${f.text} drawn whole`).toBeGreaterThanOrEqual(0);
    }
    // The legend names the time under the pointer in UTC too, not in the browser's zone.
    const over = page.locator('.chart .u-over').first();
    const box = (await over.boundingBox())!;
    // At the right edge: the last bucket, which started minutes ago.
    await page.mouse.move(box.x + box.width - 2, box.y + box.height / 2);
    const legendTime = page.locator('.chart .u-legend').first().locator('.u-series').first().locator('.u-value');
    await expect.poll(() => legendTime.textContent()).toMatch(/^\d{4}-\d\d-\d\d \d\d:\d\d UTC$/);
    const shown = Date.parse(`${(await legendTime.textContent())!.replace(' UTC', '').replace(' ', 'T')}:00Z`);
    // A label in New York's time would be 5 hours off.
    expect(Math.abs(Date.now() - shown)).toBeLessThan(3_600_000);
  });

  it("another owner's domain is the API's 404 as a message", async () => {
    const page = await newPage();
    await page.goto(`${base}/signin?next=${encodeURIComponent('/domains/999999')}`);
    await signIn(page, 'alice@example.com', PASSWORD);
    await expect(page.getByRole('alert').textContent()).resolves.toBe('Domain not found');
  });
});

describe('logs and alerts of a domain', { timeout: 90_000 }, () => {
  let worker: IngestWorker;
  let file: string;
  const combined = (url: string, status: number) => `203.0.113.9 - - [${new Date().toUTCString().replace(/^\w+, (\d+) (\w+) (\d+) ([\d:]+) GMT$/, '$1/$2/$3:$4 +0000')}] "GET ${url} HTTP/1.1" ${status} 123 "-" "curl/8.5.0"\n`;

  beforeAll(async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tailhouse-web-'));
    file = path.join(dir, 'access.log');
    fs.writeFileSync(file, '');
    const config = parseIngestConfig(`sources:\n  - domain: ${aliceDomains[1]}\n    access: ${JSON.stringify(file)}\n`, path.join(dir, 'ingest.yaml'));
    worker = await startIngest(config, { db: t.runtime.db, clickhouse: t.runtime.clickhouse, log: createLogger('silent'), dataDir: t.dataDir, statsIntervalMs: 0, pollMs: 20 });
  });
  afterAll(async () => {
    await worker?.close();
  });

  const listingTotal = async (query: string) => (await call(t.app, 'GET', `/api/logs/domains/${aliceIds[1]}/access?${query}`, { token: admin })).body.data.pagination.total;
  const caption = (page: Page) => page.locator('table.entries caption').last().textContent();
  const format = (n: number) => new Intl.NumberFormat('en').format(n);

  it('lists with filters and detail, tails live lines (pause and resume lose none) and exports the filtered rows', async () => {
    const page = await newPage();
    await page.goto(`${base}/domains/${aliceIds[1]}/logs`);
    await signIn(page, 'alice@example.com', PASSWORD);
    await expect.poll(() => caption(page)).toBe(`${format(await listingTotal(''))} entries, newest first`);
    await page.getByLabel('Status code').fill('4xx');
    await page.getByRole('button', { name: 'Apply' }).click();
    await expect.poll(() => new URL(page.url()).searchParams.get('statusCode')).toBe('4xx');
    const fours = await listingTotal('statusCode=4xx');
    expect(fours).toBeGreaterThan(0);
    await expect.poll(() => caption(page)).toBe(`${format(fours)} entries, newest first`);
    await page.getByRole('button', { name: 'Detail' }).first().click();
    await expect(page.locator('dl.detail dt').allTextContents()).resolves.toEqual(expect.arrayContaining(['url', 'statusCode', 'userAgent']));
    await expectAccessible(page, 'logs');

    // The live tail, with the listing's filter: a 404 appended to the followed file appears; a 200 does not.
    await page.getByRole('checkbox', { name: 'Live tail' }).check();
    await expect.poll(() => page.getByText('Live: new entries appear as they are stored').count()).toBe(1);
    fs.appendFileSync(file, combined('/tail-first', 404) + combined('/tail-ok', 200));
    const live = page.getByRole('region', { name: 'Live tail' });
    await expect.poll(() => live.locator('tbody td.wide').allTextContents(), { timeout: 15_000 }).toEqual(['/tail-first']);
    await live.getByRole('button', { name: 'Pause' }).click();
    fs.appendFileSync(file, combined('/tail-while-paused', 404));
    await expect.poll(async () => (await listingTotal('statusCode=4xx')) - fours, { timeout: 15_000 }).toBe(2);
    // Resuming asks for what follows the last event seen (whether or not the server's poller for
    // the domain outlived the pause: test/src/logs/tail.test.ts covers Last-Event-ID itself).
    const resumed = page.waitForRequest((r) => r.url().includes('/tail?'));
    await live.getByRole('button', { name: 'Resume' }).click();
    expect((await resumed).headers()['last-event-id']).toMatch(/^\d+\./);
    await expect.poll(() => live.locator('tbody td.wide').allTextContents(), { timeout: 15_000 }).toEqual(['/tail-while-paused', '/tail-first']);

    // Export these: the filtered rows as CSV through the link shown.
    await page.getByRole('button', { name: /^Export these/ }).click();
    const link = page.getByRole('link', { name: 'Download the export' });
    await expect.poll(() => link.count(), { timeout: 20_000 }).toBe(1);
    const href = (await link.getAttribute('href'))!;
    expect(href).toMatch(/^\/api\/downloads\//);
    const csv = await (await fetch(`${base}${href}`)).text();
    const lines = csv.trim().split('\n');
    expect(lines.length - 1).toBe(fours + 2);
    expect(lines.slice(1).every((l) => /,4\d\d,/.test(l))).toBe(true);

    // A search: entries of both kinds, with their URL or message.
    await page.getByRole('checkbox', { name: 'Live tail' }).uncheck();
    await page.getByLabel(/^Search/).fill('tail-while-paused');
    await page.getByRole('button', { name: 'Apply' }).click();
    await expect.poll(() => caption(page)).toBe('1 entries matching “tail-while-paused”, newest first');
    expect(await page.locator('table.entries tbody td.wide').allTextContents()).toEqual(['/tail-while-paused']);
    expect(await page.locator('table.entries tbody td').nth(1).textContent()).toBe('access');
  });

  it('creates an alert after a validation error at its field, edits, disables and deletes it', async () => {
    const page = await newPage();
    page.on('dialog', (dialog) => void dialog.accept());
    await page.goto(`${base}/domains/${aliceIds[1]}/alerts`);
    await signIn(page, 'alice@example.com', PASSWORD);
    await expect.poll(() => page.getByText('No alerts yet.').count()).toBe(1);
    await page.getByRole('button', { name: 'New alert' }).click();
    await page.getByLabel('Name').fill('Errors up');
    await page.getByLabel('Send to').fill('not an address');
    await page.getByRole('button', { name: 'Save' }).click();
    await expect.poll(() => page.locator('#alert-notificationTarget-error').textContent()).toMatch(/^Send to /);
    expect(await page.getByLabel('Send to').getAttribute('aria-invalid')).toBe('true');
    await expectAccessible(page, 'alert form with an error');
    await page.getByLabel('Send to').fill('oncall@example.com');
    await page.getByRole('button', { name: 'Save' }).click();
    await expect.poll(() => page.locator('table.alerts tbody th').allTextContents()).toEqual(['Errors up']);
    const stored = async () => (await call(t.app, 'GET', `/api/logs/domains/${aliceIds[1]}/alerts`, { token: admin })).body.data.alerts;
    expect(await stored()).toMatchObject([{ name: 'Errors up', notificationTarget: 'oncall@example.com', enabled: true, state: 'ok' }]);

    // A user's default rights have no alerts:update: no edit offered, until an administrator grants it.
    expect(await page.getByRole('button', { name: 'Edit' }).count()).toBe(0);
    const granted = await call(t.app, 'PUT', `/api/users/${alice.id}/permissions`, {
      token: admin,
      body: { permissions: [{ resource: 'logs', actions: ['read'] }, { resource: 'alerts', actions: ['read', 'create', 'update', 'delete'] }] },
    });
    expect(granted.status).toBe(200);
    await page.reload();
    await page.getByRole('button', { name: 'Edit' }).click();
    await page.getByLabel('Name').fill('Errors up a lot');
    await page.getByRole('button', { name: 'Save' }).click();
    await expect.poll(() => page.locator('table.alerts tbody th').allTextContents()).toEqual(['Errors up a lot']);
    await page.getByRole('button', { name: 'Disable' }).click();
    await expect.poll(() => page.locator('table.alerts .state').textContent()).toBe('disabled');
    expect((await stored())[0]).toMatchObject({ name: 'Errors up a lot', enabled: false });
    await expectAccessible(page, 'alerts');
    await page.getByRole('button', { name: 'Delete' }).click();
    await expect.poll(() => page.getByText('No alerts yet.').count()).toBe(1);
    expect(await stored()).toEqual([]);
  });
});

describe('administration', { timeout: 90_000 }, () => {
  it('an administrator creates a user (after a validation error), sets permissions, edits (after a refused e-mail), e-mails a reset link, deactivates, adds and deletes a domain; others see no administration', async () => {
    const page = await newPage();
    page.on('dialog', (dialog) => void (dialog.type() === 'prompt' ? dialog.accept('carol.example') : dialog.accept()));
    await page.goto(`${base}/signin`);
    await signIn(page, ADMIN_EMAIL, ADMIN_PASSWORD);
    await page.getByRole('link', { name: 'Administration' }).click();
    await page.waitForURL(`${base}/admin`);
    const form = page.getByRole('form', { name: 'New user' });
    await form.getByLabel('E-mail').fill('carol@example.com');
    await form.getByLabel('Password').fill('short');
    await page.getByRole('button', { name: 'Create user' }).click();
    await expect.poll(() => form.getByRole('alert').textContent()).toMatch(/^password /);
    await form.getByLabel('Password').fill('carol-password-1');
    await page.getByRole('button', { name: 'Create user' }).click();
    await page.getByRole('button', { name: 'carol@example.com' }).click();
    await expect.poll(() => new URL(page.url()).searchParams.get('user')).toMatch(/^\d+$/);
    const carol = Number(new URL(page.url()).searchParams.get('user'));
    // The defaults of a new user, then domains:read added.
    await expect.poll(() => page.getByLabel('alerts create').isChecked()).toBe(true);
    expect(await page.getByLabel('alerts update').isChecked()).toBe(false);
    await page.getByLabel('domains read').check();
    // The page reads the user again after a save: that read is held until the edit form has been
    // typed into, and what was typed stays (the read once put the stored e-mail back over it).
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    await page.route((url) => url.pathname === `/api/users/${carol}/activity`, async (route) => (await held, route.continue()), { times: 1 });
    await page.getByRole('button', { name: 'Save permissions' }).click();
    await expect.poll(async () => (await call(t.app, 'GET', `/api/users/${carol}/permissions`, { token: admin })).body.data.permissions).toEqual([
      { resource: 'domains', actions: ['read'] },
      { resource: 'logs', actions: ['read'] },
      { resource: 'alerts', actions: ['read', 'create', 'delete'] },
    ]);
    // Edited: another user's e-mail is refused at the form, then a new name and e-mail are saved.
    const user = async () => (await call(t.app, 'GET', `/api/users/${carol}`, { token: admin })).body.data;
    const edit = page.getByRole('form', { name: 'Edit user' });
    await edit.getByLabel('E-mail').fill('alice@example.com');
    release();
    await expect.poll(() => page.getByText('Permissions saved').count()).toBe(1);
    expect(await edit.getByLabel('E-mail').inputValue()).toBe('alice@example.com');
    await edit.getByRole('button', { name: 'Save' }).click();
    await expect.poll(() => edit.getByRole('alert').textContent()).toMatch(/e-?mail/i);
    await edit.getByLabel('E-mail').fill('carol.jones@example.com');
    await edit.getByLabel('Name').fill('Carol Jones');
    await edit.getByRole('button', { name: 'Save' }).click();
    await expect.poll(user).toMatchObject({ email: 'carol.jones@example.com', name: 'Carol Jones', active: true });
    // The API has it before the page has read the answer: the refusal's message goes once it has.
    await expect.poll(() => edit.getByRole('alert').count()).toBe(0);
    await expect.poll(() => page.getByRole('button', { name: 'carol.jones@example.com' }).count()).toBe(1);
    await page.getByRole('button', { name: 'E-mail a password reset link' }).click();
    await expect.poll(() => page.getByText('A reset link was e-mailed').count()).toBe(1);
    await page.getByRole('button', { name: 'Deactivate' }).click();
    await expect.poll(user).toMatchObject({ active: false });
    await expectAccessible(page, 'administration: users');

    await page.getByRole('button', { name: 'Domains' }).click();
    await page.waitForURL(`${base}/admin?tab=domains`);
    await page.getByLabel('Domain', { exact: true }).fill('carol.example');
    await page.getByLabel('Owner (user id)', { exact: true }).fill(String(carol));
    await page.getByRole('button', { name: 'Add domain' }).click();
    const owned = async () => (await call(t.app, 'GET', '/api/domains?search=carol.example', { token: admin })).body.data.domains;
    await expect.poll(owned).toMatchObject([{ name: 'carol.example', ownerId: carol }]);
    await expectAccessible(page, 'administration: domains');
    await page.locator('tr', { has: page.getByRole('rowheader', { name: 'carol.example' }) }).getByRole('button', { name: 'Delete' }).click();
    await expect.poll(owned).toEqual([]);

    // A plain user has no administration.
    await page.context().close();
    const other = await newPage();
    await other.goto(`${base}/admin`);
    await signIn(other, 'alice@example.com', PASSWORD);
    await expect.poll(() => other.getByRole('alert').textContent()).toBe('Administration is for administrators.');
    expect(await other.getByRole('link', { name: 'Administration' }).count()).toBe(0);
  });
});

describe('the account page', { timeout: 90_000 }, () => {
  it('creates a token shown once, revokes it, and changes the password (which ends the session)', async () => {
    const dave = await createUserAndLogin(t.app, admin, { email: 'dave@example.com', password: PASSWORD });
    const page = await newPage();
    page.on('dialog', (dialog) => void dialog.accept());
    await page.goto(`${base}/signin`);
    await signIn(page, 'dave@example.com', PASSWORD);
    await page.getByRole('link', { name: 'dave@example.com' }).click();
    await page.waitForURL(`${base}/account`);
    await page.getByLabel('Name').fill('nightly script');
    await page.getByRole('button', { name: 'Create token' }).click();
    const secret = (await page.locator('.secret code').textContent())!;
    expect(secret).toMatch(/^thk_/);
    expect((await call(t.app, 'GET', `/api/users/${dave.id}`, { token: secret })).status).toBe(200);
    await expect.poll(() => page.locator('table.entries tbody th').allTextContents()).toEqual(['nightly script']);
    await expectAccessible(page, 'account');
    await page.getByRole('button', { name: 'Revoke nightly script' }).click();
    await expect.poll(() => page.locator('table.entries tbody td').nth(2).textContent()).toMatch(/^revoked /);
    expect((await call(t.app, 'GET', `/api/users/${dave.id}`, { token: secret })).status).toBe(401);
    // The secret is not shown again after a reload.
    await page.reload();
    await expect.poll(() => page.locator('table.entries tbody th').allTextContents()).toEqual(['nightly script']);
    expect(await page.locator('.secret').count()).toBe(0);

    await page.getByLabel('Current password').fill('not the password');
    await page.getByLabel('New password', { exact: true }).fill('a new password 2');
    await page.getByLabel('New password again').fill('a new password 2');
    await page.getByRole('button', { name: 'Change the password' }).click();
    await expect.poll(() => page.getByRole('alert').textContent()).toMatch(/currentPassword/);
    await page.getByLabel('Current password').fill(PASSWORD);
    await page.getByRole('button', { name: 'Change the password' }).click();
    await page.waitForURL(`${base}/signin?next=${encodeURIComponent('/account')}`);
    await signIn(page, 'dave@example.com', 'a new password 2');
    await page.waitForURL(`${base}/account`);
  });
});
