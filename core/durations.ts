/** Durations in milliseconds, for every module that counts in minutes, hours or days. */
export const MINUTE_MS = 60_000;
export const HOUR_MS = 3_600_000;
export const DAY_MS = 86_400_000;
