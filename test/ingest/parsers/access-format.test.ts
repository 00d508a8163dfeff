import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { compileAccessFormat, type AccessLineParser } from '../../../ingest/parsers/access-format.js';
import { unescapeNginx } from '../../../ingest/parsers/nginx-escape.js';
import type { AccessEntry } from '../../../core/entries.js';

// Fixture lines are written the way nginx writes them, so they are String.raw: `\x22` in a line is
// the four characters nginx puts in the file, not a quote.

/** 21/Nov/2026:08:15:30 +0100 */
const T = Date.UTC(2026, 10, 21, 7, 15, 30);

const combined = compileAccessFormat('combined');

function entryOf(parse: AccessLineParser, line: string): AccessEntry {
  const result = parse(line);
  if (!result.ok) throw new Error(`rejected: ${result.reason}`);
  return result.entry;
}

function reasonOf(parse: AccessLineParser, line: string): string {
  const result = parse(line);
  if (result.ok) throw new Error(`accepted: ${JSON.stringify(result.entry)}`);
  return result.reason;
}

/** A combined line with `ua` as the logged user agent, and the rest fixed. */
const withAgent = (ua: string) => String.raw`203.0.113.7 - - [21/Nov/2026:08:15:30 +0100] "GET / HTTP/1.1" 200 5 "-" "` + ua + '"';
/** A combined line with `request` as the logged request line. */
const withRequest = (request: string) => `203.0.113.7 - - [21/Nov/2026:08:15:30 +0100] "${request}" 400 157 "-" "-"`;

describe('named formats', () => {
  it('combined: every field', () => {
    const line = '203.0.113.7 - alice [21/Nov/2026:08:15:30 +0100] "GET /products?id=12&sort=price HTTP/1.1" 200 5123 "https://www.google.com/" "Mozilla/5.0 (X11; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0"';
    expect(combined(line)).toEqual({
      ok: true,
      entry: {
        timestamp: T,
        ipAddress: '203.0.113.7',
        method: 'GET',
        url: '/products?id=12&sort=price',
        protocol: 'HTTP/1.1',
        statusCode: 200,
        responseSize: 5123,
        referrer: 'https://www.google.com/',
        userAgent: 'Mozilla/5.0 (X11; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0',
        responseTime: null,
        host: null,
      },
    });
  });

  it('main: nginx default format with $http_x_forwarded_for, which may hold a list', () => {
    const main = compileAccessFormat('main');
    const entry = entryOf(main, '10.0.0.5 - - [21/Nov/2026:08:15:30 +0100] "POST /api/cart HTTP/2.0" 201 17 "-" "curl/8.5.0" "198.51.100.23, 10.0.0.1"');
    expect(entry).toMatchObject({ ipAddress: '10.0.0.5', method: 'POST', url: '/api/cart', protocol: 'HTTP/2.0', statusCode: 201, responseSize: 17, referrer: '', userAgent: 'curl/8.5.0' });
    expect(entryOf(main, '10.0.0.5 - - [21/Nov/2026:08:15:30 +0100] "GET / HTTP/1.1" 200 0 "-" "-" "-"').statusCode).toBe(200);
  });

  it('the format written out equals the named one', () => {
    const line = '203.0.113.7 - - [21/Nov/2026:08:15:30 +0100] "GET / HTTP/1.1" 200 5 "-" "curl/8.5.0"';
    const written = compileAccessFormat('$remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent "$http_referer" "$http_user_agent"');
    expect(written(line)).toEqual(combined(line));
  });

  it('refuses a name that is neither combined, main nor a format with a time variable', () => {
    expect(() => compileAccessFormat('apache')).toThrow(/no time variable/);
  });
});

describe('time variables', () => {
  it('$time_local carries its offset: the result is UTC', () => {
    const at = (time: string) => entryOf(combined, `203.0.113.7 - - [${time}] "GET / HTTP/1.1" 200 5 "-" "-"`).timestamp;
    expect(at('21/Nov/2026:08:15:30 +0100')).toBe(T);
    expect(at('21/Nov/2026:07:15:30 +0000')).toBe(T);
    expect(at('21/Nov/2026:02:15:30 -0500')).toBe(T);
    expect(at('21/Nov/2026:12:45:30 +0530')).toBe(T);
    expect(at('21/Nov/2026:20:00:30 +1245')).toBe(T);
    expect(at('01/Jan/2027:00:30:00 +0100')).toBe(Date.UTC(2026, 11, 31, 23, 30));
    expect(at('29/Feb/2028:23:59:59 +0000')).toBe(Date.UTC(2028, 1, 29, 23, 59, 59));
  });

  it('$time_local: every month name', () => {
    ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'].forEach((month, i) => {
      const line = `203.0.113.7 - - [05/${month}/2026:10:00:00 +0000] "GET / HTTP/1.1" 200 5 "-" "-"`;
      expect(entryOf(combined, line).timestamp).toBe(Date.UTC(2026, i, 5, 10));
    });
  });

  it('$time_local: a time that does not exist is rejected with its reason', () => {
    for (const time of ['29/Feb/2026:10:00:00 +0000', '31/Apr/2026:10:00:00 +0000', '21/Foo/2026:10:00:00 +0000', '21/Nov/2026:24:00:00 +0000', '00/Nov/2026:10:00:00 +0000']) {
      expect(reasonOf(combined, `203.0.113.7 - - [${time}] "GET / HTTP/1.1" 200 5 "-" "-"`)).toBe(`$time_local: invalid time "${time}"`);
    }
  });

  it('$time_iso8601 with its offset, as nginx writes it', () => {
    const iso = compileAccessFormat('$remote_addr [$time_iso8601] "$request" $status');
    const at = (time: string) => entryOf(iso, `203.0.113.7 [${time}] "GET / HTTP/1.1" 200`).timestamp;
    expect(at('2026-11-21T08:15:30+01:00')).toBe(T);
    expect(at('2026-11-21T07:15:30+00:00')).toBe(T);
    expect(at('2026-11-21T02:15:30-05:00')).toBe(T);
    expect(at('2026-11-21T07:15:30Z')).toBe(T);
    expect(reasonOf(iso, '203.0.113.7 [2026-13-21T07:15:30+00:00] "GET / HTTP/1.1" 200')).toMatch(/^\$time_iso8601: invalid time/);
  });

  it('$msec keeps milliseconds and wins over the other time variables', () => {
    const msec = compileAccessFormat('$msec $remote_addr [$time_local] "$request" $status');
    expect(entryOf(msec, '1795245330.123 203.0.113.7 [21/Nov/2026:08:15:30 +0100] "GET / HTTP/1.1" 200').timestamp).toBe(T + 123);
    expect(entryOf(msec, '1795245330.000 203.0.113.7 [21/Nov/2026:08:15:30 +0100] "GET / HTTP/1.1" 200').timestamp).toBe(T);
  });
});

