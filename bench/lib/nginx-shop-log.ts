/**
 * A real nginx access log of a shop: nginx, started here, serves static files itself and passes
 * pages and the API to an upstream (a second server of the same nginx, so that
 * `$upstream_response_time` is real), under autocannon sending the shop's traffic (the requests
 * of bench/lib/access-log.ts: clients by X-Forwarded-For through the realip module, agents,
 * referrers, conditional requests, probes). What nginx writes is what bench/ingest imports when
 * BENCH_SOURCE=nginx: statuses, sizes and times nginx chose, not a generator.
 *
 * The log is kept in `cacheDir` under its line count and reused while its nginx.conf is the same.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import autocannon from 'autocannon';
import { findNginx, nginxConf } from '../../test/support/nginx.js';
import { freePort } from '../../test/support/ports.js';
import { shopTraffic } from './access-log.js';

/** The shop's log_format: combined with the request's and the upstream's time. */
export const SHOP_FORMAT =
  '$remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent "$http_referer" "$http_user_agent" $request_time $upstream_response_time';

/** The files nginx serves itself, with their sizes in bytes. */
const STATIC_FILES: Record<string, number> = {
  'static/js/app.js': 184_311,
  'static/js/vendor.js': 412_907,
  'static/css/main.css': 61_544,
  'images/800w.webp': 58_120,
  'images/400w.webp': 17_873,
  'fonts/inter-var.woff2': 96_412,
  'favicon.ico': 15_086,
  'robots.txt': 214,
  'sitemap.xml': 48_211,
};

function shopConf(work: string, port: number, appPort: number): string {
  return nginxConf(work, {
    errorLog: `${work}/error.log warn`,
    connections: 1024,
    http: `  log_format shop '${SHOP_FORMAT}';
  access_log off;
  upstream app { server 127.0.0.1:${appPort}; keepalive 32; }
  # One request in about 200 fails upstream, as an application's do.
  split_clients "\${request_id}" $app_fails { 0.25% 500; 0.25% 502; 0.1% 503; * ""; }
  server {
    listen 127.0.0.1:${port};
    server_name shop.example.com;
    root ${work}/html;
    set_real_ip_from 127.0.0.1;
    real_ip_header X-Forwarded-For;
    access_log ${work}/access.log shop;
    location ~ ^/static/(js|css)/(\\w+)\\.[0-9a-f]+\\.(js|css)$ { expires 1y; try_files /static/$1/$2.$3 =404; }
    location ~ ^/images/products/\\d+-(\\d+w)\\.webp$ { expires 30d; try_files /images/$1.webp =404; }
    location ~ \\.php$ { return 404; }
    location ~ /\\. { return 404; }
    location = /robots.txt {}
    location = /sitemap.xml {}
    location = /favicon.ico {}
    location /fonts/ {}
    location / {
      proxy_pass http://app;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host $host;
    }
  }
  server {
    listen 127.0.0.1:${appPort};
    access_log off;
    default_type text/html;
    location / {
      if ($app_fails = 500) { return 500; }
      if ($app_fails = 502) { return 502; }
      if ($app_fails = 503) { return 503; }
      return 200 "<!doctype html><html><head><title>$uri</title></head><body><main data-args=\\"$args\\">${'<p>Trail running shoes, tents and winter jackets.</p>'.repeat(40)}</main></body></html>";
    }
    location = /checkout { return 302 /account/login?next=/checkout; }
    location = /account/orders { return 403; }
    location /api/ {
      default_type application/json;
      if ($app_fails = 502) { return 502; }
      if ($request_method = POST) { return 201 '{"id":"$request_id"}'; }
      if ($request_method = DELETE) { return 204; }
      if ($request_method = OPTIONS) { return 204; }
      return 200 '{"path":"$uri","args":"$args","items":[{"sku":1042,"price":89.9},{"sku":2210,"price":129}]}';
    }
  }
`,
  });
}

/** nginx, or an Error saying how to install it. */
function nginxBinary(): string {
  const binary = findNginx();
  if (binary === null) throw new Error('nginx is not installed: apt-get install -y nginx');
  return binary;
}

