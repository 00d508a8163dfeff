import fs from 'node:fs/promises';
import path from 'node:path';

/**
 * Writes `text` to `temp`, syncs it, renames it over `file` and syncs the directory (the rename is
 * durable only then): a reader finds the old text or the new, never a torn one. `temp` must be in
 * the same directory as `file`.
 */
export async function replaceFile(file: string, temp: string, text: string): Promise<void> {
  const fh = await fs.open(temp, 'w');
  try {
    await fh.writeFile(text, 'utf8');
    await fh.sync();
  } finally {
    await fh.close();
  }
  await fs.rename(temp, file);
  const dir = await fs.open(path.dirname(file), 'r');
  try {
    await dir.sync();
  } finally {
    await dir.close();
  }
}
