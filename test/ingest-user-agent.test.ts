/**
 * User agent classes (ingest/transforms/user-agent.ts): real user agents of browsers, phones,
 * tablets, crawlers, AI crawlers and tools against what they are; each distinct agent classified
 * once (the cache, and the transform that uses it); the columns stored through the real import.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { decodeLines, emptyDecoded, accessDecoder } from '../ingest/transforms/rows.js';
import { compileAccessFormat } from '../ingest/parsers/access-format.js';
import { classifyUserAgent, CLASSIFIED_LENGTH, UserAgentClasses, type UserAgentClass } from '../ingest/transforms/user-agent.js';
import { startTestApp, type TestApp } from './support/app.js';
import { FORMAT, importText, newDomain, select, T0, timeLocal } from './support/ingest.js';

type Expected = [browser: string, os: string, device: UserAgentClass['device']] | [botName: string, botKind: 'ai' | 'search' | 'other'];

// Real user agents (as browsers and crawlers send them) and what they are. Browsers and systems
// are named as ua-parser-js names them, bots as Matomo's list does ("BingBot", "ccBot crawler");
// AI when Matomo's category or crawler-user-agents' tag says so.
export const AGENTS: [what: string, userAgent: string, expected: Expected][] = [
  ['Chrome on Windows', 'Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36', ['Chrome', 'Windows', 'desktop']],
  ['Edge on Windows', 'Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/130.0.0.0 Safari/537.36 Edg/130.0.2849.80', ['Edge', 'Windows', 'desktop']],
  ['Firefox on Windows', 'Mozilla/5.0 (Windows NT 10.0; Win64; x64; rv:133.0) Gecko/20100101 Firefox/133.0', ['Firefox', 'Windows', 'desktop']],
  ['Safari on a Mac', 'Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/18.1 Safari/605.1.15', ['Safari', 'Mac OS', 'desktop']],
  ['Firefox on Ubuntu', 'Mozilla/5.0 (X11; Ubuntu; Linux x86_64; rv:132.0) Gecko/20100101 Firefox/132.0', ['Firefox', 'Ubuntu', 'desktop']],
  ['Chrome on a Chromebook', 'Mozilla/5.0 (X11; CrOS x86_64 14541.0.0) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36', ['Chrome', 'Chromium OS', 'desktop']],
  ['Safari on an iPhone', 'Mozilla/5.0 (iPhone; CPU iPhone OS 18_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/18.1 Mobile/15E148 Safari/604.1', ['Mobile Safari', 'iOS', 'mobile']],
  ['Chrome on an iPhone', 'Mozilla/5.0 (iPhone; CPU iPhone OS 17_5 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) CriOS/131.0.6778.73 Mobile/15E148 Safari/604.1', ['Chrome', 'iOS', 'mobile']],
  ['Chrome on a Pixel', 'Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.6778.81 Mobile Safari/537.36', ['Chrome', 'Android', 'mobile']],
  ['Samsung Internet on a Galaxy', 'Mozilla/5.0 (Linux; Android 14; SAMSUNG SM-S918B) AppleWebKit/537.36 (KHTML, like Gecko) SamsungBrowser/26.0 Chrome/122.0.0.0 Mobile Safari/537.36', ['Samsung Internet', 'Android', 'mobile']],
  ['Safari on an iPad', 'Mozilla/5.0 (iPad; CPU OS 17_7 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.7 Mobile/15E148 Safari/604.1', ['Mobile Safari', 'iOS', 'tablet']],
  ['Chrome on a Galaxy Tab', 'Mozilla/5.0 (Linux; Android 13; SM-X700) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36', ['Chrome', 'Android', 'tablet']],
  ['Chrome on a Lenovo tablet', 'Mozilla/5.0 (Linux; Android 11; Lenovo TB-J606F) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36', ['Chrome', 'Android', 'tablet']],
  ['GPTBot', 'Mozilla/5.0 AppleWebKit/537.36 (KHTML, like Gecko; compatible; GPTBot/1.2; +https://openai.com/gptbot)', ['GPTBot', 'ai']],
  ['ClaudeBot', 'Mozilla/5.0 AppleWebKit/537.36 (KHTML, like Gecko; compatible; ClaudeBot/1.0; +claudebot@anthropic.com)', ['ClaudeBot', 'ai']],
  ['PerplexityBot', 'Mozilla/5.0 AppleWebKit/537.36 (KHTML, like Gecko; compatible; PerplexityBot/1.0; +https://perplexity.ai/perplexitybot)', ['PerplexityBot', 'ai']],
  ['CCBot (AI by crawler-user-agents, a crawler by Matomo)', 'CCBot/2.0 (https://commoncrawl.org/faq/)', ['ccBot crawler', 'ai']],
  ['Bytespider (AI by crawler-user-agents, a search bot by Matomo)', 'Mozilla/5.0 (Linux; Android 5.0) AppleWebKit/537.36 (KHTML, like Gecko) Mobile Safari/537.36 (compatible; Bytespider; spider-feedback@bytedance.com)', ['Bytespider', 'ai']],
  ['Amazonbot', 'Mozilla/5.0 AppleWebKit/537.36 (KHTML, like Gecko; compatible; Amazonbot/0.1; +https://developer.amazon.com/support/amazonbot) Chrome/119.0.6045.214 Safari/537.36', ['Amazonbot', 'ai']],
  ['ChatGPT-User', 'Mozilla/5.0 AppleWebKit/537.36 (KHTML, like Gecko); compatible; ChatGPT-User/1.0; +https://openai.com/bot', ['ChatGPT-User', 'ai']],
  ['Meta-ExternalAgent', 'meta-externalagent/1.1 (+https://developers.facebook.com/docs/sharing/webmasters/crawler)', ['Meta-ExternalAgent', 'ai']],
  ['Googlebot', 'Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)', ['Googlebot', 'search']],
  ['Googlebot Smartphone', 'Mozilla/5.0 (Linux; Android 6.0.1; Nexus 5X Build/MMB29P) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.6778.69 Mobile Safari/537.36 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)', ['Googlebot', 'search']],
  ['bingbot', 'Mozilla/5.0 AppleWebKit/537.36 (KHTML, like Gecko; compatible; bingbot/2.0; +http://www.bing.com/bingbot.htm) Chrome/116.0.1938.76 Safari/537.36', ['BingBot', 'search']],
  ['YandexBot', 'Mozilla/5.0 (compatible; YandexBot/3.0; +http://yandex.com/bots)', ['YandexBot', 'search']],
  ['AhrefsBot', 'Mozilla/5.0 (compatible; AhrefsBot/7.0; +http://ahrefs.com/robot/)', ['aHrefs Bot', 'other']],
  ['Facebook link preview', 'facebookexternalhit/1.1 (+http://www.facebook.com/externalhit_uatext.php)', ['Facebook Crawler', 'other']],
  ['Prometheus', 'Prometheus/2.54.1', ['Prometheus', 'other']],
  ['curl (a tool: isbot suspects it, Matomo\'s list does not name it)', 'curl/8.5.0', ['', '', 'other']],
  ['python-requests', 'python-requests/2.32.3', ['', '', 'other']],
  ['no user agent', '', ['', '', 'other']],
  ['SQL and LIKE metacharacters', `'"\\%_*;-- x`, ['', '', 'other']],
];

function classOf(expected: Expected): UserAgentClass {
  return expected.length === 2
    ? { browser: '', os: '', device: 'bot', botName: expected[0], botKind: expected[1] }
    : { browser: expected[0], os: expected[1], device: expected[2], botName: '', botKind: '' };
}

describe('classifyUserAgent', () => {
  it.each(AGENTS)('%s', (_, userAgent, expected) => {
    expect({ ...classifyUserAgent(userAgent) }).toEqual(classOf(expected));
  });

  it('looks at the first CLASSIFIED_LENGTH characters of a long agent only', () => {
    const googlebot = AGENTS.find(([what]) => what === 'Googlebot')![1];
    expect(classifyUserAgent(`${'x'.repeat(CLASSIFIED_LENGTH)}${googlebot}`).device).not.toBe('bot');
    expect(classifyUserAgent(`${googlebot}${'\\x00%_'.repeat(2000)}`).botName).toBe('Googlebot');
  });
});

/** A classifier that counts its calls per user agent. */
function counting(): { classify: (ua: string) => UserAgentClass; calls: Map<string, number> } {
  const calls = new Map<string, number>();
  return {
    calls,
    classify: (ua) => {
      calls.set(ua, (calls.get(ua) ?? 0) + 1);
      return classifyUserAgent(ua);
    },
  };
}

