/** Small helpers of the benches' output and waits. */
import os from 'node:os';

/** A whole number with thousands separators (`1,234,567`). */
export const fmt = (n: number) => Math.round(n).toLocaleString('en-US');
export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** The last `lines` lines of a process's output on one line. */
export const tail = (text: string, lines = 5) => text.trim().split('\n').slice(-lines).join(' / ');
/** The median of some figures (the mean of the two middle ones for an even count). */
export function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
}
/** A positive whole number from the environment variable `name`, or `fallback`. */
export function positiveIntEnv(name: string, fallback: number): number {
  const v = Number(process.env[name] ?? fallback);
  if (!Number.isSafeInteger(v) || v <= 0) throw new Error(`${name} must be a positive whole number`);
  return v;
}
/** The machine's load averages over 1, 5 and 15 minutes. */
export const load = () => os.loadavg().map((l) => l.toFixed(2)).join(' ');
