import { createHash } from 'node:crypto';
import { Hono, type Context } from 'hono';

/**
 * The pages behind the links tailhouse e-mails: choose a new password (reset link), confirm a
 * new e-mail address, accept an invitation to a domain (src/domains/invitations.ts). Each is one self-contained HTML document (no external assets) whose script
 * reads the token from its own URL and posts it to the API. Their Content-Security-Policy allows
 * exactly their own inline style and script (by SHA-256) and requests to this origin; the token
 * in the URL is kept out of Referer headers and caches.
 */

const STYLE = `
  body { font: 16px/1.5 system-ui, sans-serif; background: #f4f5f7; color: #1d2330; display: grid; place-items: center; min-height: 100vh; margin: 0; }
  form { box-sizing: border-box; background: #fff; padding: 2rem; border-radius: 8px; box-shadow: 0 1px 4px rgba(0,0,0,.12); width: min(22rem, 92vw); }
  h1 { font-size: 1.25rem; margin-top: 0; }
  label { display: block; margin: 1rem 0 .25rem; }
  input { width: 100%; box-sizing: border-box; padding: .5rem; font: inherit; border: 1px solid #b8bfcc; border-radius: 4px; }
  button { margin-top: 1.25rem; width: 100%; padding: .6rem; font: inherit; background: #2557d6; color: #fff; border: 0; border-radius: 4px; cursor: pointer; }
  #status { margin-top: 1rem; min-height: 1.5em; }
  .error { color: #b00020; } .done { color: #1b7a36; }
`;

/** Shared by both scripts: the form, its status line, the token, and posting to the API. */
const PRELUDE = `
  const form = document.getElementById('form');
  const status = document.getElementById('status');
  const token = new URLSearchParams(location.search).get('token') || '';
  const show = (text, kind) => { status.textContent = text; status.className = kind; };
  if (!token) show('This link has no token; ask for a new e-mail.', 'error');
  const post = async (path, body) => {
    show('Saving…', '');
    try {
      const response = await fetch(path, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
      const result = await response.json();
      if (result.success) { form.querySelector('button').disabled = true; return show(result.message, 'done'); }
      show(Object.values(result.details || {})[0] ? result.error + ': ' + Object.entries(result.details).map(([k, v]) => k + ' ' + v).join('; ') : result.error, 'error');
    } catch { show('The server could not be reached; try again.', 'error'); }
  };`;

const RESET_BODY = `<form id="form">
  <h1>Choose a new password</h1>
  <label for="password">New password (8 to 128 characters)</label>
  <input id="password" type="password" minlength="8" maxlength="128" autocomplete="new-password" required>
  <label for="confirm">Repeat it</label>
  <input id="confirm" type="password" minlength="8" maxlength="128" autocomplete="new-password" required>
  <button type="submit">Set password</button>
  <p id="status" role="status"></p>
</form>`;

const RESET_SCRIPT = `${PRELUDE}
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    const newPassword = document.getElementById('password').value;
    if (newPassword !== document.getElementById('confirm').value) return show('The two passwords differ.', 'error');
    post('/api/auth/reset-password', { token, newPassword });
  });
`;

const CONFIRM_BODY = `<form id="form">
  <h1>Confirm your new e-mail address</h1>
  <p>Your tailhouse account will sign in with the address this link was sent to.</p>
  <button type="submit">Confirm the new address</button>
  <p id="status" role="status"></p>
</form>`;

const CONFIRM_SCRIPT = `${PRELUDE}
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    post('/api/auth/confirm-email', { token });
  });
`;

const INVITATION_BODY = `<form id="form">
  <h1>Accept your invitation</h1>
  <div id="new-account">
    <p>Choose your name and a password for your new tailhouse account.</p>
    <label for="name">Name</label>
    <input id="name" type="text" maxlength="200" autocomplete="name">
    <label for="password">Password (8 to 128 characters)</label>
    <input id="password" type="password" minlength="8" maxlength="128" autocomplete="new-password">
    <label for="confirm">Repeat it</label>
    <input id="confirm" type="password" minlength="8" maxlength="128" autocomplete="new-password">
  </div>
  <button type="submit">Accept</button>
  <p id="status" role="status"></p>
</form>`;

// A link to an address that had an account (account=existing) asks nothing: the domain goes to that account.
const INVITATION_SCRIPT = `${PRELUDE}
  const existing = new URLSearchParams(location.search).get('account') === 'existing';
  if (existing) document.getElementById('new-account').hidden = true;
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    if (existing) return post('/api/invitations/accept', { token });
    const password = document.getElementById('password').value;
    if (password !== document.getElementById('confirm').value) return show('The two passwords differ.', 'error');
    post('/api/invitations/accept', { token, name: document.getElementById('name').value, ...(password ? { password } : {}) });
  });
`;

const sha256 = (text: string) => `'sha256-${createHash('sha256').update(text).digest('base64')}'`;

export interface Page {
  html: string;
  contentSecurityPolicy: string;
}

function page(title: string, body: string, script: string): Page {
  const html = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>tailhouse · ${title}</title>
<style>${STYLE}</style>
</head>
<body>
${body}
<script>${script}</script>
</body>
</html>`;
  const contentSecurityPolicy = [
    "default-src 'none'",
    `script-src ${sha256(script)}`,
    `style-src ${sha256(STYLE)}`,
    "connect-src 'self'",
    "form-action 'none'",
    "base-uri 'none'",
    "frame-ancestors 'none'",
  ].join('; ');
  return { html, contentSecurityPolicy };
}

export const RESET_PASSWORD_PAGE = page('choose a new password', RESET_BODY, RESET_SCRIPT);
export const CONFIRM_EMAIL_PAGE = page('confirm your new e-mail address', CONFIRM_BODY, CONFIRM_SCRIPT);
export const ACCEPT_INVITATION_PAGE = page('accept your invitation', INVITATION_BODY, INVITATION_SCRIPT);

/** GET /reset-password, /confirm-email and /accept-invitation, the targets of the e-mailed links. */
export function linkPages() {
  const app = new Hono();
  const serve = (target: Page) => (c: Context) =>
    c.html(target.html, 200, {
      'Content-Security-Policy': target.contentSecurityPolicy,
      'Referrer-Policy': 'no-referrer',
      // The URL carries the token: no cache is to keep the pair.
      'Cache-Control': 'no-store',
    });
  app.get('/reset-password', serve(RESET_PASSWORD_PAGE));
  app.get('/confirm-email', serve(CONFIRM_EMAIL_PAGE));
  app.get('/accept-invitation', serve(ACCEPT_INVITATION_PAGE));
  return app;
}
