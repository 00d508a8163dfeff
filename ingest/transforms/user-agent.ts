/**
 * What a user agent is: browser, operating system, device class, and for bots their name and kind.
 * Stored with each access row (sql/clickhouse/008_user_agent_classes.sql); the libraries and why
 * these in docs/architecture.md (Dependencies and why) and ingest/README.md.
 *
 * - isbot takes the first look: one expression, microseconds. What it does not take for a bot is
 *   none; this spares the bot list below, a scan of about 900 expressions, for the browsers.
 * - node-device-detector's bot parser (Matomo's device-detector list, which Matomo updates every
 *   few weeks) names the bot and gives its category; what isbot suspects and this list does not
 *   name (curl, an app's own agent) is no bot.
 * - crawler-user-agents tags crawlers that gather data for AI ('ai-crawler'): a bot is an AI bot
 *   when Matomo's category is one of its AI categories or this list tags it so (Matomo files CCBot
 *   under "Crawler" and Bytespider under "Search bot").
 * - ua-parser-js 1.x (the MIT line; 2.x is AGPL) gives browser, system and device type of the rest.
 *
 * The process's first agents cost 0.15–0.25 s of CPU (the bot list's expressions compile), later
 * ones 0.06–0.1 ms (a browser) to about 1 ms (a bot; bench/user-agents): each distinct agent is
 * classified once, UserAgentClasses keeps the answers.
 */
import { createHash } from 'node:crypto';
import { createRequire } from 'node:module';
import { isbot } from 'isbot';
import { UAParser } from 'ua-parser-js';
import { z } from 'zod';

export type Device = 'desktop' | 'mobile' | 'tablet' | 'bot' | 'other';
/** '' for an agent that is no bot. */
export type BotKind = '' | 'ai' | 'search' | 'other';

export interface UserAgentClass {
  /**
   * The class's number, from its five values (agentClassId): what an access row stores
   * (`agent_class`), the key of its values in `agent_classes` (sql/clickhouse/010_agent_classes.sql).
   */
  readonly id: number;
  /** The browser (or app) as ua-parser-js names it; '' for bots and agents it does not know (curl). */
  readonly browser: string;
  /** '' for bots and unknown systems. */
  readonly os: string;
  readonly device: Device;
  /** '' when the agent is no bot. */
  readonly botName: string;
  readonly botKind: BotKind;
}

/**
 * Only the head of a user agent is looked at. Real ones are shorter (of the 38,000 in Matomo's test
 * fixtures one is longer than 384 characters, none longer than 512), and the lists' time grows with
 * the length.
 */
export const CLASSIFIED_LENGTH = 512;

/** A class's five values. */
export type AgentClassValues = Omit<UserAgentClass, 'id'>;

/**
 * A class's number: the first 48 bits of the SHA-1 of its values, plus 1 (0 is a row not yet
 * classified). The same in every process and run, so writers need not agree on numbers; two of
 * the few thousand classes a log has collide with a chance below 10^-7.
 */
export function agentClassId(v: AgentClassValues): number {
  const values = [v.browser, v.os, v.device, v.botName, v.botKind].join('\n');
  let id = classIds.get(values);
  if (id === undefined) classIds.set(values, (id = createHash('sha1').update(values).digest().readUIntBE(0, 6) + 1));
  return id;
}

/** agentClassId's answers: a log's thousands of distinct agents fall into a few hundred classes. */
const classIds = new Map<string, number>();

/**
 * Every class this process has made, by number: one object per class, and what the sink writes
 * to `agent_classes` (storeAgentClasses). As many as the distinct
 * classes, a few thousand at most: browsers, systems and bots are named from the libraries' lists.
 */
export const knownClasses = new Map<number, UserAgentClass>();

/** The class of these values: the one made before, else a new one, known from now on. */
export function agentClass(v: AgentClassValues): UserAgentClass {
  const id = agentClassId(v);
  let cls = knownClasses.get(id);
  if (cls === undefined) {
    cls = Object.freeze({ id, browser: v.browser, os: v.os, device: v.device, botName: v.botName, botKind: v.botKind });
    knownClasses.set(id, cls);
  }
  return cls;
}

