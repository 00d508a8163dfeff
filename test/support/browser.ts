/** What the browser tests (web-*.test.ts) share: the app served with its dashboard and a browser, signing in through the page, and axe-core over it. */
import fs from 'node:fs';
import { createRequire } from 'node:module';
import type { AddressInfo } from 'node:net';
import { serve, type ServerType } from '@hono/node-server';
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core';
import { afterEach, expect } from 'vitest';
import { createApp } from '../../src/app.js';
import { NODE_SERVER_OPTIONS } from '../../src/http/node-server.js';
import { buildWebAssets } from '../../src/web/assets.js';
import { startTestApp, type TestApp } from './app.js';

/** Debian's Chromium; CHROMIUM_PATH overrides where it is. */
const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';

/** A test app served over HTTP on 127.0.0.1 with the dashboard's assets, and a headless Chromium. */
export interface BrowserApp {
  t: TestApp;
  /** The server's origin, `http://127.0.0.1:PORT`. */
  base: string;
  browser: Browser;
  /** Closes the browser, the server and the app. */
  close(): Promise<void>;
}

export async function startBrowserApp(env?: Parameters<typeof startTestApp>[0]): Promise<BrowserApp> {
  const t = await startTestApp(env);
  const app = createApp(t.runtime, { web: await buildWebAssets() });
  const server = await new Promise<ServerType>((resolve) => {
    const s = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1', serverOptions: NODE_SERVER_OPTIONS }, () => resolve(s));
  });
  const browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
  return {
    t,
    base: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    browser,
    async close() {
      await browser.close();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await t.close();
    },
  };
}

/**
 * Opens each page in a browser context of its own on `site()`'s browser, watching it for requests
 * outside the server (and loads its CSP refused before they became requests); after every test of
 * the file the last context closes (a new page closes the one before) and no such request may have
 * been made. Confirmations are accepted when `acceptDialogs`.
 */
export function watchedPages(site: () => BrowserApp, { acceptDialogs = false } = {}) {
  let context: BrowserContext | undefined;
  let foreign: string[] = [];
  // A test's route handler may still be fetching when its context closes: without unrouting first,
  // its fetch rejects after the test, an unhandled rejection that fails the whole run.
  const closeContext = async () => {
    for (const page of context?.pages() ?? []) await page.unrouteAll({ behavior: 'ignoreErrors' });
    await context?.close();
    context = undefined;
  };
  afterEach(async () => {
    await closeContext();
    expect(foreign, 'requests outside the server').toEqual([]);
  });
  return async function newPage(viewport?: { width: number; height: number }, timezoneId?: string): Promise<Page> {
    const { base, browser } = site();
    await closeContext();
    context = await browser.newContext({ ...(viewport ? { viewport } : {}), ...(timezoneId ? { timezoneId } : {}) });
    foreign = [];
    const page = await context.newPage();
    page.on('request', (request) => {
      if (!request.url().startsWith(`${base}/`) && !request.url().startsWith('data:')) foreign.push(request.url());
    });
    page.on('console', (message) => {
      if (message.type() === 'error' && message.text().includes('Content Security Policy')) foreign.push(message.text());
    });
    if (acceptDialogs) page.on('dialog', (dialog) => void dialog.accept());
    return page;
  };
}

const AXE = fs.readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8');

export async function signIn(page: Page, email: string, password: string): Promise<void> {
  await page.getByLabel('E-mail').fill(email);
  await page.getByLabel('Password').fill(password);
  await page.getByRole('button', { name: 'Sign in' }).click();
}

/** axe-core over the page as it is: no serious or critical violation. */
export async function expectAccessible(page: Page, what: string): Promise<void> {
  // Evaluated through the debugging protocol: the page's CSP (rightly) refuses inline scripts.
  await page.evaluate(AXE);
  const violations = await page.evaluate(async () => {
    const result = await (window as any).axe.run(document, { resultTypes: ['violations'] });
    return result.violations.filter((v: any) => v.impact === 'serious' || v.impact === 'critical').map((v: any) => `${v.id}: ${v.help} (${v.nodes.length})`);
  });
  expect(violations, what).toEqual([]);
}
