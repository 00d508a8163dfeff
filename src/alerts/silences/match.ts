/**
 * Which silence holds an (alert, domain) pair's notifications back at an instant: the one rule
 * the evaluator and the API's states share.
 */
import { activeAt } from '../recurrence.js';
import type { SilenceMatcher } from './store.js';

/** Whether the silence's window (fixed, or its weekly recurrence) holds `atMs`; a fixed window is [startsAt, endsAt). */
const inForce = (s: SilenceMatcher, atMs: number): boolean =>
  s.recurrence !== null ? activeAt(s.recurrence, atMs) : s.startsAtMs! <= atMs && atMs < s.endsAtMs!;

/** The id of the first silence covering the pair in force at `atMs`, or null. */
export function silenceOf(silences: readonly SilenceMatcher[], alertId: number, domainId: number, atMs: number): number | null {
  for (const s of silences) {
    if (!s.domainIds.has(domainId)) continue;
    if (s.alertIds !== null && !s.alertIds.includes(alertId)) continue;
    if (inForce(s, atMs)) return s.id;
  }
  return null;
}
