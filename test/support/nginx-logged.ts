/**
 * What the parsers must give for bytes a client sent to nginx, as the real-nginx tests expect it
 * (test/ingest/parsers/nginx-real.test.ts on captured logs, test/ingest/nginx-live.test.ts on a live nginx).
 * Byte strings: one character per byte (U+0000–U+00FF, 'latin1').
 */

const UTF8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

/**
 * The text of the bytes when they are UTF-8 (ASCII included), otherwise the value as nginx logged
 * it with escape=default (", \, control bytes, DEL and bytes above 0x7e as \xHH, upper-case), so
 * that no byte is lost (a URL is stored as logged: docs/reference/logs.md#access-entries).
 */
export function loggedText(bytes: string): string {
  const b = Buffer.from(bytes, 'latin1');
  try {
    return UTF8.decode(b);
  } catch {
    let s = '';
    for (const x of b) s += x === 0x22 || x === 0x5c || x < 0x20 || x > 0x7e ? `\\x${x.toString(16).toUpperCase().padStart(2, '0')}` : String.fromCharCode(x);
    return s;
  }
}

/**
 * Method, target and protocol of a request line, split as nginx's $request is documented to be
 * read (access-format.ts): a method token, the target, ` HTTP/…` when present; anything that does
 * not start with a method token is all target (a TLS handshake on the plain port, `get`).
 */
export function splitRequest(line: string): { method: string; url: string; protocol: string } {
  const m = /^([A-Z_-]+) (.*?)(?: (HTTP\/[^ ]*))?$/s.exec(line);
  if (m === null) return { method: '', url: loggedText(line), protocol: '' };
  return { method: m[1]!, url: loggedText(m[2]!), protocol: m[3] ?? '' };
}
