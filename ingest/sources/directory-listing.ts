/**
 * Directory listings shared by the followers of one directory. When logrotate rotates a thousand
 * virtual hosts' logs at once, or a thousand new files get their first lines, every follower looks
 * for its generations: a listing each would be a thousand listings of a directory of thousands of
 * names. Instead the requests made while a listing is being read wait for the next one, which then
 * serves them all: each caller still gets a listing begun after it asked (what a follower needs to
 * tell a rename that happened during its look), and a directory is read at most twice at a time.
 */
import fsp from 'node:fs/promises';

interface Lister {
  reading: Promise<string[]> | null;
  next: Promise<string[]> | null;
}

const listers = new Map<string, Lister>();

/** The names in `dir`, read after this call was made. */
export function listDirectory(dir: string): Promise<string[]> {
  let lister = listers.get(dir);
  if (!lister) listers.set(dir, (lister = { reading: null, next: null }));
  const l = lister;
  if (l.next) return l.next;
  if (!l.reading) return start(dir, l);
  l.next = l.reading
    .catch(() => {})
    .then(() => {
      l.next = null;
      return start(dir, l);
    });
  return l.next;
}

function start(dir: string, l: Lister): Promise<string[]> {
  const reading = fsp.readdir(dir).finally(() => {
    l.reading = null;
    if (!l.next && listers.get(dir) === l) listers.delete(dir);
  });
  l.reading = reading;
  return reading;
}
