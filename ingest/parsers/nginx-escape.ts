/**
 * nginx's access-log escaping (`log_format … escape=default`, the default): every byte of a
 * variable's value that is `"`, `\`, a control character, DEL or not ASCII is written as `\xHH`
 * (upper-case hex). A logged value therefore never holds a raw `"` or `\`: every `\` starts an
 * escape, so unescaping is exact.
 */

const HEX_DIGIT = new Int8Array(128).fill(-1);
for (let i = 0; i < 10; i++) HEX_DIGIT[48 + i] = i;
for (let i = 0; i < 6; i++) HEX_DIGIT[65 + i] = HEX_DIGIT[97 + i] = 10 + i;

const hexDigit = (s: string, at: number) => {
  const c = s.charCodeAt(at);
  return c < 128 ? HEX_DIGIT[c]! : -1;
};

const RAW_NON_ASCII = /[^\x00-\x7f]/;
// fatal: invalid UTF-8 must be detected, not replaced by U+FFFD; ignoreBOM: a leading EF BB BF is
// part of the value (a decoder that swallowed it would not round-trip).
const UTF8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

/**
 * The value nginx logged, unescaped. Escaped bytes that form valid UTF-8 are decoded; when they
 * do not (a TLS handshake sent to a plain-HTTP port, a Latin-1 URL), the value is returned exactly
 * as logged, escapes included, so no byte is lost or replaced.
 */
export function unescapeNginx(logged: string): string {
  let at = logged.indexOf('\\');
  if (at === -1) return logged;
  // One character per escaped byte (a hand-written loop: String.replace with a callback is 3× slower).
  let bytes = '';
  let copied = 0;
  let nonAscii = false;
  for (; at !== -1; at = logged.indexOf('\\', at + 1)) {
    const hi = logged.charCodeAt(at + 1) === 120 ? hexDigit(logged, at + 2) : -1;
    const lo = hexDigit(logged, at + 3);
    if (hi < 0 || lo < 0) continue;
    const byte = hi * 16 + lo;
    if (byte >= 0x80) nonAscii = true;
    bytes += logged.slice(copied, at) + String.fromCharCode(byte);
    copied = at + 4;
  }
  bytes += logged.slice(copied);
  // Every byte ASCII: the characters are the text.
  if (!nonAscii) return bytes;
  // Raw non-ASCII characters beside escaped bytes cannot come from escape=default: left as they are.
  if (RAW_NON_ASCII.test(logged)) return logged;
  try {
    return UTF8.decode(Buffer.from(bytes, 'latin1'));
  } catch {
    return logged;
  }
}
