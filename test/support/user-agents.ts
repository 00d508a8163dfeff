/** Real user agents and what they are (ingest/transforms/user-agent.ts), for the tests that classify them. */
import { agentClass, type UserAgentClass } from '../../ingest/transforms/user-agent.js';

export type Expected = [browser: string, os: string, device: UserAgentClass['device']] | [botName: string, botKind: 'ai' | 'search' | 'other'];

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

export function classOf(expected: Expected): UserAgentClass {
  return agentClass(
    expected.length === 2
      ? { browser: '', os: '', device: 'bot', botName: expected[0], botKind: expected[1] }
      : { browser: expected[0], os: expected[1], device: expected[2], botName: '', botKind: '' },
  );
}


/** A row's class values as the statistics read them (sql/clickhouse/010_agent_classes.sql), named as the columns of 008 were. */
export const CLASS_VALUES_SQL = ['browser', 'os', 'device', 'bot_name', 'bot_kind'].map((c) => `joinGet('agent_classes', '${c}', agent_class) AS ${c}`).join(', ');