describe('UserAgentClasses', () => {
  it('classifies each distinct agent once, however often it is asked', () => {
    const { classify, calls } = counting();
    const classes = new UserAgentClasses(classify);
    for (let i = 0; i < 5_000; i++) {
      const [, userAgent, expected] = AGENTS[(i * 7) % AGENTS.length]!;
      // A fresh string each time, as the parser gives: equal text, another object.
      expect(classes.of(` ${userAgent}`.slice(1))).toEqual(classOf(expected));
    }
    expect(calls.size).toBe(AGENTS.length);
    expect([...calls.values()].every((n) => n === 1)).toBe(true);
  });

  it('agents alike in their first CLASSIFIED_LENGTH characters are one entry (8 KB agents)', () => {
    const { classify, calls } = counting();
    const classes = new UserAgentClasses(classify);
    const head = 'Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html) '.padEnd(CLASSIFIED_LENGTH, '%');
    for (let i = 0; i < 100; i++) expect(classes.of(`${head}${String(i).repeat(8192 / 2)}`).botName).toBe('Googlebot');
    expect([...calls.keys()]).toEqual([head]);
  });

  it('holds at most maxEntries agents; those in use stay', () => {
    // The cache's own behaviour: a classifier that answers at once.
    const calls = new Map<string, number>();
    const classes = new UserAgentClasses((ua) => {
      calls.set(ua, (calls.get(ua) ?? 0) + 1);
      return classOf(['', '', 'other']);
    }, 100);
    const busy = AGENTS[0]![1];
    const first = 'one-off/0';
    classes.of(first);
    for (let i = 1; i <= 1_000; i++) {
      classes.of(`one-off/${i}`);
      if (i % 10 === 0) classes.of(busy);
    }
    classes.of(first);
    expect(calls.get(first)).toBe(2);
    expect(calls.get(busy)).toBe(1);
  });

  it('the transform classifies each distinct agent of its lines once', async () => {
    const { classify, calls } = counting();
    const classes = new UserAgentClasses(classify);
    const parse = compileAccessFormat(FORMAT);
    const lines = Array.from({ length: 3_000 }, (_, i) => ({ text: logLine(i, AGENTS[i % AGENTS.length]![1]), offset: i * 1000 }));
    for (let batch = 0; batch < 3; batch++) {
      const decoded = emptyDecoded(classes);
      await decodeLines(decoded, lines.slice(batch * 1000, batch * 1000 + 1000), [], accessDecoder(parse), { domainId: 1 }, { source: 'test', identity: 'test' }, Infinity);
      expect(decoded.rejects).toEqual([]);
      expect(decoded.access.length).toBe(1000);
    }
    expect(calls.size).toBe(AGENTS.length);
    expect([...calls.values()].every((n) => n === 1)).toBe(true);
  });
});

