/**
 * An in-memory cache bounded by the summed size of its values (in a unit the caller chooses), least
 * recently used first out; one per ClickHouse client (`perClient`), so that two stores never share
 * entries. Used for the build states of known-plans.ts and the short lists of short-lists.ts.
 */
import { storeClient, type ClickHouseClient } from '../../core/db/clickhouse.js';

export class BoundedCache<V> {
  private readonly items = new Map<string, { value: V; size: number }>();
  private total = 0;

  constructor(
    private readonly maxSize: number,
    private readonly sizeOf: (value: V) => number,
  ) {}

  get(key: string): V | undefined {
    const item = this.items.get(key);
    if (!item) return undefined;
    this.items.delete(key);
    this.items.set(key, item);
    return item.value;
  }

  delete(key: string): void {
    const item = this.items.get(key);
    if (!item) return;
    this.items.delete(key);
    this.total -= item.size;
  }

  /** Stores `value` as the most recently used; drops the least recently used others while over the bound. */
  set(key: string, value: V): void {
    const old = this.items.get(key);
    if (old) {
      this.items.delete(key);
      this.total -= old.size;
    }
    const size = this.sizeOf(value);
    this.items.set(key, { value, size });
    this.total += size;
    for (const [oldest, item] of this.items) {
      if (this.total <= this.maxSize || oldest === key) break;
      this.items.delete(oldest);
      this.total -= item.size;
    }
  }
}

/** The cache of `client` among `caches`, made by `create` on first use. */
export function perClient<V>(caches: WeakMap<ClickHouseClient, BoundedCache<V>>, client: ClickHouseClient, create: () => BoundedCache<V>): BoundedCache<V> {
  const store = storeClient(client);
  let cache = caches.get(store);
  if (!cache) caches.set(store, (cache = create()));
  return cache;
}
