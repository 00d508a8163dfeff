/**
 * The alerting pages of the dashboard (issue 30 §6) end to end in headless Chromium, set up as
 * test/web/dashboard.test.ts is: the Alerting page (a rule over chosen domains with a path filter,
 * after a validation error at its field; a silence created and ended; a weekly silence created
 * from the form, listed as a recurrence and stored as one; the history across domains,
 * paged), the link to it only for users who may read alerts, and a domain's alerts page showing
 * the rule that covers it, its state there and its history after a round of the evaluator (virtual
 * clock, logs through the real import path). axe-core finds no serious or critical violation.
 */
import fs from 'node:fs';
import { type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../core/log.js';
import { recordHistory } from '../../src/alerts/store.js';
import { insertDomain } from '../../src/domains/store.js';
import { evaluatorOf } from '../support/alerts.js';
import { type BrowserApp, expectAccessible, signIn, startBrowserApp, watchedPages } from '../support/browser.js';
import { ADMIN_EMAIL, ADMIN_PASSWORD, call, createUserAndLogin, login, type TestApp } from '../support/app.js';
import { HOST_FORMAT, importText, timeLocal } from '../support/ingest.js';

const PASSWORD = 'correct horse battery staple';
const INTERVAL = 30_000;

let t: TestApp;
let site: BrowserApp;
let base: string;
let admin: string;
let alice: { id: number; token: string };
const names = { shop: 'shop.oncall.example', blog: 'blog.oncall.example', api: 'api.oncall.example' };
const ids = { shop: 0, blog: 0, api: 0 };

beforeAll(async () => {
  site = await startBrowserApp();
  ({ t, base } = site);
  admin = (await login(t.app, ADMIN_EMAIL, ADMIN_PASSWORD)).accessToken;
  alice = await createUserAndLogin(t.app, admin, { email: 'alice@example.com', password: PASSWORD });
  // On-call staff: the default permissions plus alerts:update, which silences need.
  const granted = await call(t.app, 'PUT', `/api/users/${alice.id}/permissions`, {
    token: admin,
    body: { permissions: [{ resource: 'logs', actions: ['read'] }, { resource: 'alerts', actions: ['read', 'create', 'update', 'delete'] }] },
  });
  expect(granted.status, JSON.stringify(granted.body)).toBe(200);
  alice.token = (await login(t.app, 'alice@example.com', PASSWORD)).accessToken;
  for (const key of ['shop', 'blog', 'api'] as const) ids[key] = (await insertDomain(t.runtime.db, { name: names[key], ownerId: alice.id })).id;
  await insertDomain(t.runtime.db, { name: 'not-alices.example', ownerId: null });
}, 120_000);

afterAll(async () => {
  await site?.close();
});

const newPage = watchedPages(() => site, { acceptDialogs: true });


/** The rows' header cells (the first column's text) of the tables of `kind`. */
const rowNames = (page: Page, kind: string) => page.locator(`table.${kind} tbody th[scope=row]`).allTextContents();
const rowOf = (page: Page, kind: string, name: string) => page.locator(`table.${kind} tbody tr`).filter({ has: page.getByRole('rowheader', { name }) });
const apiGet = async (path: string) => (await call(t.app, 'GET', path, { token: alice.token })).body.data;

describe('the Alerting page', { timeout: 90_000 }, () => {
  it('creates a rule over chosen domains with a path filter (after a validation error at its field) and lists it; only users who may read alerts are offered the page', async () => {
    const page = await newPage();
    await page.goto(`${base}/signin`);
    await signIn(page, 'alice@example.com', PASSWORD);
    await page.getByRole('link', { name: 'Alerting' }).click();
    await page.waitForURL(`${base}/alerting`);
    await expect.poll(() => page.getByText('No rule over many domains yet.').count()).toBe(1);
    await expectAccessible(page, 'the Alerting page, empty');

    await page.getByRole('button', { name: 'New rule' }).click();
    const form = page.getByRole('form', { name: 'New rule' });
    // Every condition the API takes, with the unit of its threshold.
    const offered = await form.getByLabel('Condition').locator('option').evaluateAll((options) => options.map((o) => (o as HTMLOptionElement).value));
    expect(offered).toEqual(['errorRate', 'clientErrorRate', 'requests', 'requestChange', 'bandwidth', 'visitors', 'averageResponseTime', 'p50ResponseTime', 'p95ResponseTime', 'p99ResponseTime', 'maxResponseTime']);
    await form.getByLabel('Condition').selectOption('p95ResponseTime');
    await expect.poll(() => form.locator('#alert-threshold-hint').textContent()).toMatch(/^Milliseconds/);
    expect(await form.getByLabel('Threshold').getAttribute('aria-describedby')).toContain('alert-threshold-hint');
    await form.getByLabel('Condition').selectOption('errorRate');
    await form.getByLabel('Name', { exact: true }).fill('Checkout failing');
    await form.getByLabel('Threshold').fill('0.1');
    await form.getByLabel('Only requests whose path matches').fill('/checkout*');
    await form.getByLabel('Chosen domains').check();
    await form.getByLabel(names.shop).check();
    await form.getByLabel(names.blog).check();
    await form.getByLabel('Send to').fill('not an address');
    await form.getByRole('button', { name: 'Save' }).click();
    await expect.poll(() => form.locator('#alert-notificationTarget-error').textContent()).toMatch(/^Send to /);
    expect(await form.getByLabel('Send to').getAttribute('aria-invalid')).toBe('true');
    expect(await form.getByRole('alert').textContent()).toBe('Please correct the fields marked above.');
    await expectAccessible(page, 'the rule form with an error');
    await form.getByLabel('Send to').fill('oncall@example.com');
    await form.getByRole('button', { name: 'Save' }).click();

    await expect.poll(() => rowNames(page, 'rules')).toEqual(['Checkout failing']);
    await expect.poll(() => page.getByText('Rule “Checkout failing” created').count()).toBe(1);
    const row = rowOf(page, 'rules', 'Checkout failing');
    expect(await row.locator('td').nth(0).textContent()).toBe('Error rate (5xx share) > 10.00 % over 5 min, on paths /checkout*');
    expect(await row.locator('td').nth(1).textContent()).toBe(`${names.shop}, ${names.blog}`);
    expect(await row.locator('td').nth(2).textContent()).toBe('none');
    const { alerts } = await apiGet('/api/logs/alerts');
    expect(alerts.filter((a: any) => a.domainId === null)).toMatchObject([
      { name: 'Checkout failing', condition: 'errorRate', threshold: 0.1, scope: { domainIds: [ids.shop, ids.blog] }, filters: [['glob', 'path', ['/checkout*']]], notificationTarget: 'oncall@example.com' },
    ]);
    await expectAccessible(page, 'the Alerting page with a rule');

    // A user who may not read alerts: no link, and the page says why.
    const bob = await createUserAndLogin(t.app, admin, { email: 'bob@example.com', password: PASSWORD });
    expect((await call(t.app, 'PUT', `/api/users/${bob.id}/permissions`, { token: admin, body: { permissions: [{ resource: 'logs', actions: ['read'] }] } })).status).toBe(200);
    await page.context().close();
    const other = await newPage();
    await other.goto(`${base}/alerting`);
    await signIn(other, 'bob@example.com', PASSWORD);
    await expect.poll(() => other.getByRole('alert').textContent()).toBe('Alerting is for users who may read alerts.');
    await expect.poll(() => other.getByRole('link', { name: 'Fleet' }).count()).toBe(1);
    expect(await other.getByRole('link', { name: 'Alerting' }).count()).toBe(0);
  });

  it('creates a silence over a chosen domain (after a validation error at its field), shows it on that domain only, and ends it', async () => {
    const page = await newPage();
    await page.goto(`${base}/alerting`);
    await signIn(page, 'alice@example.com', PASSWORD);
    await expect.poll(() => page.getByText('No silence in force or to come.').count()).toBe(1);
    await page.getByRole('button', { name: 'New silence' }).click();
    const form = page.getByRole('form', { name: 'New silence' });
    await form.getByLabel('Chosen domains').check();
    await form.getByLabel('Find a domain').fill('shop');
    expect(await form.locator('.pick-list label').allTextContents()).toEqual([names.shop]);
    await form.getByLabel(names.shop).check();
    await form.getByLabel('Duration').selectOption({ label: '4 hours' });
    await form.getByRole('button', { name: 'Create silence' }).click();
    await expect.poll(() => form.locator('#silence-comment-error').textContent()).toMatch(/^Comment must not be empty/);
    expect(await form.getByLabel('Comment').getAttribute('aria-invalid')).toBe('true');
    expect(await form.getByRole('alert').textContent()).toBe('Please correct the fields marked above.');
    await expectAccessible(page, 'the silence form with an error');
    await form.getByLabel('Comment').fill('PHP 8.4 upgrade');
    const before = Date.now();
    await form.getByRole('button', { name: 'Create silence' }).click();

    await expect.poll(() => rowNames(page, 'silences')).toEqual(['PHP 8.4 upgrade']);
    const row = rowOf(page, 'silences', 'PHP 8.4 upgrade');
    expect(await row.locator('td').nth(0).textContent()).toBe(names.shop);
    expect(await row.locator('td').nth(2).textContent()).toBe('in force');
    const [stored] = (await apiGet('/api/logs/silences')).silences;
    expect(stored).toMatchObject({ domainIds: [ids.shop], comment: 'PHP 8.4 upgrade', state: 'active', endedAt: null });
    const length = Date.parse(stored.endsAt) - before;
    expect(length).toBeGreaterThan(4 * 3_600_000 - 60_000);
    expect(length).toBeLessThanOrEqual(4 * 3_600_000 + 1000);
    await expectAccessible(page, 'the Alerting page with a silence');

    // The domain it covers shows it; another does not.
    await page.goto(`${base}/domains/${ids.shop}/alerts`);
    await expect.poll(() => rowNames(page, 'silences')).toEqual(['PHP 8.4 upgrade']);
    await page.goto(`${base}/domains/${ids.api}/alerts`);
    await expect.poll(() => page.getByText("No silence holds this domain's notifications now or later.").count()).toBe(1);
    expect(await page.locator('table.silences').count()).toBe(0);

    // Ended: gone from those in force, listed among the expired as ended.
    await page.goto(`${base}/alerting`);
    await rowOf(page, 'silences', 'PHP 8.4 upgrade').getByRole('button', { name: 'End the silence “PHP 8.4 upgrade”' }).click();
    await expect.poll(() => page.getByText('No silence in force or to come.').count()).toBe(1);
    expect((await apiGet('/api/logs/silences?state=expired')).silences).toMatchObject([{ id: stored.id, state: 'expired', endedAt: expect.any(String) }]);
    await page.getByRole('button', { name: 'Expired' }).click();
    await page.waitForURL(`${base}/alerting?silences=expired`);
    await expect.poll(() => rowNames(page, 'silences')).toEqual(['PHP 8.4 upgrade']);
    expect(await rowOf(page, 'silences', 'PHP 8.4 upgrade').locator('td').nth(2).textContent()).toBe('ended');
    expect(await page.getByRole('button', { name: /^End/ }).count()).toBe(0);
  });

  it('creates a weekly silence (after a validation error on its weekdays) in a chosen time zone, lists it as a recurrence and ends it', async () => {
    const page = await newPage();
    await page.goto(`${base}/alerting`);
    await signIn(page, 'alice@example.com', PASSWORD);
    await expect.poll(() => page.getByText('No silence in force or to come.').count()).toBe(1);
    await page.getByRole('button', { name: 'New silence' }).click();
    const form = page.getByRole('form', { name: 'New silence' });
    await form.getByLabel('Every week', { exact: true }).check();
    expect(await form.getByLabel('Duration').count()).toBe(0);
    const weekdays = form.getByRole('group', { name: 'On' });
    expect(await weekdays.getByRole('checkbox').evaluateAll((boxes) => boxes.map((b) => b.parentElement!.textContent))).toEqual(['Mon', 'Tue', 'Wed', 'Thu', 'Fri', 'Sat', 'Sun']);
    expect(await form.getByLabel('From', { exact: true }).getAttribute('type')).toBe('time');
    expect(await form.getByLabel('To', { exact: true }).getAttribute('type')).toBe('time');
    // The time zone: the browser's by default, any of the browser's zones offered.
    const zone = form.getByLabel('Time zone');
    const browserZones = await page.evaluate(() => ({ current: Intl.DateTimeFormat().resolvedOptions().timeZone, all: Intl.supportedValuesOf('timeZone') }));
    expect(await zone.inputValue()).toBe(browserZones.current);
    const offered = await zone.locator('option').evaluateAll((options) => options.map((o) => (o as HTMLOptionElement).value));
    expect(offered).toEqual(expect.arrayContaining(browserZones.all));
    await expectAccessible(page, 'the silence form with the weekly fields');

    // No weekday: the API's message on recurrence.weekdays, at the weekdays.
    await form.getByLabel('From', { exact: true }).fill('02:00');
    await form.getByLabel('To', { exact: true }).fill('04:00');
    await zone.selectOption('Europe/Paris');
    await form.getByLabel('Comment').fill('Weekly maintenance window');
    await form.getByRole('button', { name: 'Create silence' }).click();
    await expect.poll(() => form.locator('#silence-recurrence-weekdays-error').textContent()).toBe('Weekdays must list at least one weekday');
    expect(await weekdays.getAttribute('aria-describedby')).toBe('silence-recurrence-weekdays-error');
    expect(await form.getByRole('alert').textContent()).toBe('Please correct the fields marked above.');
    await expectAccessible(page, 'the weekly silence form with an error');

    await weekdays.getByLabel('Sun').check();
    await form.getByRole('button', { name: 'Create silence' }).click();
    await expect.poll(() => rowNames(page, 'silences')).toEqual(['Weekly maintenance window']);
    const row = rowOf(page, 'silences', 'Weekly maintenance window');
    expect(await row.locator('td').nth(1).textContent()).toBe('Every Sun 02:00–04:00 (Europe/Paris)');
    const [stored] = (await apiGet('/api/logs/silences')).silences;
    expect(stored).toMatchObject({ domainIds: 'all', recurrence: { weekdays: ['sun'], start: '02:00', end: '04:00', timezone: 'Europe/Paris' }, comment: 'Weekly maintenance window', endedAt: null });
    await expectAccessible(page, 'the Alerting page with a weekly silence');

    // Ended, so that it holds no later test's notifications.
    await row.getByRole('button', { name: 'End the silence “Weekly maintenance window”' }).click();
    await expect.poll(() => page.getByText('No silence in force or to come.').count()).toBe(1);
  });
});

describe('a domain covered by a rule', { timeout: 90_000 }, () => {
  it("the domain's alerts page shows the rule covering it, its state there and the history after an evaluator round; the Alerting page its firing domain and the history across domains, paged", async () => {
    // A rule over every domain, and 5xx on one of them, logged through the import path.
    const created = await call(t.app, 'POST', '/api/logs/alerts', {
      token: alice.token,
      body: { name: 'Fleet 5xx', condition: 'errorRate', operator: 'greaterThan', threshold: 0.05, duration: 60, notificationMethod: 'email', notificationTarget: 'pager@example.com', scope: { domains: 'all' } },
    });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    const ruleId = created.body.data.id;
    let now = Math.floor(Date.now() / INTERVAL) * INTERVAL;
    const lines = Array.from({ length: 20 }, (_, i) => `${names.api} 10.9.0.${i} - - [${timeLocal(now - 1000)}] "GET /broken/${i} HTTP/1.1" 503 10 "-" "agent" 0.010`);
    expect(await importText(t, '', `${lines.join('\n')}\n`, { domain: null, format: HOST_FORMAT })).toMatchObject({ inserted: 20, rejected: 0 });
    // 30 earlier changes of blog's (before this round: the history is newest first), two pages across domains.
    for (let i = 30; i >= 1; i--) {
      await t.runtime.db.transaction((tx) =>
        recordHistory(tx, [
          {
            alertId: ruleId,
            alertName: 'Fleet 5xx',
            ruleOwner: alice.id,
            domainId: ids.blog,
            from: i % 2 ? 'ok' : 'firing',
            to: i % 2 ? 'firing' : 'ok',
            at: new Date(now - (i + 1) * 3_600_000),
            value: i % 2 ? 0.2 : 0.01,
            notified: true,
            silenceId: null,
          },
        ]),
      );
    }
    const evaluator = evaluatorOf(t, { log: createLogger('silent'), baseUrl: base, intervalMs: INTERVAL, now: () => now });
    now += INTERVAL;
    expect(await evaluator.evaluateOnce()).toMatchObject({ ran: true });

    const page = await newPage();
    await page.goto(`${base}/domains/${ids.api}/alerts`);
    await signIn(page, 'alice@example.com', PASSWORD);
    await expect.poll(() => rowNames(page, 'rules')).toEqual(['Fleet 5xx']);
    const cells = await rowOf(page, 'rules', 'Fleet 5xx').locator('td').allTextContents();
    expect(cells.slice(0, 3)).toEqual(['Error rate (5xx share) > 5.00 % over 1 min', 'firing', '100.00 %']);
    expect(cells[3]).toMatch(/^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$/);
    expect(cells[4]).toBe('none');
    await expect.poll(() => rowNames(page, 'history')).toEqual(['Fleet 5xx']);
    expect(await page.locator('table.history tbody td').allTextContents()).toEqual([
      expect.stringMatching(/^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$/),
      'ok → firing',
      '100.00 %',
      expect.stringMatching(/^(sent|none)$/),
    ]);
    expect(await page.locator('table.history caption').textContent()).toBe('1 state change, newest first');
    await expectAccessible(page, "the domain's alerts page with a rule, a history");
    // The rule from the previous test covers shop and blog, not api.
    await page.goto(`${base}/domains/${ids.shop}/alerts`);
    await expect.poll(() => rowNames(page, 'rules')).toEqual(['Checkout failing', 'Fleet 5xx']);
    expect(await rowOf(page, 'rules', 'Fleet 5xx').locator('td').nth(1).textContent()).toBe('ok');
    await expect.poll(() => page.getByText('No state change in the last 90 days.').count()).toBe(1);

    // Across domains: the rule's firing domain, and the history with blog's 30 earlier changes, on two pages.
    await page.goto(`${base}/alerting`);
    const firingOn = rowOf(page, 'rules', 'Fleet 5xx').locator('td.firing-on');
    await expect.poll(() => firingOn.textContent()).toBe(`${names.api} 100.00 %`);
    await firingOn.getByRole('link', { name: names.api }).click();
    await page.waitForURL(`${base}/domains/${ids.api}/alerts`);
    await page.goto(`${base}/alerting`);
    await expect.poll(() => page.locator('table.history caption').textContent()).toBe('31 state changes, newest first');
    const domainsShown = () => page.locator('table.history tbody td.name').allTextContents();
    expect(await domainsShown()).toEqual([names.api, ...Array(24).fill(names.blog)]);
    expect(await page.getByRole('navigation', { name: 'Pages' }).textContent()).toContain('Page 1 of 2');
    await page.getByRole('button', { name: 'Next' }).click();
    await page.waitForURL(`${base}/alerting?page=2`);
    await expect.poll(domainsShown).toEqual(Array(6).fill(names.blog));
    await expectAccessible(page, 'the Alerting page with history');
  });
});

describe('at a phone width (375 px)', { timeout: 90_000 }, () => {
  it('the alerting pages do not scroll sideways', async () => {
    const page = await newPage({ width: 375, height: 800 });
    await page.goto(`${base}/signin`);
    await signIn(page, 'alice@example.com', PASSWORD);
    await page.waitForURL(`${base}/`);
    for (const [path, drawn] of [
      ['/alerting', 'table.history tbody tr'],
      [`/domains/${ids.api}/alerts`, 'table.history tbody tr'],
    ] as const) {
      await page.goto(`${base}${path}`);
      await page.locator(drawn).first().waitFor();
      const button = page.getByRole('button', { name: path === '/alerting' ? 'New rule' : 'New alert' });
      await button.click();
      if (path === '/alerting') await page.getByLabel('Chosen domains').check();
      const widths = await page.evaluate(() => ({ page: document.documentElement.scrollWidth, view: document.documentElement.clientWidth }));
      expect(widths.page, path).toBeLessThanOrEqual(widths.view);
      await expectAccessible(page, `${path} at 375 px`);
    }
    // The silence form with its weekly fields.
    await page.goto(`${base}/alerting`);
    await page.locator('table.history tbody tr').first().waitFor();
    await page.getByRole('button', { name: 'New silence' }).click();
    await page.getByLabel('Every week', { exact: true }).check();
    await page.getByLabel('Time zone').waitFor();
    const widths = await page.evaluate(() => ({ page: document.documentElement.scrollWidth, view: document.documentElement.clientWidth }));
    expect(widths.page, 'the weekly silence form').toBeLessThanOrEqual(widths.view);
    await expectAccessible(page, 'the weekly silence form at 375 px');
    if (process.env.SHOTS_DIR) await screenshots(process.env.SHOTS_DIR);
  });
});

/** With SHOTS_DIR set: the alerting pages as they look at 1280 and 375 px, into that directory (for a person to look at). */
async function screenshots(dir: string): Promise<void> {
  fs.mkdirSync(dir, { recursive: true });
  await call(t.app, 'POST', '/api/logs/silences', {
    token: alice.token,
    body: { domainIds: [ids.api, ids.blog], endsAt: new Date(Date.now() + 2 * 3_600_000).toISOString(), comment: 'Upstream pool migration, tickets #4411 and #4412' },
  });
  await call(t.app, 'POST', '/api/logs/silences', {
    token: alice.token,
    body: { domainIds: 'all', recurrence: { weekdays: ['sun'], start: '02:00', end: '04:00', timezone: 'Europe/Paris' }, comment: 'Weekly maintenance window' },
  });
  for (const width of [1280, 375]) {
    const page = await newPage({ width, height: 900 });
    await page.goto(`${base}/signin`);
    await signIn(page, 'alice@example.com', PASSWORD);
    await page.waitForURL(`${base}/`);
    for (const [path, name] of [
      ['/alerting', 'alerting'],
      [`/domains/${ids.api}/alerts`, 'domain-alerts'],
    ] as const) {
      await page.goto(`${base}${path}`);
      await page.locator('table.history tbody tr').first().waitFor();
      await page.locator('table.silences tbody tr').first().waitFor();
      await page.screenshot({ path: `${dir}/${name}-${width}.png`, fullPage: true });
      await page.getByRole('button', { name: path === '/alerting' ? 'New rule' : 'New alert' }).click();
      if (path === '/alerting') await page.getByLabel('Chosen domains').check();
      await page.getByRole('button', { name: 'Save' }).click();
      await page.locator('form .error').first().waitFor();
      await page.screenshot({ path: `${dir}/${name}-form-${width}.png`, fullPage: true });
    }
    await page.context().close();
  }
}
