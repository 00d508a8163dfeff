/** Small helpers of the benches' output and waits. */
import os from 'node:os';

/** A whole number with thousands separators (`1,234,567`). */
export const fmt = (n: number) => Math.round(n).toLocaleString('en-US');
export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** The last `lines` lines of a process's output on one line. */
export const tail = (text: string, lines = 5) => text.trim().split('\n').slice(-lines).join(' / ');
/** The machine's load averages over 1, 5 and 15 minutes. */
export const load = () => os.loadavg().map((l) => l.toFixed(2)).join(' ');