/** An access line in FORMAT with `userAgent`, escaped as nginx escapes it (", \ and control bytes as \xHH). */
function logLine(n: number, userAgent: string): string {
  const escaped = userAgent.replace(/["\\\x00-\x1f]/g, (c) => `\\x${c.charCodeAt(0).toString(16).toUpperCase().padStart(2, '0')}`);
  return `10.0.0.${n % 250} - - [${timeLocal(T0 + n * 1000)}] "GET /ua/${n} HTTP/1.1" 200 10 "-" "${escaped === '' ? '-' : escaped}" 0.005`;
}

describe('stored through the import', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp();
  });
  afterAll(async () => {
    await t?.close();
  });

  it('every row carries its agent\'s class in browser, os, device, bot_name, bot_kind', async () => {
    const domain = await newDomain(t.runtime.db);
    const text = AGENTS.map(([, userAgent], n) => `${logLine(n, userAgent)}\n`).join('');
    expect((await importText(t, domain.name, text)).inserted).toBe(AGENTS.length);
    const rows = await select<{ url: string; user_agent: string } & Record<'browser' | 'os' | 'device' | 'bot_name' | 'bot_kind', string>>(
      t.runtime.clickhouse,
      'SELECT url, user_agent, browser, os, device, bot_name, bot_kind FROM access_logs WHERE domain_id = {d:UInt32} ORDER BY id',
      { d: domain.id },
    );
    expect(rows.map((r) => [r.user_agent, { browser: r.browser, os: r.os, device: r.device, botName: r.bot_name, botKind: r.bot_kind }])).toEqual(
      AGENTS.map(([, userAgent, expected]) => [userAgent, classOf(expected)]),
    );
  });
});
