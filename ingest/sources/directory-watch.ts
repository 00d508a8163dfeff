/**
 * One directory watch per directory, shared by every follower of a file in it. nginx's logs of a
 * thousand virtual hosts usually sit in one directory: a watch per follower would run a thousand
 * callbacks for every append to any of them (libuv calls each handle on the same inotify watch),
 * where one watch hands each event only to the followers of the name it concerns.
 *
 * A follower listens for its file's name and the names of its rotated generations: a name it is
 * a prefix of, followed by `.` or `-` (`access.log.1`, `access.log-20250101.gz`).
 */
import fs from 'node:fs';

export interface NameListener {
  /** The file's name in the directory. */
  base: string;
  /** Something happened to the file or one of its generations. */
  changed(): void;
  /** The watch broke (the directory went away, the system's limits): the listener is dropped. */
  failed(err: unknown): void;
}

interface DirectoryWatch {
  watcher: fs.FSWatcher;
  byBase: Map<string, Set<NameListener>>;
}

const watches = new Map<string, DirectoryWatch>();

/** Listens for changes to `listener.base` in `dir`; returns what stops listening. Throws when the directory cannot be watched. */
export function watchName(dir: string, listener: NameListener): () => void {
  let watch = watches.get(dir);
  if (!watch) {
    const byBase = new Map<string, Set<NameListener>>();
    const watcher = fs.watch(dir, { persistent: false }, (_event, name) => {
      if (name === null) {
        for (const set of byBase.values()) for (const l of set) l.changed();
        return;
      }
      notify(byBase, name);
    });
    const created: DirectoryWatch = { watcher, byBase };
    watcher.on('error', (err) => {
      watcher.close();
      if (watches.get(dir) === created) watches.delete(dir);
      for (const set of byBase.values()) for (const l of set) l.failed(err);
      byBase.clear();
    });
    watches.set(dir, (watch = created));
  }
  const { byBase } = watch;
  let set = byBase.get(listener.base);
  if (!set) byBase.set(listener.base, (set = new Set()));
  set.add(listener);
  const current = watch;
  return () => {
    const listeners = current.byBase.get(listener.base);
    if (!listeners?.delete(listener)) return;
    if (listeners.size === 0) current.byBase.delete(listener.base);
    if (current.byBase.size === 0) {
      current.watcher.close();
      if (watches.get(dir) === current) watches.delete(dir);
    }
  };
}

/** Calls the listeners of `name` itself and of each prefix of it that ends before a `.` or `-`. */
function notify(byBase: Map<string, Set<NameListener>>, name: string): void {
  const call = (base: string) => {
    const listeners = byBase.get(base);
    if (listeners) for (const l of listeners) l.changed();
  };
  call(name);
  for (let i = 1; i < name.length; i++) {
    const c = name.charCodeAt(i);
    if (c === 0x2e || c === 0x2d) call(name.slice(0, i));
  }
}
