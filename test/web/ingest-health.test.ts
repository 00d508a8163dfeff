/**
 * Ingest health in the dashboard, in headless Chromium (as test/web/dashboard.test.ts): the fleet's
 * "Last log line" column marks a domain stale once INGEST_STALE_S has passed since its last line,
 * on the open page without a reload, and not before, and not once a line came again; a domain that
 * never had a line says so. A domain's Ingest section shows its figures, its sources with their lag
 * and its rejected lines, whose markup stays text. Accessible (axe-core), and at a phone's width
 * the page does not scroll sideways.
 */
import { type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { publishSources } from '../../ingest/health-report.js';
import { newStats } from '../../ingest/pipeline.js';
import { dedupToken, insertRejects, writeRows } from '../../ingest/sinks/clickhouse.js';
import { insertDomain } from '../../src/domains/store.js';
import { expectAccessible, signIn, startBrowserApp, watchedPages, type BrowserApp } from '../support/browser.js';
import { ADMIN_EMAIL, ADMIN_PASSWORD, call, createUserAndLogin, login, type TestApp } from '../support/app.js';
import { accessRow } from '../support/ingest.js';

const PASSWORD = 'correct horse battery staple';
/** Small enough to wait for, large enough for a page to load well within it on a loaded machine. */
const STALE_S = 15;
const SCRIPT = '<script>window.__hacked=1</script><img src=x onerror="window.__hacked=1">';

let t: TestApp;
let site: BrowserApp;
let base: string;
let ops: { id: number; token: string };
const domains: Record<'fresh' | 'never' | 'broken', { id: number; name: string }> = {} as never;

beforeAll(async () => {
  site = await startBrowserApp({ INGEST_STALE_S: String(STALE_S) });
  ({ t, base } = site);
  const admin = (await login(t.app, ADMIN_EMAIL, ADMIN_PASSWORD)).accessToken;
  ops = await createUserAndLogin(t.app, admin, { email: 'ops@example.com', password: PASSWORD });
  const grant = await call(t.app, 'PUT', `/api/users/${ops.id}/permissions`, {
    token: admin,
    body: { permissions: [{ resource: 'domains', actions: ['read'] }, { resource: 'logs', actions: ['read'] }] },
  });
  expect(grant.status).toBe(200);
  for (const key of ['fresh', 'never', 'broken'] as const) {
    const name = `${key}.ops.example`;
    domains[key] = { id: (await insertDomain(t.runtime.db, { name, ownerId: ops.id })).id, name };
  }
}, 120_000);

afterAll(async () => {
  await site?.close();
});

const newPage = watchedPages(() => site);

async function signedInPage(viewport?: { width: number; height: number }): Promise<Page> {
  const page = await newPage(viewport);
  await page.goto(`${base}/signin`);
  await signIn(page, 'ops@example.com', PASSWORD);
  await page.waitForURL(`${base}/`);
  return page;
}

let lineSeq = 0;
/** Stores one access line of `domainId` now, as the ingest would; returns when ClickHouse says it was stored. */
async function storeLine(domainId: number): Promise<number> {
  const n = ++lineSeq;
  await writeRows(t.runtime.clickhouse, { access: [accessRow(n, { domainId })], error: [], rejects: [] }, dedupToken(`web-${domainId}`, n, n + 1));
  const res = await call(t.app, 'GET', `/api/domains/${domainId}/ingest`, { token: ops.token });
  return Date.parse(res.body.data.lastLineAt);
}

const lastLineCell = (page: Page, name: string) => page.locator('table.fleet tbody tr').filter({ has: page.getByRole('link', { name, exact: true }) }).locator('td.last-line');

describe('the fleet’s last log line', { timeout: 90_000 }, () => {
  it('marks a domain stale once INGEST_STALE_S has passed since its last line, not before, and not after a new line', async () => {
    const page = await signedInPage();
    // A second tab, loaded again and again: each load draws from a fresh answer, so a mark drawn
    // too early shows there even if the open page would draw it in time.
    const reloaded = await page.context().newPage();
    const storedAt = await storeLine(domains.fresh.id);
    await page.goto(`${base}/?sort=name`);
    const cell = lastLineCell(page, domains.fresh.name);
    await cell.locator('time').waitFor();
    expect(await lastLineCell(page, domains.never.name).textContent()).toBe('never');
    await expectAccessible(page, 'the fleet with its last log lines');

    // Watched: fresh until INGEST_STALE_S after the line, stale from then on, on the open page without a reload.
    const seen: { at: number; open: string; reloaded: string }[] = [];
    const deadline = storedAt + (STALE_S + 10) * 1000;
    while (Date.now() < deadline) {
      await reloaded.goto(`${base}/?sort=name`);
      await lastLineCell(reloaded, domains.fresh.name).locator('time').waitFor();
      const again = (await lastLineCell(reloaded, domains.fresh.name).textContent()) ?? '';
      const open = (await cell.textContent()) ?? '';
      seen.push({ at: Date.now(), open, reloaded: again });
      if (open.includes('stale')) break;
    }
    const firstStale = (tab: 'open' | 'reloaded') => seen.find((s) => s[tab].includes('stale'))?.at ?? Infinity;
    expect(seen[0]!.open).toBe('< 1 min ago');
    expect(seen[0]!.at - storedAt).toBeLessThan(STALE_S * 1000);
    expect(firstStale('open'), `the cell over ${STALE_S + 10} s: ${seen.at(-1)?.open}`).toBeLessThan(Infinity);
    // Not before INGEST_STALE_S (a few ms of rounding between the clocks) on either tab, and
    // within a few seconds after it on the open page.
    expect(Math.min(firstStale('open'), firstStale('reloaded')) - storedAt).toBeGreaterThanOrEqual(STALE_S * 1000 - 50);
    expect(firstStale('open') - storedAt).toBeLessThan(STALE_S * 1000 + 5000);
    expect(await cell.locator('.stale').textContent()).toBe('stale');
    await expectAccessible(page, 'the fleet with a stale domain');

    // A new line: fresh again at the next load.
    await storeLine(domains.fresh.id);
    await page.reload();
    await cell.locator('time').waitFor();
    expect(await cell.textContent()).toBe('< 1 min ago');
  });
});

describe('a domain’s ingest section', { timeout: 90_000 }, () => {
  it('shows the figures, the sources with their lag and the rejected lines as text, accessibly, at a phone’s width too', async () => {
    const { id, name } = domains.broken;
    await storeLine(id);
    await insertRejects(
      t.runtime.clickhouse,
      [0, 1].map((i) => ({ domainId: id, kind: 'access' as const, source: '/var/log/nginx/broken.access.log', identity: 'web-rejects', offset: i, reason: 'does not parse: expected [', cause: 'unparsed', line: `${SCRIPT} ${i}`, length: SCRIPT.length + 2 })),
      dedupToken('web-rejects', 0, 2),
    );
    const source = { ...newStats('access /var/log/nginx/broken.access.log', [name]), state: 'running' as const, lagBytes: 2_500_000 };
    await publishSources(t.runtime.db, 'web-test-host:/data/ingest', [source]);

    for (const viewport of [undefined, { width: 375, height: 800 }]) {
      const page = await signedInPage(viewport);
      await page.goto(`${base}/domains/${id}/ingest`);
      await page.locator('table.rejects tbody tr').first().waitFor();
      const rows = await page.locator('table.rejects tbody tr').evaluateAll((trs) => trs.map((tr) => [...tr.querySelectorAll('td')].map((td) => td.textContent)));
      expect(rows.map((r) => r.slice(1))).toEqual([
        ['unparsed', 'does not parse: expected [', `${SCRIPT} 1`],
        ['unparsed', 'does not parse: expected [', `${SCRIPT} 0`],
      ]);
      expect(await page.evaluate(() => (window as any).__hacked)).toBeUndefined();
      expect(await page.locator('table.rejects script, table.rejects img').count()).toBe(0);
      const sources = page.getByRole('region', { name: 'Sources and their lag', exact: true });
      expect(await sources.locator('tbody tr').evaluate((tr) => [...tr.children].map((c) => c.textContent))).toEqual([
        'access /var/log/nginx/broken.access.log',
        'running',
        '2.5 MB',
        expect.stringMatching(/ UTC$/),
      ]);
      const figures = page.getByRole('region', { name: 'Lines stored and rejected', exact: true });
      expect(await figures.locator('tbody tr').evaluateAll((trs) => trs.map((tr) => [...tr.children].map((c) => c.textContent)))).toEqual([
        ['Lines stored', '1', '1'],
        ['Lines rejected', '2', '2'],
        ['Rejected: unparsed', '2', '2'],
      ]);
      const widths = await page.evaluate(() => ({ page: document.documentElement.scrollWidth, view: document.documentElement.clientWidth }));
      expect(widths.page).toBeLessThanOrEqual(widths.view);
      await expectAccessible(page, `the ingest section at ${viewport?.width ?? 'full'} width`);
      await page.context().close();
    }
  });
});
