/** The parts of `tailhouse import` that face the operator: its options, progress bar and report. */
import fs from 'node:fs/promises';
import { SingleBar } from 'cli-progress';
import { z } from 'zod';
import { isTimeZone } from '../../ingest/config.js';
import type { ImportOptions, ImportSummary } from '../../ingest/import.js';
import { compileAccessFormat } from '../../ingest/parsers/access-format.js';
import { domainNameField } from '../domains/schemas.js';

const compiles = (format: string) => {
  try {
    compileAccessFormat(format);
    return true;
  } catch {
    return false;
  }
};

export const importOptionsSchema = z
  .object({
    domain: domainNameField.optional(),
    type: z.enum(['access', 'error']),
    format: z.string().refine(compiles, { message: '--format must be combined, main or an nginx log_format string with a time variable' }),
    timezone: z.string().refine(isTimeZone, { message: '--timezone must be an IANA time zone such as UTC or Europe/Paris' }),
  })
  .transform((o): ImportOptions => ({ domain: o.domain ?? null, type: o.type, format: o.format, timezone: o.timezone }));

/** A progress bar over the files' bytes on disk, on stderr when it is a terminal; nothing otherwise. */
export async function importProgress(files: string[]): Promise<{ update: (diskBytes: number, lines: number) => void; stop: () => void }> {
  if (!process.stderr.isTTY) return { update: () => {}, stop: () => {} };
  let total = 0;
  for (const file of files) total += (await fs.stat(file).catch(() => ({ size: 0 }))).size;
  const bar = new SingleBar({
    stream: process.stderr,
    format: 'importing [{bar}] {percentage}% | {lines} lines | {rate} lines/s | ETA {eta_formatted}',
    hideCursor: true,
  });
  const started = performance.now();
  bar.start(Math.max(total, 1), 0, { lines: 0, rate: 0 });
  let shown = 0;
  return {
    update(diskBytes, lines) {
      const value = Math.min(diskBytes, total);
      const payload = { lines, rate: Math.round(lines / ((performance.now() - started) / 1000)) };
      // The same value again (lines counted after the last bytes were read) would give the ETA 0 ÷ 0.
      if (value === shown) bar.update(payload);
      else bar.update((shown = value), payload);
    },
    stop: () => bar.stop(),
  };
}

/** The summary printed at the end: per file, then the totals and the rate. */
export function importReport(summary: ImportSummary): string {
  const lines = summary.files.map((f) => {
    const notes = [
      f.skippedBytes > 0 ? `${f.skippedBytes} bytes already imported before` : '',
      f.trailingBytes > 0 ? `last ${f.trailingBytes} bytes have no newline: not imported` : '',
      f.expired > 0 ? `${f.expired} entries older than LOG_RETENTION_DAYS, dropped by retention at once` : '',
    ].filter(Boolean);
    return `${f.path}: ${f.lines} lines, ${f.inserted} stored, ${f.rejected} rejected${notes.length ? ` (${notes.join('; ')})` : ''}\n`;
  });
  const seconds = summary.elapsedMs / 1000;
  const rate = seconds > 0 ? Math.round(summary.lines / seconds) : 0;
  lines.push(`imported ${summary.lines} lines from ${summary.files.length} file(s): ${summary.inserted} stored, ${summary.rejected} rejected, in ${seconds.toFixed(1)} s (${rate} lines/s)\n`);
  if (summary.rejected > 0) lines.push('rejected lines and their reasons are in the ingest_rejects table\n');
  if (summary.interrupted) lines.push('interrupted: run the same command again to continue where it stopped\n');
  return lines.join('');
}
