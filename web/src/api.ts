/**
 * The API as the dashboard calls it. The access token lives in this module's memory only; the
 * refresh token is an HttpOnly cookie of the session routes (src/auth/browser-session.ts), so a
 * reload signs in again through /api/auth/session/refresh and nothing secret is in storage.
 */

import type { Paged, Permissions, User } from './data/types.js';

export const SESSION_HEADER = 'X-Tailhouse-Session';

/** An answer other than success, with the API's message and, for a 422, the message per field. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly details: Record<string, string> = {},
  ) {
    super(message);
  }
}

let accessToken: string | null = null;
let signedIn: User | null = null;
/** The signed-in user's rights, read once per session (GET /api/users/:id/permissions). */
let rights: Promise<Set<string>> | null = null;
let signedOutHandler: () => void = () => {};
/** One refresh at a time: the refresh token rotates, and a second use of the old one ends the session. */
let refreshing: Promise<User | null> | null = null;

/** Called when the session is gone (expired, revoked, signed out elsewhere). */
export function onSignedOut(handler: () => void): void {
  signedOutHandler = handler;
}

async function parse(res: Response): Promise<any> {
  const type = res.headers.get('content-type') ?? '';
  const body = type.includes('json') ? await res.json() : { success: res.ok, error: await res.text() };
  if (!res.ok || body.success === false) {
    throw new ApiError(res.status, typeof body.error === 'string' && body.error ? body.error : `The server answered ${res.status}`, body.details ?? {});
  }
  return body;
}

async function sessionCall(path: string, body?: unknown): Promise<any> {
  const res = await fetch(`/api/auth/session${path}`, {
    method: 'POST',
    credentials: 'same-origin',
    headers: { [SESSION_HEADER]: '1', ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    body: body === undefined ? null : JSON.stringify(body),
  });
  return parse(res);
}

/** The signed-in user, from the session cookie, or null. */
export function restoreSession(): Promise<User | null> {
  refreshing ??= sessionCall('/refresh')
    .then((body) => {
      accessToken = body.data.accessToken;
      return remember(body.data.user as User);
    })
    .catch((err: unknown) => {
      if (err instanceof ApiError && err.status === 401) {
        accessToken = null;
        remember(null);
        return null;
      }
      throw err;
    })
    .finally(() => {
      refreshing = null;
    });
  return refreshing;
}

function remember(user: User | null): User | null {
  if (user?.id !== signedIn?.id || user?.role !== signedIn?.role) rights = null;
  signedIn = user;
  return user;
}

export async function signIn(email: string, password: string): Promise<User> {
  const body = await sessionCall('', { email, password });
  accessToken = body.data.accessToken;
  return remember(body.data.user as User)!;
}

export async function signOut(): Promise<void> {
  accessToken = null;
  remember(null);
  await sessionCall('/logout');
}

/**
 * Whether the signed-in user may do `action` on `resource` (`alerts`, `update`): what the page
 * offers follows it, and the API decides anyway.
 */
export async function may(resource: string, action: string): Promise<boolean> {
  const user = signedIn;
  if (!user) return false;
  rights ??= api<Permissions>('GET', `/api/users/${user.id}/permissions`).then(
    (data) => new Set(data.permissions.flatMap((p) => p.actions.map((a) => `${p.resource}:${a}`))),
  );
  return (await rights).has(`${resource}:${action}`);
}

/** The Authorization header of the current session (none when signed out). */
export const authorization = (): Record<string, string> => (accessToken ? { authorization: `Bearer ${accessToken}` } : {});

/**
 * An API call with the access token; one renewal through the cookie when it has expired. Its
 * answer is the envelope's `data`, or `{message}` for an answer that is only a message (a 202
 * "Invitation sent", a deletion), so that the page can show the server's words. `signal` cancels
 * it (useData's, when the page leaves or asks for something else).
 */
export async function api<T = any>(method: string, path: string, body?: unknown, signal?: AbortSignal): Promise<T> {
  const send = () =>
    fetch(path, {
      method,
      headers: { ...authorization(), ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      body: body === undefined ? null : JSON.stringify(body),
      signal: signal ?? null,
    });
  let res = await send();
  if (res.status === 401) {
    if (await restoreSession()) res = await send();
    if (res.status === 401) {
      signedOutHandler();
      throw new ApiError(401, 'Your session has ended: sign in again');
    }
  }
  const answer = await parse(res);
  return ('data' in answer ? answer.data : { message: answer.message }) as T;
}

/** Every entry of a paged listing (the array `key` of its answers), by pages of 100: the first, then the others together. */
export async function allPages<Key extends string, T>(path: string, key: Key, signal?: AbortSignal): Promise<T[]> {
  const page = (n: number) => api<Paged<Key, T>>('GET', `${path}${path.includes('?') ? '&' : '?'}limit=100&page=${n}`, undefined, signal);
  const first = await page(1);
  const rest = await Promise.all(Array.from({ length: Math.max(0, first.pagination.pages - 1) }, (_, i) => page(i + 2)));
  return [first, ...rest].flatMap((answer) => answer[key]);
}