const UNKNOWN: AgentClassValues = { browser: '', os: '', device: 'other', botName: '', botKind: '' };

// Matomo's bot categories for AI are "AI Data Scraper", "AI Search Crawler", "AI Assistant", "AI Agent".
const AI_CATEGORY = /^AI /;
const SEARCH_CATEGORY = 'Search bot';

/** node-device-detector's bot parser: the first entry of Matomo's list that matches, or null. */
interface BotParser {
  parse(userAgent: string): { name: string; category: string } | null;
}

const crawlerList = z.array(z.object({ pattern: z.string(), tags: z.array(z.string()).optional() }));

interface BotLists {
  bots: BotParser;
  aiCrawler: RegExp;
}

let botLists: BotLists | undefined;

/**
 * Loaded on first use. The bot parser is required on its own, as the package's README shows for its
 * other parsers: the whole detector would load its device and client lists too (about 0.2 s).
 */
function loadBotLists(): BotLists {
  if (botLists) return botLists;
  const require = createRequire(import.meta.url);
  const Parser = require('node-device-detector/parser/bot-abstract-parser') as new () => BotParser;
  const crawlers = crawlerList.parse(require('crawler-user-agents'));
  const patterns = crawlers.filter((c) => c.tags?.includes('ai-crawler')).map((c) => `(?:${c.pattern})`);
  botLists = { bots: new Parser(), aiCrawler: new RegExp(patterns.join('|')) };
  return botLists;
}

/** The class of one user agent, from the libraries (no cache: see UserAgentClasses). */
export function classifyUserAgent(userAgent: string): UserAgentClass {
  const ua = userAgent.length > CLASSIFIED_LENGTH ? userAgent.slice(0, CLASSIFIED_LENGTH) : userAgent;
  if (ua.trim() === '') return agentClass(UNKNOWN);
  if (isbot(ua)) {
    const { bots, aiCrawler } = loadBotLists();
    const bot = bots.parse(ua);
    if (bot !== null) {
      const botKind: BotKind = AI_CATEGORY.test(bot.category) || aiCrawler.test(ua) ? 'ai' : bot.category === SEARCH_CATEGORY ? 'search' : 'other';
      return agentClass({ browser: '', os: '', device: 'bot', botName: bot.name, botKind });
    }
  }
  // Only the parts a class holds: getResult() would also read the engine and the CPU.
  const parser = new UAParser(ua);
  const os = parser.getOS().name;
  return agentClass({ browser: parser.getBrowser().name ?? '', os: os ?? '', device: deviceOf(parser.getDevice().type, os), botName: '', botKind: '' });
}

/**
 * ua-parser-js names phones 'mobile' and tablets 'tablet', and smart TVs, consoles, wearables, XR
 * and embedded devices by their own types; a computer has no type, only its system.
 */
function deviceOf(type: string | undefined, os: string | undefined): Device {
  if (type === 'mobile' || type === 'tablet') return type;
  if (type !== undefined) return 'other';
  return os === undefined ? 'other' : 'desktop';
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
    // A busy shop's day holds 20,000–30,000 distinct agents (browser builds, phone models): a
    // cache that keeps fewer classifies some again (27,339 times for 22,833 agents at 20,000;
    // bench/README, "the import on real nginx output"). 100,000 of them are about 25 MB.
    private readonly maxEntries = 100_000,
  ) {}

  of(userAgent: string): UserAgentClass {
    // Agents alike in their first CLASSIFIED_LENGTH characters are classified alike: one entry.
    const key = userAgent.length > CLASSIFIED_LENGTH ? userAgent.slice(0, CLASSIFIED_LENGTH) : userAgent;
    const found = this.young.get(key);
    if (found !== undefined) return found;
    // The parser's string is a slice of the batch's text, and so would be the names the libraries
    // cut out of it: a copy keeps the cache from holding whole batches alive.
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
