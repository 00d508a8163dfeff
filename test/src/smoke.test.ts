import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ADMIN_EMAIL, ADMIN_PASSWORD, call, login, startTestApp, type TestApp } from '../support/app.js';

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(async () => {
  await t?.close();
});

describe('smoke', () => {
  it('signs the first admin in and lists users', async () => {
    const { accessToken } = await login(t.app, ADMIN_EMAIL, ADMIN_PASSWORD);
    const res = await call(t.app, 'GET', '/api/users', { token: accessToken });
    expect(res.status).toBe(200);
    expect(res.body.data.users.map((u: { email: string }) => u.email)).toEqual([ADMIN_EMAIL]);
  });
});