async function listening(port: number, child: ChildProcess, stderr: () => string): Promise<void> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`nginx exited: ${stderr()}`);
    const up = await new Promise<boolean>((resolve) => {
      const s = net.connect(port, '127.0.0.1');
      s.once('connect', () => (s.destroy(), resolve(true)));
      s.once('error', () => resolve(false));
    });
    if (up) return;
    if (Date.now() > deadline) throw new Error(`nginx not listening on ${port} after 10 s: ${stderr()}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/**
 * A shop's visitors run many builds of the same browsers: the last two parts of a four-part
 * version (Chrome/131.0.0.0 → Chrome/131.0.6778.86) are one of 200 builds, the older ones rarer,
 * so that a log of 1.5M requests holds a few thousand distinct agents, as a real one does, not the
 * two dozen it draws from.
 */
function variedAgents(rnd: () => number): (agent: string) => string {
  return (agent) =>
    agent.replace(/\/(\d+)\.(\d+)\.\d+\.\d+/g, (_, major: string, minor: string) => {
      const build = Math.floor(rnd() ** 3 * 200);
      return `/${major}.${minor}.${6778 - 7 * Math.floor(build / 5)}.${85 - 11 * (build % 5)}`;
    });
}

/** The requests autocannon sends, drawn from the shop's traffic; conditional requests for a share of the static files. */
function shopRequests(work: string): () => autocannon.Request {
  const { rnd, request, client } = shopTraffic(20261202);
  const varied = variedAgents(rnd);
  const modified = new Date(fs.statSync(path.join(work, 'html', 'favicon.ico')).mtimeMs).toUTCString();
  return () => {
    const { ip, url, ...drawn } = request();
    // autocannon's parser waits for a HEAD answer's body: HEAD goes as GET.
    const method = (drawn.method === 'HEAD' ? 'GET' : drawn.method) as autocannon.Request['method'];
    const { referrer, agent: drawnAgent, user } = client();
    const agent = varied(drawnAgent);
    const headers: Record<string, string> = { host: 'shop.example.com', 'x-forwarded-for': ip };
    if (referrer !== '-') headers.referer = referrer;
    if (agent !== '-') headers['user-agent'] = agent;
    if (user !== '-') headers.authorization = `Basic ${Buffer.from(`${user}:secret`).toString('base64')}`;
    if (!url.startsWith('/api') && rnd() < 0.15) headers['if-modified-since'] = modified;
    if (method === 'POST' || method === 'PUT') {
      headers['content-type'] = 'application/json';
      return { method, path: url, headers, body: '{"sku":1042,"quantity":1}' };
    }
    return { method, path: url, headers };
  };
}

export function countLines(file: string): number {
  const fd = fs.openSync(file, 'r');
  const buffer = Buffer.alloc(1 << 20);
  let lines = 0;
  try {
    for (let n; (n = fs.readSync(fd, buffer, 0, buffer.length, null)) > 0; ) for (let i = 0; i < n; i++) if (buffer[i] === 10) lines++;
  } finally {
    fs.closeSync(fd);
  }
  return lines;
}

/** Where the log of `lines` requests is kept: named by what makes it, nginx.conf and the requests sent. */
export function nginxShopLogPath(cacheDir: string, lines: number): string {
  const key = createHash('sha256').update(shopConf('W', 1, 2)).update(shopRequests.toString()).update(variedAgents.toString()).digest('hex').slice(0, 12);
  return path.join(cacheDir, `nginx-shop-${lines}-${key}.log`);
}

/**
 * The path of a real nginx log of `lines` requests (at least; nginx logs every request it
 * answered) in `cacheDir`, written now unless an earlier run left one from the same config.
 */
export async function nginxShopLog(cacheDir: string, lines: number, progress: (text: string) => void = () => {}): Promise<{ log: string; format: string; note: string }> {
  const work = path.join(cacheDir, 'nginx-shop');
  const log = nginxShopLogPath(cacheDir, lines);
  if (fs.existsSync(log)) return { log, format: SHOP_FORMAT, note: `real nginx output, ${countLines(log).toLocaleString('en-US')} requests, kept from an earlier run (${log})` };

  fs.rmSync(work, { recursive: true, force: true });
  for (const dir of ['html/static/js', 'html/static/css', 'html/images', 'html/fonts', 'tmp']) fs.mkdirSync(path.join(work, dir), { recursive: true });
  for (const [file, size] of Object.entries(STATIC_FILES)) fs.writeFileSync(path.join(work, 'html', file), Buffer.alloc(size, 0x61));
  // As root, nginx's worker runs as nobody: it must reach the document root and the log.
  fs.chmodSync(cacheDir, 0o755);
  for (const dir of [work, ...['html', 'html/static', 'html/static/js', 'html/static/css', 'html/images', 'html/fonts'].map((d) => path.join(work, d))]) fs.chmodSync(dir, 0o755);

  const [port, appPort] = [await freePort(), await freePort()];
  const conf = path.join(work, 'nginx.conf');
  fs.writeFileSync(conf, shopConf(work, port, appPort));
  const child = spawn(nginxBinary(), ['-p', work, '-c', conf, '-e', 'stderr'], { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
  const started = performance.now();
  try {
    await listening(port, child, () => stderr);
    const next = shopRequests(work);
    const timer = setInterval(() => progress(`nginx: ${countLines(path.join(work, 'access.log')).toLocaleString('en-US')} of ${lines.toLocaleString('en-US')} requests`), 10_000);
    const options: autocannon.Options = {
      url: `http://127.0.0.1:${port}`,
      connections: 32,
      pipelining: 4,
      amount: lines,
      timeout: 30,
      requests: [{ setupRequest: (req) => ({ ...req, ...next() }) }],
    };
    const result = await new Promise<autocannon.Result>((resolve, reject) => autocannon(options, (err, done) => (err ? reject(err as Error) : resolve(done)))).finally(() => clearInterval(timer));
    if (result.errors > 0 || result.timeouts > 0) throw new Error(`the load generator saw ${result.errors} errors and ${result.timeouts} timeouts`);
  } finally {
    const exited = new Promise((resolve) => child.once('exit', resolve));
    if (child.exitCode === null) child.kill('SIGQUIT'); // graceful: every answered request is logged
    await exited;
  }
  const written = countLines(path.join(work, 'access.log'));
  // autocannon stops once `lines` requests are sent, dropping the answers still in the pipelines
  // (0.4 % with 32 × 4): nginx logs what it answered, and every step reads that file.
  if (written < lines * 0.99) throw new Error(`nginx logged ${written} of ${lines} requests`);
  fs.renameSync(path.join(work, 'access.log'), log);
  const seconds = (performance.now() - started) / 1000;
  return { log, format: SHOP_FORMAT, note: `real nginx output (${spawnSync(nginxBinary(), ['-v'], { encoding: 'utf8' }).stderr.trim()}), ${written.toLocaleString('en-US')} requests written under autocannon in ${seconds.toFixed(0)} s` };
}
