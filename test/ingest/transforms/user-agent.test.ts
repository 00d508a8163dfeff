/**
 * User agent classes (ingest/transforms/user-agent.ts): real user agents of browsers, phones,
 * tablets, crawlers, AI crawlers and tools against what they are; each distinct agent classified
 * once (the cache, and the transform that uses it); the columns stored through the real import.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { decodeLines, emptyDecoded, accessDecoder } from '../../../ingest/transforms/rows.js';
import { compileAccessFormat } from '../../../ingest/parsers/access-format.js';
import { classifyUserAgent, CLASSIFIED_LENGTH, UserAgentClasses, type UserAgentClass } from '../../../ingest/transforms/user-agent.js';
import { startTestApp, type TestApp } from '../../support/app.js';
import { AGENTS, CLASS_VALUES_SQL, classOf } from '../../support/user-agents.js';
import { FORMAT, importText, newDomain, select, T0, timeLocal } from '../../support/ingest.js';

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

  it('every row carries its agent\'s class number, which gives browser, os, device, bot_name, bot_kind', async () => {
    const domain = await newDomain(t.runtime.db);
    const text = AGENTS.map(([, userAgent], n) => `${logLine(n, userAgent)}\n`).join('');
    expect((await importText(t, domain.name, text)).inserted).toBe(AGENTS.length);
    const rows = await select<{ url: string; user_agent: string; agent_class: string } & Record<'browser' | 'os' | 'device' | 'bot_name' | 'bot_kind', string>>(
      t.runtime.clickhouse,
      `SELECT url, user_agent, agent_class, ${CLASS_VALUES_SQL} FROM access_logs WHERE domain_id = {d:UInt32} ORDER BY id`,
      { d: domain.id },
    );
    // The row's class number, and the class's values looked up from it (the columns of sql/clickhouse/010).
    expect(rows.map((r) => [r.user_agent, { id: Number(r.agent_class), browser: r.browser, os: r.os, device: r.device, botName: r.bot_name, botKind: r.bot_kind }])).toEqual(
      AGENTS.map(([, userAgent, expected]) => [userAgent, classOf(expected)]),
    );
  });
});
