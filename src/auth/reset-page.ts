/**
 * The page behind the link in a password reset e-mail: self-contained (no external assets), it
 * posts the token from its own URL and the new password to POST /api/auth/reset-password.
 */
export const RESET_PASSWORD_PAGE = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>tailhouse · choose a new password</title>
<style>
  body { font: 16px/1.5 system-ui, sans-serif; background: #f4f5f7; color: #1d2330; display: grid; place-items: center; min-height: 100vh; margin: 0; }
  form { background: #fff; padding: 2rem; border-radius: 8px; box-shadow: 0 1px 4px rgba(0,0,0,.12); width: min(22rem, 90vw); }
  h1 { font-size: 1.25rem; margin-top: 0; }
  label { display: block; margin: 1rem 0 .25rem; }
  input { width: 100%; box-sizing: border-box; padding: .5rem; font: inherit; border: 1px solid #b8bfcc; border-radius: 4px; }
  button { margin-top: 1.25rem; width: 100%; padding: .6rem; font: inherit; background: #2557d6; color: #fff; border: 0; border-radius: 4px; cursor: pointer; }
  #status { margin-top: 1rem; min-height: 1.5em; }
  .error { color: #b00020; } .done { color: #1b7a36; }
</style>
</head>
<body>
<form id="reset">
  <h1>Choose a new password</h1>
  <label for="password">New password (8 to 128 characters)</label>
  <input id="password" type="password" minlength="8" maxlength="128" autocomplete="new-password" required>
  <label for="confirm">Repeat it</label>
  <input id="confirm" type="password" minlength="8" maxlength="128" autocomplete="new-password" required>
  <button type="submit">Set password</button>
  <p id="status" role="status"></p>
</form>
<script>
  const form = document.getElementById('reset');
  const status = document.getElementById('status');
  const token = new URLSearchParams(location.search).get('token') || '';
  const show = (text, kind) => { status.textContent = text; status.className = kind; };
  if (!token) show('This link has no reset token; ask an administrator for a new e-mail.', 'error');
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    const newPassword = document.getElementById('password').value;
    if (newPassword !== document.getElementById('confirm').value) return show('The two passwords differ.', 'error');
    show('Saving…', '');
    try {
      const response = await fetch('/api/auth/reset-password', {
        method: 'POST',
        headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ token, newPassword }),
      });
      const body = await response.json();
      if (body.success) { form.querySelector('button').disabled = true; return show(body.message, 'done'); }
      show(Object.values(body.details || {})[0] ? body.error + ': ' + Object.entries(body.details).map(([k, v]) => k + ' ' + v).join('; ') : body.error, 'error');
    } catch { show('The server could not be reached; try again.', 'error'); }
  });
</script>
</body>
</html>`;