describe('$request', () => {
  const request = (line: string) => {
    const { method, url, protocol } = entryOf(combined, withRequest(line));
    return { method, url, protocol };
  };

  it('splits method, target and protocol', () => {
    expect(request('GET /index.html HTTP/1.1')).toEqual({ method: 'GET', url: '/index.html', protocol: 'HTTP/1.1' });
    expect(request('POST /api/v1/orders?draft=1 HTTP/2.0')).toEqual({ method: 'POST', url: '/api/v1/orders?draft=1', protocol: 'HTTP/2.0' });
    expect(request('GET /app HTTP/3.0')).toEqual({ method: 'GET', url: '/app', protocol: 'HTTP/3.0' });
    expect(request('PROPFIND /dav/ HTTP/1.1')).toEqual({ method: 'PROPFIND', url: '/dav/', protocol: 'HTTP/1.1' });
    expect(request('OPTIONS * HTTP/1.1')).toEqual({ method: 'OPTIONS', url: '*', protocol: 'HTTP/1.1' });
    expect(request('CONNECT example.com:443 HTTP/1.1')).toEqual({ method: 'CONNECT', url: 'example.com:443', protocol: 'HTTP/1.1' });
    expect(request('GET http://example.com/proxy?x=1 HTTP/1.1')).toEqual({ method: 'GET', url: 'http://example.com/proxy?x=1', protocol: 'HTTP/1.1' });
  });

  it('a target may hold spaces and escaped bytes', () => {
    expect(request('GET /a b HTTP/1.1')).toEqual({ method: 'GET', url: '/a b', protocol: 'HTTP/1.1' });
    expect(request('GET /a HTTP/1.1 HTTP/1.1')).toEqual({ method: 'GET', url: '/a HTTP/1.1', protocol: 'HTTP/1.1' });
    expect(request(String.raw`GET /q?x=\x22quoted\x22&y=\x5C HTTP/1.1`)).toEqual({ method: 'GET', url: '/q?x="quoted"&y=\\', protocol: 'HTTP/1.1' });
    expect(request(String.raw`GET /caf\xC3\xA9 HTTP/1.1`)).toEqual({ method: 'GET', url: '/café', protocol: 'HTTP/1.1' });
  });

  it('HTTP/0.9: method and target, no protocol', () => {
    expect(request('GET /')).toEqual({ method: 'GET', url: '/', protocol: '' });
  });

  it('no request line (-, or empty): the line is kept with empty method, url and protocol', () => {
    expect(request('-')).toEqual({ method: '', url: '', protocol: '' });
    expect(request('')).toEqual({ method: '', url: '', protocol: '' });
    expect(entryOf(combined, withRequest('-')).statusCode).toBe(400);
  });

  it('garbage (a TLS handshake on a plain port, scanners): the whole text is the url, unescaped when it is UTF-8', () => {
    const tls = String.raw`\x16\x03\x01\x02\x00\x01\x00\x01\xFC\x03\x03\x8A\xE1`;
    expect(request(tls)).toEqual({ method: '', url: tls, protocol: '' });
    expect(request(String.raw`\x16\x03\x01\x00 x`)).toEqual({ method: '', url: '\x16\x03\x01\x00 x', protocol: '' });
    expect(request('SSH-2.0-Go')).toEqual({ method: '', url: 'SSH-2.0-Go', protocol: '' });
    expect(request('get / HTTP/1.1')).toEqual({ method: '', url: 'get / HTTP/1.1', protocol: '' });
    expect(request('MGLNDD_203.0.113.7_443')).toEqual({ method: '', url: 'MGLNDD_203.0.113.7_443', protocol: '' });
  });

  it('a 4 KiB target round-trips', () => {
    const target = `/search?q=${'a%20b'.repeat(820)}`;
    expect(target.length).toBeGreaterThan(4096);
    expect(request(`GET ${target} HTTP/1.1`).url).toBe(target);
  });

  it('$request_method, $request_uri and $server_protocol take precedence over $request, unless they are - or empty', () => {
    const parse = compileAccessFormat('[$time_local] "$request" $request_method $request_uri $server_protocol');
    // nginx refused the request line (400): the three are -, $request still holds what was sent.
    expect(entryOf(parse, '[21/Nov/2026:08:15:30 +0100] "GET /a b HTTP/1.1" - - -')).toMatchObject({ method: 'GET', url: '/a b', protocol: 'HTTP/1.1' });
    // A version nginx does not speak (505): $server_protocol is empty.
    const quoted = compileAccessFormat('[$time_local] "$request" "$request_method" "$request_uri" "$server_protocol"');
    expect(entryOf(quoted, '[21/Nov/2026:08:15:30 +0100] "GET /v HTTP/9.9" "GET" "/v" ""')).toMatchObject({ method: 'GET', url: '/v', protocol: 'HTTP/9.9' });
    expect(entryOf(parse, '[21/Nov/2026:08:15:30 +0100] "GET /a HTTP/1.1" GET /a?utm=x HTTP/1.1')).toMatchObject({ method: 'GET', url: '/a?utm=x', protocol: 'HTTP/1.1' });
    const alone = compileAccessFormat('[$time_local] $request_method "$request_uri" $server_protocol $status');
    expect(entryOf(alone, String.raw`[21/Nov/2026:08:15:30 +0100] DELETE "/items/7?force=\x22yes\x22" HTTP/2.0 204`)).toMatchObject({ method: 'DELETE', url: '/items/7?force="yes"', protocol: 'HTTP/2.0', statusCode: 204 });
  });

  it('$uri with $args or $query_string makes the url when there is no $request_uri or $request', () => {
    const parse = compileAccessFormat('[$time_local] $request_method "$uri" "$args"');
    expect(entryOf(parse, '[21/Nov/2026:08:15:30 +0100] GET "/search" "q=shoes&page=2"').url).toBe('/search?q=shoes&page=2');
    expect(entryOf(parse, '[21/Nov/2026:08:15:30 +0100] GET "/search" "-"').url).toBe('/search');
    expect(entryOf(parse, '[21/Nov/2026:08:15:30 +0100] GET "/search" ""').url).toBe('/search');
    const query = compileAccessFormat('[$time_local] "$uri" "$query_string"');
    expect(entryOf(query, '[21/Nov/2026:08:15:30 +0100] "/a b" "x=1"').url).toBe('/a b?x=1');
    const uri = compileAccessFormat('[$time_local] $uri');
    expect(entryOf(uri, '[21/Nov/2026:08:15:30 +0100] /only/path').url).toBe('/only/path');
  });
});

