/**
 * The directory watch shared by the followers of plain directory (ingest/sources/directory-watch.ts):
 * each follower hears about its own file and its rotated generations, not about its neighbours.
 */
import fs from 'node:fs';
import fsp from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { listDirectory } from '../../../ingest/sources/directory-listing.js';
import { watchName } from '../../../ingest/sources/directory-watch.js';
import { until } from '../../support/ingest.js';

const stops: (() => void)[] = [];
afterEach(() => {
  for (const stop of stops.splice(0)) stop();
});

function listen(dir: string, base: string): string[] {
  const heard: string[] = [];
  stops.push(watchName(dir, { base, changed: () => heard.push(base), failed: (err) => heard.push(`failed: ${String(err)}`) }));
  return heard;
}

describe('a directory watch shared by followers', () => {
  it('hands each change to the followers of that name and of the names it rotates from', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tailhouse-dirwatch-'));
    try {
      const plain = listen(dir, 'access.log');
      const ssl = listen(dir, 'access.log_ssl');
      const alsoSsl = listen(dir, 'access.log_ssl');
      fs.appendFileSync(path.join(dir, 'access.log_ssl'), 'a\n');
      await until(() => ssl.length > 0 && alsoSsl.length > 0, 'both followers of access.log_ssl to hear of it');
      // An event reaches all its listeners in plain call: access.log's would have heard by now.
      // access.log is a prefix of access.log_ssl's name, but not followed by '.' or '-': not its file.
      expect(plain).toEqual([]);
      fs.appendFileSync(path.join(dir, 'access.log'), 'b\n');
      await until(() => plain.length > 0, 'access.log to hear of its append');
      const heard = plain.length;
      const before = ssl.length;
      fs.renameSync(path.join(dir, 'access.log'), path.join(dir, 'access.log.1'));
      fs.writeFileSync(path.join(dir, 'access.log-20260101.gz'), '');
      await until(() => plain.length >= heard + 2, 'access.log to hear of its generations');
      expect(ssl.length).toBe(before);
      expect([...plain, ...ssl].some((h) => h.startsWith('failed'))).toBe(false);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('keeps watching for the others when plain follower stops, and lets go of the directory with the last', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tailhouse-dirwatch-'));
    try {
      const a = listen(dir, 'a.log');
      const stopB = watchName(dir, { base: 'b.log', changed: () => {}, failed: () => {} });
      stopB();
      fs.appendFileSync(path.join(dir, 'a.log'), 'x\n');
      await until(() => a.length > 0, 'a.log to still be watched');
      stops.pop()!();
      // A new listener after the last plain left gets a fresh watch that works.
      const again = listen(dir, 'a.log');
      fs.appendFileSync(path.join(dir, 'a.log'), 'y\n');
      await until(() => again.length > 0, 'a new watch of the directory');
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('a directory listing shared by followers', () => {
  it('serves the calls made while a listing is read with one listing begun after them', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tailhouse-dirlist-'));
    const readdir = vi.spyOn(fsp, 'readdir');
    try {
      for (let i = 0; i < 50; i++) fs.writeFileSync(path.join(dir, `site-${i}.log`), '');
      const first = listDirectory(dir);
      // Made after the first listing began: every later call must see it.
      fs.writeFileSync(path.join(dir, 'late.log'), '');
      const later = await Promise.all(Array.from({ length: 100 }, () => listDirectory(dir)));
      await first;
      expect(readdir).toHaveBeenCalledTimes(2);
      for (const names of later) expect(names).toContain('late.log');
      expect(later.every((names) => names.length === 51)).toBe(true);
      // Once idle, a call reads the directory afresh.
      fs.writeFileSync(path.join(dir, 'later.log'), '');
      expect(await listDirectory(dir)).toContain('later.log');
      expect(readdir).toHaveBeenCalledTimes(3);
    } finally {
      readdir.mockRestore();
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});
