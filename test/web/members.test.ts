/**
 * Who sees a domain, managed from the dashboard (issue 33 part 5), end to end in headless Chromium
 * as test/web/dashboard.test.ts is set up: a domain's Members tab (its owner invites an address,
 * mailed through a real SMTP sink, and withdraws the invitation; adds a member by id after a
 * refused one, changes its role and removes it), offered to its owner and administrators only;
 * every change checked against the API's own state. axe-core finds no serious or critical
 * violation.
 */
import { type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { insertDomain } from '../../src/domains/store.js';
import { type BrowserApp, expectAccessible, signIn, startBrowserApp, watchedPages } from '../support/browser.js';
import { ADMIN_EMAIL, ADMIN_PASSWORD, call, createUserAndLogin, login, type TestApp } from '../support/app.js';
import { mailRecipients } from '../support/auth.js';
import { startSmtpSink, type SmtpSink } from '../support/smtp-sink.js';

const PASSWORD = 'correct horse battery staple';

let sink: SmtpSink;
let t: TestApp;
let site: BrowserApp;
let base: string;
let admin: string;
let olivia: { id: number; token: string };
let bob: { id: number; token: string };
let carol: { id: number; token: string };
/** Olivia's: the first test manages shop's members, the second reads blog's. */
let shop: number;
let blog: number;

beforeAll(async () => {
  sink = await startSmtpSink();
  site = await startBrowserApp({ SMTP_URL: sink.url, MAIL_FROM: 'tailhouse <noreply@tailhouse.test>' });
  ({ t, base } = site);
  admin = (await login(t.app, ADMIN_EMAIL, ADMIN_PASSWORD)).accessToken;
  olivia = await createUserAndLogin(t.app, admin, { email: 'olivia@example.com', password: PASSWORD });
  bob = await createUserAndLogin(t.app, admin, { email: 'bob@example.com', password: PASSWORD, name: 'Bob Stone' });
  carol = await createUserAndLogin(t.app, admin, { email: 'carol@example.com', password: PASSWORD });
  shop = (await insertDomain(t.runtime.db, { name: 'shop.members.example', ownerId: olivia.id })).id;
  blog = (await insertDomain(t.runtime.db, { name: 'blog.members.example', ownerId: olivia.id })).id;
}, 120_000);

afterAll(async () => {
  await site?.close();
  await sink?.close();
});

const newPage = watchedPages(() => site, { acceptDialogs: true });

/** The rows' header cells (the first column's text) of the tables of `kind`. */
const rowNames = (page: Page, kind: string) => page.locator(`table.${kind} tbody th[scope=row]`).allTextContents();
const apiGet = async (path: string, token = olivia.token) => (await call(t.app, 'GET', path, { token })).body.data;
const sectionLinks = (page: Page) => page.getByRole('navigation', { name: /^Pages of / }).getByRole('link').allTextContents();

describe("a domain's Members tab", { timeout: 90_000 }, () => {
  it('its owner invites an address and withdraws the invitation, adds a member by id (after a refused one), changes its role and removes it', async () => {
    const page = await newPage();
    await page.goto(`${base}/domains/${shop}`);
    await signIn(page, 'olivia@example.com', PASSWORD);
    await expect.poll(() => sectionLinks(page)).toEqual(['Dashboard', 'Logs', 'Alerts', 'Ingest', 'Members']);
    await page.getByRole('link', { name: 'Members' }).click();
    await page.waitForURL(`${base}/domains/${shop}/members`);
    await expect.poll(() => page.getByText('No member yet: only the owner and administrators see shop.members.example.').count()).toBe(1);
    await expect.poll(() => page.getByText('No invitation waiting.').count()).toBe(1);
    await expectAccessible(page, 'the Members tab, empty');

    // An invitation: refused at its field first, then sent, pending, and mailed.
    const invite = page.getByRole('form', { name: 'Invite by e-mail' });
    await invite.getByLabel('E-mail').fill('not an address');
    await invite.getByRole('button', { name: 'Send invitation' }).click();
    await expect.poll(() => invite.locator('#share-email-error').textContent()).toMatch(/^E-mail: /);
    expect(await invite.getByLabel('E-mail').getAttribute('aria-invalid')).toBe('true');
    expect(await invite.getByLabel('E-mail').getAttribute('aria-describedby')).toBe('share-email-error');
    await expectAccessible(page, 'the invitation form with an error');
    await invite.getByLabel('E-mail').fill('newcomer@example.org');
    await invite.getByLabel('Role').selectOption('editor');
    await invite.getByRole('button', { name: 'Send invitation' }).click();
    await expect.poll(() => page.locator('.notice').textContent()).toBe('Invitation sent');
    expect(await invite.locator('.error').count()).toBe(0);
    await expect.poll(() => rowNames(page, 'invitations')).toEqual(['newcomer@example.org']);
    expect(await page.locator('table.invitations tbody td').allTextContents()).toEqual(['editor', 'you', expect.stringMatching(/^\d{4}-\d\d-\d\d \d\d:\d\d$/), 'Withdraw']);
    const [invitation] = (await apiGet(`/api/domains/${shop}/invitations`)).invitations;
    expect(invitation).toMatchObject({ email: 'newcomer@example.org', role: 'editor', invitedBy: olivia.id });
    await sink.waitFor((m) => mailRecipients(m).includes('newcomer@example.org'));

    // By id: an unknown user refused at the field, then bob as a viewer.
    const add = page.getByRole('form', { name: 'Add by user id' });
    await add.getByRole('textbox', { name: 'User id' }).fill('999999');
    await add.getByRole('button', { name: 'Add member' }).click();
    await expect.poll(() => add.locator('#share-userId-error').textContent()).toBe('User id: no user has this id');
    expect(await add.getByRole('textbox', { name: 'User id' }).getAttribute('aria-invalid')).toBe('true');
    await add.getByRole('textbox', { name: 'User id' }).fill(String(bob.id));
    await add.getByRole('button', { name: 'Add member' }).click();
    await expect.poll(() => page.locator('.notice').textContent()).toBe(`user ${bob.id} is now a viewer`);
    expect(await add.locator('.error').count()).toBe(0);
    // An owner learns no member's name or address: the row names the user id.
    await expect.poll(() => rowNames(page, 'members')).toEqual([`user ${bob.id}`]);
    expect(await apiGet(`/api/domains/${shop}/members`)).toMatchObject({ members: [{ userId: bob.id, role: 'viewer', grantedBy: olivia.id }] });

    const role = page.getByLabel(`Role of user ${bob.id}`);
    expect(await role.inputValue()).toBe('viewer');
    await role.selectOption('editor');
    await expect.poll(() => page.locator('.notice').textContent()).toBe(`user ${bob.id} is now an editor`);
    expect(await apiGet(`/api/domains/${shop}/members`)).toMatchObject({ members: [{ userId: bob.id, role: 'editor' }] });
    expect(await role.inputValue()).toBe('editor');
    await expectAccessible(page, 'the Members tab with a member and an invitation');

    await page.getByRole('button', { name: `Remove user ${bob.id}` }).click();
    await expect.poll(() => page.locator('.notice').textContent()).toBe(`user ${bob.id} removed`);
    expect((await apiGet(`/api/domains/${shop}/members`)).members).toEqual([]);
    await expect.poll(() => page.locator('table.members').count()).toBe(0);

    await page.getByRole('button', { name: 'Withdraw the invitation of newcomer@example.org' }).click();
    await expect.poll(() => page.locator('.notice').textContent()).toBe('Invitation of newcomer@example.org withdrawn');
    expect((await apiGet(`/api/domains/${shop}/invitations`)).invitations).toEqual([]);
    await expect.poll(() => page.getByText('No invitation waiting.').count()).toBe(1);
  });

  it('a member (a viewer) is offered no Members tab, and the page says why; an administrator sees it, with the names and addresses', async () => {
    expect((await call(t.app, 'POST', `/api/domains/${blog}/members`, { token: olivia.token, body: { userId: carol.id, role: 'viewer' } })).status).toBe(201);
    expect((await call(t.app, 'POST', `/api/domains/${blog}/members`, { token: olivia.token, body: { userId: bob.id, role: 'editor' } })).status).toBe(201);
    const page = await newPage();
    await page.goto(`${base}/domains/${blog}`);
    await signIn(page, 'carol@example.com', PASSWORD);
    await expect.poll(() => sectionLinks(page)).toEqual(['Dashboard', 'Logs', 'Alerts', 'Ingest']);
    await page.goto(`${base}/domains/${blog}/members`);
    await expect.poll(() => page.getByRole('alert').textContent()).toBe('The members of a domain are managed by its owner and administrators.');
    expect(await page.locator('table').count()).toBe(0);
    // The fleet marks the shared domain with the viewer's role there.
    await page.goto(`${base}/`);
    await expect.poll(() => page.locator('table.fleet th[scope=row]').allTextContents()).toContain('blog.members.exampleviewer');

    await page.context().close();
    const other = await newPage();
    await other.goto(`${base}/domains/${blog}/members`);
    await signIn(other, ADMIN_EMAIL, ADMIN_PASSWORD);
    await expect.poll(() => rowNames(other, 'members')).toEqual(['bob@example.com · Bob Stone', 'carol@example.com']);
    expect(await other.getByLabel('Role of bob@example.com').inputValue()).toBe('editor');
    await expectAccessible(other, 'the Members tab of an administrator');
  });
});

describe('groups on the administration page', { timeout: 90_000 }, () => {
  it('an administrator creates a group (after refused names), adds a member, grants it all domains, changes and revokes the grant, removes the member, renames and deletes the group', async () => {
    const groups = async () => (await apiGet('/api/groups', admin)).groups;
    const carolSees = async () => (await call(t.app, 'GET', `/api/domains/${shop}`, { token: carol.token })).status;
    const page = await newPage();
    await page.goto(`${base}/admin`);
    await signIn(page, ADMIN_EMAIL, ADMIN_PASSWORD);
    await page.getByRole('button', { name: 'Groups' }).click();
    await page.waitForURL(`${base}/admin?tab=groups`);
    await expect.poll(() => page.getByText('No group yet.').count()).toBe(1);

    const create = page.getByRole('form', { name: 'New group' });
    await create.getByLabel('Group name').fill('x'.repeat(101));
    await create.getByRole('button', { name: 'Create group' }).click();
    await expect.poll(() => create.locator('#new-group-error').textContent()).toBe('Group name: must be at most 100 characters');
    expect(await create.getByLabel('Group name').getAttribute('aria-invalid')).toBe('true');
    await create.getByLabel('Group name').fill('Support');
    await create.getByRole('button', { name: 'Create group' }).click();
    await expect.poll(() => page.locator('.notice').textContent()).toBe('Group Support created');
    const [made] = await groups();
    expect(made).toMatchObject({ name: 'Support', members: [], domains: [] });
    await page.waitForURL(`${base}/admin?tab=groups&group=${made.id}`);
    expect(await rowNames(page, 'groups')).toEqual(['Support']);
    // A name taken: the API's 409, said under the form.
    await create.getByLabel('Group name').fill('Support');
    await create.getByRole('button', { name: 'Create group' }).click();
    await expect.poll(() => create.getByRole('alert').textContent()).toBe('Group already exists');

    const detail = page.getByRole('region', { name: 'Support' });
    const add = detail.getByRole('form', { name: 'Add a member' });
    await add.getByLabel('User').selectOption({ label: 'carol@example.com' });
    await add.getByRole('button', { name: 'Add to the group' }).click();
    await expect.poll(() => page.locator('.notice').textContent()).toBe('carol@example.com added to Support');
    expect((await groups())[0].members).toMatchObject([{ userId: carol.id, email: 'carol@example.com' }]);
    expect(await rowNames(page, 'group-members')).toEqual(['carol@example.com']);
    // A member is no longer offered.
    expect(await add.getByLabel('User').locator('option').allTextContents()).not.toContain('carol@example.com');

    // No domain chosen: the API's message at the picker; then every domain.
    const grant = detail.getByRole('form', { name: 'Grant a role' });
    await grant.getByRole('button', { name: 'Grant' }).click();
    await expect.poll(() => grant.locator('#grant-domains-error').textContent()).toBe('Grant a role on: must name at least one domain');
    await expectAccessible(page, 'administration: a group, with an error at its grant');
    expect(await carolSees()).toBe(404);
    await grant.getByLabel('All domains, those added later too').check();
    await grant.getByRole('button', { name: 'Grant' }).click();
    await expect.poll(() => page.locator('.notice').textContent()).toBe('Support is viewer on all domains');
    expect((await groups())[0].domains).toMatchObject([{ domainId: null, name: null, role: 'viewer' }]);
    expect(await rowNames(page, 'grants')).toEqual(['All domains']);
    expect(await page.locator('table.groups tbody td').allTextContents()).toEqual(['carol@example.com', 'All domains (viewer)']);
    expect(await carolSees()).toBe(200);
    await detail.getByLabel('Role on All domains').selectOption('editor');
    await expect.poll(() => page.locator('.notice').textContent()).toBe('Support is editor on all domains');
    expect((await groups())[0].domains).toMatchObject([{ domainId: null, role: 'editor' }]);
    await expectAccessible(page, 'administration: a group with a member and a grant');

    await detail.getByRole('button', { name: 'Revoke All domains' }).click();
    await expect.poll(() => page.locator('.notice').textContent()).toBe('All domains revoked');
    expect((await groups())[0].domains).toEqual([]);
    expect(await carolSees()).toBe(404);
    await detail.getByRole('button', { name: 'Remove carol@example.com from Support' }).click();
    await expect.poll(() => page.locator('.notice').textContent()).toBe('carol@example.com removed from Support');
    expect((await groups())[0].members).toEqual([]);

    const rename = detail.getByRole('form', { name: 'Rename the group' });
    await rename.getByLabel('Name').fill('Support team');
    await rename.getByRole('button', { name: 'Rename' }).click();
    await expect.poll(() => rowNames(page, 'groups')).toEqual(['Support team']);
    expect(await groups()).toMatchObject([{ id: made.id, name: 'Support team' }]);

    await page.getByRole('region', { name: 'Support team' }).getByRole('button', { name: 'Delete the group' }).click();
    await expect.poll(() => page.locator('.notice').textContent()).toBe('Group Support team deleted');
    expect(await groups()).toEqual([]);
    await page.waitForURL(`${base}/admin?tab=groups`);
    await expect.poll(() => page.getByText('No group yet.').count()).toBe(1);
  });

  it("a domain's Members tab lists the groups that see it", async () => {
    const made = (await call(t.app, 'POST', '/api/groups', { token: admin, body: { name: 'Developers' } })).body.data;
    expect((await call(t.app, 'POST', `/api/groups/${made.id}/domains`, { token: admin, body: { domains: [blog], role: 'editor' } })).status).toBe(200);
    const all = (await call(t.app, 'POST', '/api/groups', { token: admin, body: { name: 'Night shift' } })).body.data;
    expect((await call(t.app, 'POST', `/api/groups/${all.id}/domains`, { token: admin, body: { domains: 'all', role: 'viewer' } })).status).toBe(200);
    const page = await newPage();
    await page.goto(`${base}/domains/${blog}/members`);
    await signIn(page, 'olivia@example.com', PASSWORD);
    await expect.poll(() => page.locator('ul.groups li').allTextContents()).toEqual(['Developers: editor', 'Night shift: viewer, on every domain']);
  });
});