describe('status, sizes and response time', () => {
  it('$status as nginx writes it, 000 and 009 included', () => {
    for (const status of ['200', '499', '000', '009', '503']) {
      expect(entryOf(combined, `203.0.113.7 - - [21/Nov/2026:08:15:30 +0100] "GET / HTTP/1.1" ${status} 0 "-" "-"`).statusCode).toBe(Number(status));
    }
  });

  it('$body_bytes_sent, or $bytes_sent when the format has no $body_bytes_sent; - is 0', () => {
    const both = compileAccessFormat('[$time_local] $bytes_sent $body_bytes_sent');
    expect(entryOf(both, '[21/Nov/2026:08:15:30 +0100] 5321 5000').responseSize).toBe(5000);
    const total = compileAccessFormat('[$time_local] $bytes_sent');
    expect(entryOf(total, '[21/Nov/2026:08:15:30 +0100] 5321').responseSize).toBe(5321);
    expect(entryOf(total, '[21/Nov/2026:08:15:30 +0100] -').responseSize).toBe(0);
    expect(entryOf(combined, '203.0.113.7 - - [21/Nov/2026:08:15:30 +0100] "GET / HTTP/1.1" 200 - "-" "-"').responseSize).toBe(0);
    expect(entryOf(combined, '203.0.113.7 - - [21/Nov/2026:08:15:30 +0100] "GET /iso HTTP/1.1" 200 4700000000 "-" "-"').responseSize).toBe(4_700_000_000);
  });

  it('a format without $status or sizes gives 0', () => {
    const parse = compileAccessFormat('[$time_local] "$request"');
    expect(entryOf(parse, '[21/Nov/2026:08:15:30 +0100] "GET / HTTP/1.1"')).toMatchObject({ statusCode: 0, responseSize: 0 });
  });

  it('$request_time in seconds with milliseconds becomes ms; no $request_time gives null', () => {
    const parse = compileAccessFormat('$remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent "$http_referer" "$http_user_agent" $request_time');
    const timed = (t: string) => entryOf(parse, `203.0.113.7 - - [21/Nov/2026:08:15:30 +0100] "GET / HTTP/1.1" 200 5 "-" "-" ${t}`).responseTime;
    expect(timed('0.123')).toBe(123);
    expect(timed('0.000')).toBe(0);
    expect(timed('12.001')).toBe(12001);
    expect(timed('1234.567')).toBe(1234567);
    expect(timed('-')).toBeNull();
    expect(entryOf(combined, withRequest('GET / HTTP/1.1')).responseTime).toBeNull();
    expect(reasonOf(parse, '203.0.113.7 - - [21/Nov/2026:08:15:30 +0100] "GET / HTTP/1.1" 200 5 "-" "-" fast')).toBe(
      '$request_time at column 77: expected seconds like 0.123, found "fast"',
    );
  });
});

