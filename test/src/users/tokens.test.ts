/**
 * Personal access tokens over the API (GET/POST /api/users/:id/tokens, DELETE …/tokens/:tokenId):
 * a user's own, signed in with the password; administrators list and revoke anyone's; a token
 * cannot mint or revoke tokens; other users' ids and token ids answer as unknown ones.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ADMIN_EMAIL, ADMIN_PASSWORD, call, createUserAndLogin, login, startTestApp, type TestApp } from '../../support/app.js';

let t: TestApp;
let admin: { token: string; id: number };
let alice: { id: number; token: string };
let bob: { id: number; token: string };

beforeAll(async () => {
  t = await startTestApp();
  const session = await login(t.app, ADMIN_EMAIL, ADMIN_PASSWORD);
  admin = { token: session.accessToken, id: session.user.id };
  alice = await createUserAndLogin(t.app, admin.token, { email: 'alice@example.com' });
  bob = await createUserAndLogin(t.app, admin.token, { email: 'bob@example.com' });
});
afterAll(async () => {
  await t?.close();
});

const create = (token: string, userId: number, body: unknown) => call(t.app, 'POST', `/api/users/${userId}/tokens`, { token, body });
const list = (token: string, userId: number) => call(t.app, 'GET', `/api/users/${userId}/tokens`, { token });
const revoke = (token: string, userId: number, tokenId: number) => call(t.app, 'DELETE', `/api/users/${userId}/tokens/${tokenId}`, { token });

describe('personal access tokens', () => {
  it('a user creates one (its secret shown once), uses it, lists it without the secret, revokes it', async () => {
    const made = await create(alice.token, alice.id, { name: '  backup job  ' });
    expect(made.status).toBe(201);
    expect(made.body.data).toMatchObject({ name: 'backup job', token: expect.stringMatching(/^thk_/), lastUsedAt: null, revokedAt: null });
    const secret = made.body.data.token;
    expect((await call(t.app, 'GET', `/api/users/${alice.id}`, { token: secret })).status).toBe(200);
    const listed = await list(alice.token, alice.id);
    expect(listed.body.data.tokens).toEqual([{ id: made.body.data.id, name: 'backup job', createdAt: expect.any(String), lastUsedAt: expect.any(String), revokedAt: null }]);
    expect(JSON.stringify(listed.body)).not.toContain(secret);
    expect((await revoke(alice.token, alice.id, made.body.data.id)).status).toBe(200);
    expect((await call(t.app, 'GET', `/api/users/${alice.id}`, { token: secret })).status).toBe(401);
    expect((await revoke(alice.token, alice.id, made.body.data.id)).status).toBe(404);
    const activity = await call(t.app, 'GET', `/api/users/${alice.id}/activity`, { token: alice.token });
    expect(activity.body.data.activities.map((a: any) => a.action)).toEqual(expect.arrayContaining(['token.create', 'token.revoke']));
  });

  it("other users' tokens: not listed, not created, not revoked (their ids answer as unknown ones); an administrator lists and revokes them", async () => {
    const bobs = (await create(bob.token, bob.id, { name: 'ci' })).body.data;
    expect((await list(alice.token, bob.id)).status).toBe(403);
    expect((await create(alice.token, bob.id, { name: 'mine now' })).status).toBe(403);
    expect((await revoke(alice.token, bob.id, bobs.id)).status).toBe(403);
    // Bob's token id under alice's user id: unknown.
    expect((await revoke(alice.token, alice.id, bobs.id)).status).toBe(404);
    expect((await create(admin.token, bob.id, { name: 'for bob' })).status).toBe(403);
    expect((await list(admin.token, bob.id)).body.data.tokens.map((x: any) => x.id)).toEqual([bobs.id]);
    expect((await revoke(admin.token, bob.id, bobs.id)).status).toBe(200);
    expect((await call(t.app, 'GET', `/api/users/${bob.id}`, { token: bobs.token })).status).toBe(401);
    expect((await list(admin.token, 999_999)).status).toBe(404);
  });

  it('a token cannot create or revoke tokens; names are validated', async () => {
    const made = (await create(alice.token, alice.id, { name: 'leaky' })).body.data;
    const byToken = await create(made.token, alice.id, { name: 'another' });
    expect(byToken.status).toBe(403);
    expect(byToken.body.error).toMatch(/sign in with the password/);
    expect((await revoke(made.token, alice.id, made.id)).status).toBe(403);
    expect((await list(made.token, alice.id)).status).toBe(200);
    for (const body of [{}, { name: '' }, { name: '   ' }, { name: 'x'.repeat(101) }, { name: 'ok', extra: 1 }]) {
      const res = await create(alice.token, alice.id, body);
      expect(res.status, JSON.stringify(body)).toBe(422);
    }
    expect((await call(t.app, 'POST', `/api/users/${alice.id}/tokens`, { body: { name: 'anonymous' } })).status).toBe(401);
  });
});
