import type { Db } from './postgres.js';
import { sql, type SqlFragment } from './sql.js';

export interface PageRequest {
  page: number;
  limit: number;
}

/**
 * One page of `table` and the total, in one query (`count(*) over ()`); only a page past the end,
 * which carries no rows to read the total from, costs a second count.
 * `columns`, `table`, `where` and `orderBy` are fragments written by the store, never request text.
 */
export async function selectPage<Row>(
  db: Db,
  query: { columns: SqlFragment; table: SqlFragment; where: SqlFragment; orderBy: SqlFragment } & PageRequest,
): Promise<{ rows: Row[]; total: number }> {
  const rows = await db.query<Row & { total: number }>(sql`
    select ${query.columns}, count(*) over ()::int as total from ${query.table} where ${query.where}
    order by ${query.orderBy} limit ${query.limit} offset ${(query.page - 1) * query.limit}`);
  if (rows.length > 0) return { rows, total: rows[0]!.total };
  if (query.page === 1) return { rows, total: 0 };
  const [count] = await db.query<{ n: number }>(sql`select count(*)::int as n from ${query.table} where ${query.where}`);
  return { rows, total: count?.n ?? 0 };
}