describe('upstream variables', () => {
  const format = '$remote_addr [$time_local] "$request" $status $body_bytes_sent $request_time $upstream_response_time $upstream_connect_time $upstream_header_time $upstream_status $upstream_addr $upstream_bytes_received "$upstream_cache_status" "$host"';
  const parse = compileAccessFormat(format);
  const line = (upstream: string) => `203.0.113.7 [21/Nov/2026:08:15:30 +0100] "GET /api HTTP/1.1" 502 157 0.250 ${upstream} "MISS" "api.example.com"`;

  it('single values, lists joined by ", " and " : ", and - for an upstream without a value', () => {
    const cases = [
      '0.004 0.001 0.003 200 10.0.0.1:8080 512',
      '0.001, 0.002 : 0.003 0.000, 0.001 : 0.001 -, 0.002 : 0.003 502, 502 : 200 10.0.0.1:8080, 10.0.0.2:8080 : unix:/run/app.sock 0, 0 : 512',
      '- - - - - -',
      '30.001, - 30.000, - 30.001, - 504, 502 [2001:db8::10]:80, 10.0.0.2:8080 0, 0',
      '0.010 0.001 0.010 200 backend 1024',
    ];
    for (const upstream of cases) {
      expect(entryOf(parse, line(upstream))).toMatchObject({ statusCode: 502, responseSize: 157, responseTime: 250, host: 'api.example.com' });
    }
  });

  it('a malformed list is rejected with the variable named', () => {
    expect(reasonOf(parse, line('0.001,0.002 0.001 0.001 200 10.0.0.1:80 1'))).toMatch(/^expected " " after \$upstream_response_time at column 81, found ",0\.002 /);
    expect(reasonOf(parse, line('fast 0.001 0.001 200 10.0.0.1:80 1'))).toMatch(/^\$upstream_response_time at column 76: expected seconds or a list like 0.001, 0.002 : 0.003, found "fast /);
    expect(reasonOf(parse, line('0.001 0.001 0.001 ok 10.0.0.1:80 1'))).toMatch(/^\$upstream_status at column \d+: expected a number or a list like 502, 200/);
  });

  it('$upstream_http_* and other $upstream_* values are matched generically', () => {
    const generic = compileAccessFormat('[$time_local] "$upstream_http_x_cache" "$upstream_cookie_sid" "$upstream_trailer_grpc_status" $status');
    expect(entryOf(generic, '[21/Nov/2026:08:15:30 +0100] "HIT from edge 1" "abc; def" "0" 200').statusCode).toBe(200);
  });
});

describe('other variables', () => {
  it('$host, else $server_name, routes the line; no host variable gives null', () => {
    const both = compileAccessFormat('$server_name $host [$time_local]');
    expect(entryOf(both, 'default shop.example.com [21/Nov/2026:08:15:30 +0100]').host).toBe('shop.example.com');
    const server = compileAccessFormat('$server_name [$time_local]');
    expect(entryOf(server, 'shop.example.com [21/Nov/2026:08:15:30 +0100]').host).toBe('shop.example.com');
    expect(entryOf(combined, withRequest('GET / HTTP/1.1')).host).toBeNull();
    const contract = compileAccessFormat('$host $remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent "$http_referer" "$http_user_agent" $request_time');
    expect(entryOf(contract, '[2001:db8::1] 2001:db8::7 - - [21/Nov/2026:08:15:30 +0100] "GET / HTTP/1.1" 200 5 "-" "-" 0.002')).toMatchObject({ host: '[2001:db8::1]', ipAddress: '2001:db8::7', responseTime: 2 });
  });

  it('$scheme://$host$request_uri: the host ends at the path', () => {
    const parse = compileAccessFormat('[$time_local] $scheme://$host$request_uri $status');
    expect(entryOf(parse, '[21/Nov/2026:08:15:30 +0100] https://shop.example.com/cart?to=http://x.example/ 200')).toMatchObject({ host: 'shop.example.com', url: '/cart?to=http://x.example/', statusCode: 200 });
  });

  it('IPv6 clients, also beside $remote_port', () => {
    for (const address of ['2001:db8::1', '::1', '::ffff:192.0.2.1', '2001:db8:85a3:8d3:1319:8a2e:370:7348', 'fe80::1ff:fe23:4567:890a']) {
      expect(entryOf(combined, `${address} - - [21/Nov/2026:08:15:30 +0100] "GET / HTTP/1.1" 200 5 "-" "-"`).ipAddress).toBe(address);
    }
    const port = compileAccessFormat('$remote_addr:$remote_port [$time_local] $status');
    expect(entryOf(port, '2001:db8::1:51234 [21/Nov/2026:08:15:30 +0100] 200').ipAddress).toBe('2001:db8::1');
    expect(entryOf(port, '203.0.113.7:443 [21/Nov/2026:08:15:30 +0100] 200').ipAddress).toBe('203.0.113.7');
  });

  it('$realip_remote_addr when the format has no $remote_addr', () => {
    const parse = compileAccessFormat('$realip_remote_addr [$time_local]');
    expect(entryOf(parse, '198.51.100.4 [21/Nov/2026:08:15:30 +0100]').ipAddress).toBe('198.51.100.4');
  });

  it('$request_length, $connection, $connection_requests, $pipe, $gzip_ratio, $remote_user', () => {
    const parse = compileAccessFormat('$remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent $request_length $connection $connection_requests $pipe $gzip_ratio $bytes_sent');
    for (const tail of ['812 1234567 3 p 3.25 5300', '0 1 1 . - 5300']) {
      const line = `203.0.113.7 - bob [21/Nov/2026:08:15:30 +0100] "GET / HTTP/1.1" 200 5000 ${tail}`;
      expect(entryOf(parse, line)).toMatchObject({ statusCode: 200, responseSize: 5000 });
    }
    expect(reasonOf(parse, '203.0.113.7 - bob [21/Nov/2026:08:15:30 +0100] "GET / HTTP/1.1" 200 5000 812 1 1 x - 5300')).toMatch(/^\$pipe at column \d+: expected "p" or "."/);
  });

  it('$http_*, $cookie_*, $arg_* and $sent_http_* are matched generically, quoted values with spaces and escapes', () => {
    const parse = compileAccessFormat('[$time_local] "$http_accept_language" "$cookie_session" "$arg_page" "$sent_http_content_type" "$http_user_agent"');
    const line = String.raw`[21/Nov/2026:08:15:30 +0100] "de-DE,de;q=0.9, en;q=0.8" "a b \x22c\x22" "-" "text/html; charset=utf-8" "UA"`;
    expect(entryOf(parse, line).userAgent).toBe('UA');
  });

  it('unknown variables are matched and skipped', () => {
    const parse = compileAccessFormat('$remote_addr $my_custom_var [$time_local] "$geoip_country_name" $ssl_protocol/$ssl_cipher $status');
    expect(entryOf(parse, '203.0.113.7 xyz [21/Nov/2026:08:15:30 +0100] "United States" TLSv1.3/TLS_AES_256_GCM_SHA384 200')).toMatchObject({ ipAddress: '203.0.113.7', statusCode: 200 });
  });

  it('names end at the first character outside [A-Za-z0-9_]; ${name} delimits explicitly; names are case-insensitive', () => {
    const parse = compileAccessFormat('[$time_local] $status.$body_bytes_sent-${request_time}s $REMOTE_ADDR');
    expect(entryOf(parse, '[21/Nov/2026:08:15:30 +0100] 200.512-0.042s 203.0.113.7')).toMatchObject({ statusCode: 200, responseSize: 512, responseTime: 42, ipAddress: '203.0.113.7' });
  });

  it('a variable used twice: the first occurrence is read', () => {
    const parse = compileAccessFormat('"$request" $status "$request" $host $host [$time_local] $body_bytes_sent');
    expect(entryOf(parse, '"GET /a HTTP/1.1" 200 "GET /a HTTP/1.1" a.example b.example [21/Nov/2026:08:15:30 +0100] 7')).toMatchObject({
      url: '/a', statusCode: 200, host: 'a.example', timestamp: T, responseSize: 7,
    });
  });

});

describe('unquoted free text: runs to the literal after it wherever the rest of its stretch pins it', () => {
  /** A combined line whose $remote_user nginx logged as `user`, the rest fixed. */
  const withUser = (user: string) => `203.0.113.7 - ${user} [21/Nov/2026:08:15:30 +0100] "GET /a b HTTP/1.1" 200 5 "-" "curl/8"`;
  const fixed: AccessEntry = { timestamp: T, ipAddress: '203.0.113.7', method: 'GET', url: '/a b', protocol: 'HTTP/1.1', statusCode: 200, responseSize: 5, referrer: '', userAgent: 'curl/8', responseTime: null, host: null };

  it('$remote_user in combined and main: spaces, brackets, escaped quotes, fake times, 8 KiB', () => {
    const main = compileAccessFormat('main');
    const users = [
      'alice', '-', 'bob smith', ' ', '  ', '[', ']', ' [ ', '] [', 'a ] [ [', 'x [21/Nov/2026:08:15:30 +0100] y',
      String.raw`a [b] \x22c\x22`, String.raw`\x22 [21/Nov/2026:08:15:30 +0100] \x22GET / HTTP/1.1\x22 200 5 \x22-\x22 \x22-\x22`,
      String.raw`\x5C [`, 'caf\\xC3\\xA9 [\\xE6\\x97\\xA5]', `${' ['.repeat(2048)}u${'] '.repeat(2048)}`,
    ];
    for (const user of users) {
      expect(combined(withUser(user)), user).toEqual({ ok: true, entry: fixed });
      expect(main(`${withUser(user)} "198.51.100.2, 10.0.0.1"`), user).toEqual({ ok: true, entry: fixed });
    }
  });

  it('any format: the last free variable of a stretch, pinned by what follows it up to the next quote or the end', () => {
    const vhost = compileAccessFormat('$host $remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent "$http_referer" "$http_user_agent" $request_time');
    expect(entryOf(vhost, 'shop.example.com 203.0.113.7 - bob smith [21/Nov/2026:08:15:30 +0100] "GET / HTTP/1.1" 200 5 "-" "-" 0.002')).toMatchObject({ host: 'shop.example.com', ipAddress: '203.0.113.7', responseTime: 2 });
    // Typed values between the free one and the literal that ends the stretch.
    const timed = compileAccessFormat('$remote_addr - $remote_user $request_time $status [$time_local] "$request"');
    expect(entryOf(timed, '203.0.113.7 - 1 2 - 0.5 404 0.250 200 [21/Nov/2026:08:15:30 +0100] "GET / HTTP/1.1"')).toMatchObject({ responseTime: 250, statusCode: 200, timestamp: T });
    // An unquoted $request with a space in its target, ended by typed values.
    const request = compileAccessFormat('[$time_local] $request $status $body_bytes_sent');
    expect(entryOf(request, '[21/Nov/2026:08:15:30 +0100] GET /a b [c] HTTP/1.1 200 5')).toMatchObject({ method: 'GET', url: '/a b [c]', protocol: 'HTTP/1.1', statusCode: 200, responseSize: 5 });
    // Without a literal between the free value and the typed one after it.
    const glued = compileAccessFormat('[$time_local] "$request" $http_x_user$status');
    expect(entryOf(glued, '[21/Nov/2026:08:15:30 +0100] "GET / HTTP/1.1" a b 1 200')).toMatchObject({ statusCode: 200 });
    // Between quotes, with typed values after it.
    const quoted = compileAccessFormat('[$time_local] "$http_referer $status"');
    expect(entryOf(quoted, '[21/Nov/2026:08:15:30 +0100] "https://a.example/x y 200 404"')).toMatchObject({ referrer: 'https://a.example/x y 200', statusCode: 404 });
  });

  it('two free values between the same two quotes: only the last runs past a space (the line cannot say more)', () => {
    const parse = compileAccessFormat('[$time_local] $http_referer $http_user_agent $status');
    expect(entryOf(parse, '[21/Nov/2026:08:15:30 +0100] https://a.example/ b c d 200')).toMatchObject({ referrer: 'https://a.example/', userAgent: 'b c d', statusCode: 200 });
  });

  it('a line that fits neither way names what is wrong, past the free value', () => {
    expect(reasonOf(combined, '203.0.113.7 - bob smith [21/Nov/2026:08:15:30 +0100] "GET / HTTP/1.1" 2x0 5 "-" "-"')).toBe(
      '$status at column 71: expected a 3-digit status, found "2x0 5 \\"-\\" \\"-\\""',
    );
    expect(reasonOf(combined, '203.0.113.7 - bob smith [yesterday] "GET / HTTP/1.1" 200 5 "-" "-"')).toBe(
      '$time_local at column 26: expected a time like 21/Nov/2026:08:15:30 +0100, found "yesterday] \\"GET / HTTP/1.1\\" 200 5 \\"-\\" \\"-"…',
    );
    expect(reasonOf(combined, '203.0.113.7 - bob smith [21/Nov/2026:08:15:30 +0100]x "GET / HTTP/1.1" 200 5 "-" "-"')).toBe(
      'expected "] " after $time_local at column 52, found "]x \\"GET / HTTP/1.1\\" 200 5 \\"-\\" \\"-\\""',
    );
    expect(reasonOf(combined, '203.0.113.7 - bob smith "GET / HTTP/1.1" 200 5 "-" "-"')).toBe(
      'expected " [" after $remote_user at column 15, found "bob smith \\"GET / HTTP/1.1\\" 200 5 \\"-\\" \\"-\\"" (nowhere before column 25)',
    );
  });

  /*
   * A hostile value must cost no more than its length. Each parse of a 64 KiB line (the longest a
   * file line may be) is timed against the first expression reading a plain line of that length
   * (a linear scan of it), best of several interleaved runs. The bound leaves a wide margin both
   * ways: the hostile lines take under 100× the scan here, while trying every place a value could
   * end (quadratic) takes more than 10,000× (about a second) on the format with a list.
   */
  it('a 64 KiB hostile line parses, or is rejected, in time linear in its length', () => {
    const N = 64 * 1024 - 200;
    const fill = (unit: string) => unit.repeat(Math.ceil(N / unit.length)).slice(0, N);
    const time = '21/Nov/2026:08:15:30 +0100';
    const listed = compileAccessFormat('$remote_addr - $remote_user $upstream_response_time [$time_local] "$request" $status');
    const scan = { parse: combined, line: `203.0.113.7 - - [${time}] "GET / HTTP/1.1" 200 5 "-" "${fill('Mozilla ')}"`, ok: true };
    const hostile = [
      { parse: combined, line: withUser(fill(` [${time}] \\x22 [`)), ok: true },
      { parse: combined, line: withUser(fill(' ')), ok: true },
      { parse: combined, line: `203.0.113.7 - ${fill(` [${time}] \\x22 [`)} [${time}]x "GET / HTTP/1.1" 200 5 "-" "-"`, ok: false },
      { parse: listed, line: `203.0.113.7 - ${fill('1, 1 : ')} 0.001, 0.002 [${time}] "GET / HTTP/1.1" 200`, ok: true },
      { parse: listed, line: `203.0.113.7 - ${fill('1, 1 : ')} 0.001, 0.002 [${time}x "GET / HTTP/1.1" 200`, ok: false },
    ];
    const best = (c: typeof scan) => {
      let ms = Infinity;
      for (let i = 0; i < 7; i++) {
        const started = performance.now();
        const result = c.parse(c.line);
        ms = Math.min(ms, performance.now() - started);
        expect(result.ok, c.line.slice(0, 80)).toBe(c.ok);
      }
      return ms;
    };
    for (const c of hostile) {
      const [scanMs, hostileMs] = [best(scan), best(c)];
      expect(hostileMs, `${c.line.slice(0, 60)}…: ${hostileMs.toFixed(3)} ms against a ${scanMs.toFixed(3)} ms scan`).toBeLessThan(Math.max(scanMs, 0.01) * 1000);
    }
  });
});

describe('escaped bytes (escape=default)', () => {
  const agent = (logged: string) => entryOf(combined, withAgent(logged)).userAgent;

  it('unescapes quotes, backslashes and control bytes', () => {
    expect(agent(String.raw`say \x22hi\x22`)).toBe('say "hi"');
    expect(agent(String.raw`C:\x5CWindows\x5C`)).toBe('C:\\Windows\\');
    expect(agent(String.raw`tab\x09nl\x0Acr\x0Dnul\x00del\x7F`)).toBe('tab\tnl\ncr\rnul\u0000del\u007f');
    expect(agent(String.raw`lower \x5c hex`)).toBe('lower \\ hex');
  });

  it('escaped text stays text: \\x5Cx41 is the four characters \\x41', () => {
    expect(agent(String.raw`\x5Cx41`)).toBe(String.raw`\x41`);
  });

  it('decodes escaped bytes that form UTF-8', () => {
    expect(agent(String.raw`caf\xC3\xA9`)).toBe('café');
    expect(agent(String.raw`\xF0\x9F\x98\x80 \xE2\x80\x9Cquoted\xE2\x80\x9D`)).toBe('😀 “quoted”');
    expect(agent(String.raw`\xEF\xBB\xBFbom`)).toBe('\ufeffbom');
  });

  it('keeps a value whose bytes are not UTF-8 exactly as logged', () => {
    for (const logged of [String.raw`caf\xE9`, String.raw`\xE2\x80`, String.raw`\xC0\xAF overlong`, String.raw`\xED\xA0\x80 surrogate`, String.raw`\xFF\x22`]) {
      expect(agent(logged)).toBe(logged);
    }
  });

  it('- in referrer and user agent is ""', () => {
    expect(entryOf(combined, '203.0.113.7 - - [21/Nov/2026:08:15:30 +0100] "GET / HTTP/1.1" 200 5 "-" "-"')).toMatchObject({ referrer: '', userAgent: '' });
    expect(entryOf(combined, '203.0.113.7 - - [21/Nov/2026:08:15:30 +0100] "GET / HTTP/1.1" 200 5 "" ""')).toMatchObject({ referrer: '', userAgent: '' });
  });

  it('hostile content round-trips: formula-looking agents, quotes, backslashes, escapes in the referrer', () => {
    expect(agent(String.raw`=cmd|' /C calc'!A0`)).toBe("=cmd|' /C calc'!A0");
    expect(agent(String.raw`+SUM(1;2) @x -1 \x09tab`)).toBe('+SUM(1;2) @x -1 \ttab');
    const line = String.raw`203.0.113.7 - - [21/Nov/2026:08:15:30 +0100] "GET /%22%5C HTTP/1.1" 200 5 "https://evil.example/\x22);DROP TABLE x;--\x5C" "<script>alert(1)</script>"`;
    expect(entryOf(combined, line)).toMatchObject({ url: '/%22%5C', referrer: 'https://evil.example/");DROP TABLE x;--\\', userAgent: '<script>alert(1)</script>' });
  });
});

describe('format syntax', () => {
  it('applies nginx.conf escapes, so a format copied from a double-quoted string works', () => {
    const parse = compileAccessFormat(String.raw`$remote_addr [$time_local] \"$request\" $status`);
    expect(entryOf(parse, '203.0.113.7 [21/Nov/2026:08:15:30 +0100] "GET / HTTP/1.1" 200')).toMatchObject({ url: '/', statusCode: 200 });
    const tabs = compileAccessFormat(String.raw`$remote_addr\t[$time_local]\t\$status \\$body_bytes_sent`);
    expect(entryOf(tabs, '203.0.113.7\t[21/Nov/2026:08:15:30 +0100]\t\\200 \\512')).toMatchObject({ statusCode: 200, responseSize: 512 });
  });

  it('literals with regular-expression characters match literally', () => {
    const parse = compileAccessFormat('($remote_addr) {$status} *[$time_local]+ ^$body_bytes_sent\\ |a.b?');
    expect(entryOf(parse, '(203.0.113.7) {200} *[21/Nov/2026:08:15:30 +0100]+ ^5\\ |a.b?')).toMatchObject({ statusCode: 200, responseSize: 5 });
    expect(parse('(203.0.113.7) {200} *[21/Nov/2026:08:15:30 +0100]+ ^5\\ |axb?').ok).toBe(false);
  });

  it('throws on formats nginx refuses and on formats without a time variable', () => {
    expect(() => compileAccessFormat('$remote_addr $ [$time_local]')).toThrow('log format: "$" without a variable name at column 14');
    expect(() => compileAccessFormat('${status [$time_local]')).toThrow('log format: the closing bracket of the variable at column 1 is missing');
    expect(() => compileAccessFormat('$remote_addr "$request" $status')).toThrow('log format: no time variable ($time_local, $time_iso8601 or $msec)');
  });
});

describe('malformed lines are rejected with a useful reason', () => {
  it('names the field and column where the line stops matching', () => {
    expect(reasonOf(combined, '')).toBe('empty line');
    expect(reasonOf(combined, '203.0.113.7 - - [21/Nov/2026:08:15:30 +0100] "GET / HTTP/1.1" 2x0 5 "-" "-"')).toBe(
      '$status at column 63: expected a 3-digit status, found "2x0 5 \\"-\\" \\"-\\""',
    );
    expect(reasonOf(combined, '203.0.113.7 - - [yesterday] "GET / HTTP/1.1" 200 5 "-" "-"')).toBe(
      '$time_local at column 18: expected a time like 21/Nov/2026:08:15:30 +0100, found "yesterday] \\"GET / HTTP/1.1\\" 200 5 \\"-\\" \\"-"…',
    );
    expect(reasonOf(combined, '203.0.113.7 - - [21/Nov/2026:08:15:30 +0100] "GET / HTTP/1.1" 200 5 "-" "Mozilla')).toBe(
      'expected "\\"" after $http_user_agent at column 81, found the end of the line',
    );
    expect(reasonOf(combined, '203.0.113.7 - - [21/Nov/2026:08:15:30 +0100] "GET / HTTP/1.1" 200 5 "-" "-" extra')).toBe(
      'unexpected text after the last field at column 76: " extra"',
    );
    expect(reasonOf(combined, '{"time":"2026-11-21T08:15:30+01:00","status":200}')).toMatch(/^expected " - " after \$remote_addr at column 2, found "\\"time/);
  });

  it('a raw quote inside a value is not nginx output and does not match', () => {
    expect(combined(withAgent('say "hi"')).ok).toBe(false);
  });
});

// ---------------------------------------------------------------------------------------------
// Property: any format built from nginx's variables, any values, rendered the way nginx renders
// them, parses back to those values.

/** nginx's escape=default, written independently of the parser: bytes, not characters. */
function nginxEscape(value: string): string {
  let out = '';
  for (const byte of Buffer.from(value, 'utf8')) {
    out += byte < 0x20 || byte === 0x22 || byte === 0x5c || byte >= 0x7f ? `\\x${byte.toString(16).toUpperCase().padStart(2, '0')}` : String.fromCharCode(byte);
  }
  return out;
}

/** A found variable is its escaped value; a variable without a value (null) is `-`. */
const logged = (value: string | null) => (value === null ? '-' : nginxEscape(value));
const pad = (n: number, width = 2) => String(n).padStart(width, '0');
const MONTH_NAMES = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'];

function timeLocal(ms: number, offset: number): string {
  const d = new Date(ms + offset * 60_000);
  const sign = offset < 0 ? '-' : '+';
  return `${pad(d.getUTCDate())}/${MONTH_NAMES[d.getUTCMonth()]}/${d.getUTCFullYear()}:${pad(d.getUTCHours())}:${pad(d.getUTCMinutes())}:${pad(d.getUTCSeconds())} ${sign}${pad(Math.floor(Math.abs(offset) / 60))}${pad(Math.abs(offset) % 60)}`;
}

function timeIso(ms: number, offset: number): string {
  const d = new Date(ms + offset * 60_000);
  const sign = offset < 0 ? '-' : '+';
  return `${d.getUTCFullYear()}-${pad(d.getUTCMonth() + 1)}-${pad(d.getUTCDate())}T${pad(d.getUTCHours())}:${pad(d.getUTCMinutes())}:${pad(d.getUTCSeconds())}${sign}${pad(Math.floor(Math.abs(offset) / 60))}:${pad(Math.abs(offset) % 60)}`;
}

const seconds = (ms: number) => `${Math.floor(ms / 1000)}.${pad(ms % 1000, 3)}`;

/** Strings that make trouble: any code point, any byte-range character, nginx's own escape syntax, formulas. */
const hostile = fc.oneof(
  fc.string({ unit: 'binary', maxLength: 40 }),
  fc.string({ unit: 'binary-ascii', maxLength: 40 }),
  fc.string({ unit: fc.constantFrom('"', '\\', '\\x41', '\\x', 'x', ' ', '-', '=', '\t', '\u0000', '\u007f', 'é', '😀', '\ufeff', ' HTTP/1.1'), maxLength: 12 }),
  fc.constantFrom("=cmd|' /C calc'!A0", '-', '', ' ', '"', '\\', '\\x22', '%22'),
);

const world = fc.record({
  ip: fc.oneof(fc.ipV4(), fc.ipV6()),
  ms: fc.integer({ min: Date.UTC(1990, 0, 1), max: Date.UTC(2099, 11, 31) }),
  offset: fc.constantFrom(0, 60, 120, -300, -480, 330, 345, 525, -210, 765, 840, -720),
  method: fc.constantFrom('GET', 'POST', 'HEAD', 'PUT', 'DELETE', 'OPTIONS', 'PATCH', 'PROPFIND', 'M-SEARCH'),
  url: hostile,
  protocol: fc.constantFrom('HTTP/1.0', 'HTTP/1.1', 'HTTP/2.0', 'HTTP/3.0', null),
  path: hostile,
  args: fc.option(hostile, { nil: null }),
  status: fc.integer({ min: 0, max: 999 }),
  size: fc.nat(),
  referrer: fc.option(hostile, { nil: null }),
  userAgent: fc.option(hostile, { nil: null }),
  requestTime: fc.option(fc.integer({ min: 0, max: 3_600_000 }), { nil: null }),
  host: fc.domain(),
  serverName: fc.domain(),
  user: fc.option(hostile, { nil: null }),
  text: hostile,
  count: fc.nat(),
  upstreamTimes: fc.array(fc.option(fc.integer({ min: 0, max: 60_000 }), { nil: null }), { minLength: 1, maxLength: 4 }),
  upstreamSeparators: fc.array(fc.constantFrom(', ', ' : '), { minLength: 3, maxLength: 3 }),
  port: fc.integer({ min: 1, max: 65535 }),
  pipe: fc.constantFrom('p', '.'),
  gzip: fc.option(fc.integer({ min: 100, max: 2000 }), { nil: null }),
});
type World = typeof world extends fc.Arbitrary<infer W> ? W : never;

interface Variable {
  name: string;
  /** Free text must be quoted in a format (see access-format.ts). */
  quoted: boolean;
  render: (w: World) => string;
}

const upstreamList = (w: World, item: (ms: number) => string) =>
  w.upstreamTimes.map((ms, i) => (ms === null ? '-' : item(ms)) + (i < w.upstreamTimes.length - 1 ? w.upstreamSeparators[i] : '')).join('');

const TIME_VARIABLES: Variable[] = [
  { name: 'time_local', quoted: false, render: (w) => timeLocal(w.ms, w.offset) },
  { name: 'time_iso8601', quoted: false, render: (w) => timeIso(w.ms, w.offset) },
  { name: 'msec', quoted: false, render: (w) => seconds(w.ms) },
];

const OTHER_VARIABLES: Variable[] = [
  { name: 'remote_addr', quoted: false, render: (w) => w.ip },
  { name: 'remote_port', quoted: false, render: (w) => String(w.port) },
  { name: 'remote_user', quoted: true, render: (w) => logged(w.user) },
  // HTTP/0.9 has no protocol; its target cannot then end like one.
  { name: 'request', quoted: true, render: (w) => `${w.method} ${nginxEscape(w.url)}${w.protocol === null ? '' : ` ${w.protocol}`}` },
  { name: 'request_method', quoted: false, render: (w) => w.method },
  { name: 'request_uri', quoted: true, render: (w) => nginxEscape(w.url) },
  { name: 'uri', quoted: true, render: (w) => nginxEscape(w.path) },
  { name: 'args', quoted: true, render: (w) => logged(w.args) },
  { name: 'server_protocol', quoted: false, render: (w) => w.protocol ?? '' },
  { name: 'status', quoted: false, render: (w) => pad(w.status, 3) },
  { name: 'body_bytes_sent', quoted: false, render: (w) => String(w.size) },
  { name: 'bytes_sent', quoted: false, render: (w) => String(w.size + 250) },
  { name: 'http_referer', quoted: true, render: (w) => logged(w.referrer) },
  { name: 'http_user_agent', quoted: true, render: (w) => logged(w.userAgent) },
  { name: 'request_time', quoted: false, render: (w) => (w.requestTime === null ? '-' : seconds(w.requestTime)) },
  { name: 'host', quoted: false, render: (w) => w.host },
  { name: 'server_name', quoted: false, render: (w) => w.serverName },
  { name: 'http_x_forwarded_for', quoted: true, render: (w) => nginxEscape(w.text) },
  { name: 'cookie_session', quoted: true, render: (w) => nginxEscape(w.text) },
  { name: 'arg_page', quoted: true, render: (w) => logged(w.args) },
  { name: 'sent_http_content_type', quoted: true, render: (w) => nginxEscape(w.text) },
  { name: 'upstream_http_x_cache', quoted: true, render: (w) => nginxEscape(w.text) },
  { name: 'custom_unknown_variable', quoted: true, render: (w) => nginxEscape(w.text) },
  { name: 'upstream_response_time', quoted: false, render: (w) => upstreamList(w, seconds) },
  { name: 'upstream_connect_time', quoted: false, render: (w) => upstreamList(w, seconds) },
  { name: 'upstream_status', quoted: false, render: (w) => upstreamList(w, (ms) => String(ms % 600)) },
  { name: 'upstream_addr', quoted: false, render: (w) => upstreamList(w, (ms) => `10.0.${ms % 256}.1:8080`) },
  { name: 'request_length', quoted: false, render: (w) => String(w.count) },
  { name: 'connection', quoted: false, render: (w) => String(w.count) },
  { name: 'pipe', quoted: false, render: (w) => w.pipe },
  { name: 'gzip_ratio', quoted: false, render: (w) => (w.gzip === null ? '-' : (w.gzip / 100).toFixed(2)) },
];

/** What the parser must give for `w` under a format holding the variables `names` (precedence as documented). */
function expected(w: World, names: Set<string>): AccessEntry {
  const has = (name: string) => names.has(name);
  const fromRequest = has('request');
  const path = w.path === '-' ? '' : w.path;
  const args = has('args') && w.args !== null && w.args !== '-' ? w.args : '';
  const absent = (value: string | null) => (value === null || value === '-' ? '' : value);
  return {
    timestamp: has('msec') ? w.ms : Math.floor(w.ms / 1000) * 1000,
    ipAddress: has('remote_addr') ? w.ip : '',
    method: has('request_method') || fromRequest ? w.method : '',
    // A `-` in $request_uri reads as "no value" unless $request holds the line it came from.
    url: has('request_uri') ? (fromRequest && w.url === '-' ? w.url : absent(w.url)) : fromRequest ? w.url : has('uri') ? (args === '' ? path : `${path}?${args}`) : '',
    protocol: has('server_protocol') || fromRequest ? (w.protocol ?? '') : '',
    statusCode: has('status') ? w.status : 0,
    responseSize: has('body_bytes_sent') ? w.size : has('bytes_sent') ? w.size + 250 : 0,
    referrer: has('http_referer') ? absent(w.referrer) : '',
    userAgent: has('http_user_agent') ? absent(w.userAgent) : '',
    responseTime: has('request_time') ? w.requestTime : null,
    host: has('host') ? w.host : has('server_name') ? w.serverName : null,
  };
}

/** Variables nginx writes in an exact shape, and addresses: every other one is free text (access-format.ts). */
const SHAPED = new Set([...TIME_VARIABLES.map((v) => v.name), 'remote_addr', 'remote_port', 'status', 'body_bytes_sent', 'bytes_sent', 'request_time', 'upstream_response_time', 'upstream_connect_time', 'upstream_status', 'upstream_addr', 'request_length', 'connection', 'pipe', 'gzip_ratio']);
/** Shapes holding spaces anywhere: lists of upstream values. */
const LISTS = new Set(['upstream_response_time', 'upstream_connect_time', 'upstream_status', 'upstream_addr']);

// Separators between fields: nginx formats separate unquoted fields by spaces.
const SEPARATORS = [' ', '  ', ' - ', ' | ', ' ; ', ' "x" '];

const format = fc.record({
  time: fc.constantFrom(...TIME_VARIABLES),
  others: fc.shuffledSubarray(OTHER_VARIABLES, { minLength: 0 }),
  position: fc.nat(),
  braces: fc.array(fc.boolean(), { minLength: 40, maxLength: 40 }),
  brackets: fc.array(fc.boolean(), { minLength: 40, maxLength: 40 }),
  separators: fc.array(fc.constantFrom(...SEPARATORS), { minLength: 40, maxLength: 40 }),
  prefix: fc.constantFrom('', '[', 'log: '),
  suffix: fc.constantFrom('', ']', ' end'),
});

describe('property: generated formats and values round-trip', () => {
  it('a line rendered the way nginx renders it parses back to its values', () => {
    fc.assert(
      fc.property(format, world, (f, w) => {
        const variables = [...f.others];
        variables.splice(f.position % (variables.length + 1), 0, f.time);
        // HTTP/0.9's request line has no protocol, so its target must not end like one.
        fc.pre(w.protocol !== null || !variables.some((v) => v.name === 'request') || !/ HTTP\//.test(nginxEscape(w.url)));
        let formatString = '';
        let line = '';
        variables.forEach((v, i) => {
          const separator = i === 0 ? f.prefix : f.separators[i]!;
          const [open, close] = v.quoted ? ['"', '"'] : f.brackets[i] ? ['[', ']'] : ['', ''];
          formatString += separator + open + (f.braces[i] ? `\${${v.name}}` : `$${v.name}`) + close;
          line += separator + open + v.render(w) + close;
        });
        formatString += f.suffix;
        line += f.suffix;
        const result = compileAccessFormat(formatString)(line);
        expect(result, `format ${formatString}\nline   ${line}`).toEqual({ ok: true, entry: expected(w, new Set(variables.map((v) => v.name))) });
      }),
      { numRuns: 1000 },
    );
  });

  it('free text written unquoted, as the last free variable between two quotes, parses back to its values', () => {
    fc.assert(
      fc.property(format, world, fc.array(fc.boolean(), { minLength: 40, maxLength: 40 }), (f, w, unquote) => {
        const variables = [...f.others];
        variables.splice(f.position % (variables.length + 1), 0, f.time);
        fc.pre(w.protocol !== null || !variables.some((v) => v.name === 'request') || !/ HTTP\//.test(nginxEscape(w.url)));
        // The variables the table quotes (their values are hostile text), some left unquoted.
        const quoted = variables.map((v, i) => v.quoted && !unquote[i]);
        // Which stretch (between two quotes of the line) each variable is in.
        const stretchOf = () => {
          let quotes = 0;
          return variables.map((_, i) => {
            if (i > 0 && f.separators[i]!.includes('"')) quotes += 2;
            const id = quotes + (quoted[i] ? 1 : 0);
            if (quoted[i]) quotes += 2;
            return id;
          });
        };
        // An unquoted hostile value needs the rest of its stretch to pin it: it must be the last free
        // variable there, and no list (whose items are separated by spaces) may share the stretch.
        for (let changed = true; changed; ) {
          changed = false;
          const stretch = stretchOf();
          variables.forEach((v, i) => {
            if (!v.quoted || quoted[i]) return;
            const mates = variables.filter((_, j) => j !== i && stretch[j] === stretch[i]);
            const freeAfter = variables.some((u, j) => j > i && stretch[j] === stretch[i] && !SHAPED.has(u.name));
            if (freeAfter || mates.some((u) => LISTS.has(u.name))) [quoted[i], changed] = [true, true];
          });
        }
        let formatString = '';
        let line = '';
        variables.forEach((v, i) => {
          const separator = i === 0 ? f.prefix : f.separators[i]!;
          const [open, close] = quoted[i] ? ['"', '"'] : f.brackets[i] ? ['[', ']'] : ['', ''];
          formatString += separator + open + (f.braces[i] ? `\${${v.name}}` : `$${v.name}`) + close;
          line += separator + open + v.render(w) + close;
        });
        formatString += f.suffix;
        line += f.suffix;
        const result = compileAccessFormat(formatString)(line);
        expect(result, `format ${formatString}\nline   ${line}`).toEqual({ ok: true, entry: expected(w, new Set(variables.map((v) => v.name))) });
      }),
      { numRuns: 1000 },
    );
  });

  it('unescaping gives the bytes back as text when they are UTF-8, else the value as logged', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 40 }), (bytes) => {
        let logged = '';
        for (const byte of bytes) logged += byte < 0x20 || byte === 0x22 || byte === 0x5c || byte >= 0x7f ? `\\x${byte.toString(16).toUpperCase().padStart(2, '0')}` : String.fromCharCode(byte);
        let text: string | null;
        try {
          text = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true }).decode(bytes);
        } catch {
          text = null;
        }
        expect(unescapeNginx(logged)).toBe(text ?? logged);
      }),
      { numRuns: 2000 },
    );
  });

  it('any text as a line: never throws, a rejection always has a reason', () => {
    fc.assert(
      fc.property(fc.string({ unit: 'binary', maxLength: 300 }), (line) => {
        const result = combined(line);
        if (!result.ok) expect(result.reason.length).toBeGreaterThan(0);
      }),
      { numRuns: 2000 },
    );
  });
});
