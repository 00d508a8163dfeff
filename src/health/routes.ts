import { Hono } from 'hono';
import type { Services } from '../context.js';
import { sql } from '../../core/db/sql.js';

/** Probes for load balancers and orchestrators; no token needed. */
export function healthRoutes(services: Pick<Services, 'db' | 'clickhouse' | 'log'>) {
  const app = new Hono();
  app.get('/healthz', (c) => c.json({ success: true }));
  app.get('/readyz', async (c) => {
    const checks = await Promise.allSettled([
      services.db.query(sql`select 1`),
      services.clickhouse.query({ query: 'SELECT 1', format: 'JSONEachRow' }).then((r) => r.json()),
    ]);
    const failed = checks.flatMap((check, i) => (check.status === 'rejected' ? [i === 0 ? 'postgres' : 'clickhouse'] : []));
    if (failed.length === 0) return c.json({ success: true });
    services.log.warn({ failed }, 'readiness check failed');
    return c.json({ success: false, error: `Store not answering: ${failed.join(', ')}` }, 503);
  });
  return app;
}
