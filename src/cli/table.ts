/** Rows for the terminal: columns padded to their widest cell, two spaces apart. */
export function formatRows(rows: (string | number)[][]): string {
  const cells = rows.map((row) => row.map(String));
  const widths = (cells[0] ?? []).map((_, i) => Math.max(...cells.map((row) => [...(row[i] ?? '')].length)));
  return cells.map((row) => `${row.map((cell, i) => (i === row.length - 1 ? cell : cell + ' '.repeat(widths[i]! - [...cell].length))).join('  ').trimEnd()}\n`).join('');
}

/** A table with a header line. */
export const formatTable = (headers: string[], rows: (string | number)[][]) => formatRows([headers, ...rows]);

/** A JSON document on its own lines, for scripts (`--json`). */
export const formatJson = (value: unknown) => `${JSON.stringify(value, null, 2)}\n`;

/** An ISO time, or "never". */
export const timeOrNever = (value: Date | string | null) => (value ? new Date(value).toISOString() : 'never');
