/**
 * What a user agent is: browser, operating system, device class, and for bots their name and kind.
 * Stored with each access row (sql/clickhouse/008_user_agent_classes.sql); the libraries and why
 * these are in the README's dependencies and ingest/README.md.
 *
 * - node-device-detector (the JavaScript port of Matomo's device-detector, whose lists Matomo
 *   updates every few weeks) decides whether a user agent is a bot, names it and gives its category;
 *   for any other agent the client (browser, app, HTTP library), the operating system and the
 *   device type.
 * - crawler-user-agents tags the crawlers that gather data for AI ('ai-crawler'): a bot the first
 *   list names is an AI bot when either list says so (Matomo's list files CCBot under "Crawler" and
 *   Bytespider under "Search bot", which crawler-user-agents tags as AI crawlers).
 *
 * Parsing costs 0.5 to 15 ms per user agent (thousands of expressions), so each distinct agent is
 * parsed once: UserAgentClasses keeps the answers.
 */
import { createRequire } from 'node:module';
import { z } from 'zod';

export type Device = 'desktop' | 'mobile' | 'tablet' | 'bot' | 'other';
/** '' for an agent that is no bot. */
export type BotKind = '' | 'ai' | 'search' | 'other';

export interface UserAgentClass {
  /** The client as the detector names it (a browser, an app, an HTTP library); '' for bots and unknown agents. */
  readonly browser: string;
  /** '' for bots and unknown systems. */
  readonly os: string;
  readonly device: Device;
  /** '' when the agent is no bot. */
  readonly botName: string;
  readonly botKind: BotKind;
}

/**
 * Only the head of a user agent is looked at. Real ones are shorter (none of the 38,000 in Matomo's
 * test fixtures is longer than 400 characters), and the detector's time grows with the length: an
 * 8 KB agent took up to 2.5 s, its first 512 characters at most about 30 ms.
 */
export const CLASSIFIED_LENGTH = 512;

const UNKNOWN: UserAgentClass = Object.freeze({ browser: '', os: '', device: 'other', botName: '', botKind: '' });

// The detector's device types (Matomo's) folded into ours; any type not listed is 'other'.
const DEVICES: Readonly<Record<string, Device>> = {
  desktop: 'desktop',
  smartphone: 'mobile',
  phablet: 'mobile',
  'feature phone': 'mobile',
  tablet: 'tablet',
};

// Matomo's bot categories for AI are "AI Data Scraper", "AI Search Crawler", "AI Assistant", "AI Agent".
const AI_CATEGORY = /^AI /;
const SEARCH_CATEGORY = 'Search bot';

const crawlerList = z.array(z.object({ pattern: z.string(), tags: z.array(z.string()).optional() }));

// The package is CommonJS whose typings declare an ES default export: require gives that class.
type DeviceDetector = import('node-device-detector').default;

interface Detectors {
  detector: DeviceDetector;
  aiCrawler: RegExp;
}

let detectors: Detectors | undefined;

/** Built on first use: loading the lists and the detector takes about 150 ms. */
function loadDetectors(): Detectors {
  if (detectors) return detectors;
  const require = createRequire(import.meta.url);
  const Detector = require('node-device-detector') as new (options: import('node-device-detector').DeviceDetectorOptions) => DeviceDetector;
  // Versions, brands, models and client hints are not stored: the detector skips what it can of them.
  const detector = new Detector({ deviceIndexes: true, clientIndexes: true, osIndexes: true, deviceAliasCode: false, deviceTrusted: false, deviceInfo: false });
  const crawlers = crawlerList.parse(require('crawler-user-agents'));
  const patterns = crawlers.filter((c) => c.tags?.includes('ai-crawler')).map((c) => `(?:${c.pattern})`);
  detectors = { detector, aiCrawler: new RegExp(patterns.join('|')) };
  return detectors;
}

/** The class of one user agent, from the libraries (no cache: see UserAgentClasses). */
export function classifyUserAgent(userAgent: string): UserAgentClass {
  const ua = userAgent.length > CLASSIFIED_LENGTH ? userAgent.slice(0, CLASSIFIED_LENGTH) : userAgent;
  if (ua.trim() === '') return UNKNOWN;
  const { detector, aiCrawler } = loadDetectors();
  // The typings promise a bot; a user agent that is none gets {}.
  const bot: Partial<{ name: string; category: string }> = detector.parseBot(ua);
  if (bot.name !== undefined) {
    const category = bot.category ?? '';
    const botKind: BotKind = AI_CATEGORY.test(category) || aiCrawler.test(ua) ? 'ai' : category === SEARCH_CATEGORY ? 'search' : 'other';
    return Object.freeze({ browser: '', os: '', device: 'bot', botName: bot.name, botKind });
  }
  const { client, os, device } = detector.detect(ua) as { client: { name?: string }; os: { name?: string }; device: { type?: string } };
  return Object.freeze({ browser: client.name ?? '', os: os.name ?? '', device: DEVICES[device.type ?? ''] ?? 'other', botName: '', botKind: '' });
}

/**
 * The classes of the user agents seen, each agent classified once: a cache of at most `maxEntries`
 * agents (two generations, each up to half: a full young one becomes the old one, and an agent
 * found in the old one moves back to the young one), so the agents in use stay while a flood of
 * one-off agents cannot hold memory.
 */
export class UserAgentClasses {
  private young = new Map<string, UserAgentClass>();
  private old = new Map<string, UserAgentClass>();

  constructor(
    private readonly classify: (userAgent: string) => UserAgentClass = classifyUserAgent,
    private readonly maxEntries = 20_000,
  ) {}

  of(userAgent: string): UserAgentClass {
    // Agents alike in their first CLASSIFIED_LENGTH characters are classified alike: one entry.
    const key = userAgent.length > CLASSIFIED_LENGTH ? userAgent.slice(0, CLASSIFIED_LENGTH) : userAgent;
    const found = this.young.get(key);
    if (found !== undefined) return found;
    // The parser's string is a slice of the batch's text, and so would be the names the detector
    // cuts out of it: a copy keeps the cache from holding whole batches alive.
    const copy = JSON.parse(JSON.stringify(key)) as string;
    const cls = this.old.get(key) ?? this.classify(copy);
    if (this.young.size >= this.maxEntries / 2) {
      this.old = this.young;
      this.young = new Map();
    }
    this.young.set(copy, cls);
    return cls;
  }
}

/** The process's classes: every access row written through the sink is classified by this one. */
export const userAgentClasses = new UserAgentClasses();
