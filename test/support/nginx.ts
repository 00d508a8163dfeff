/** A real nginx for the tests and benches that need one (Debian's package; .ci/run installs it). */
import { spawnSync } from 'node:child_process';

/** nginx as `NGINX` names it, on PATH, or where Debian puts it; null when there is none. */
export function findNginx(): string | null {
  for (const candidate of [process.env.NGINX, 'nginx', '/usr/sbin/nginx'].filter((c): c is string => !!c)) {
    if (spawnSync(candidate, ['-v'], { stdio: 'ignore' }).status === 0) return candidate;
  }
  return null;
}

/**
 * An nginx.conf for a run in `work` (started with `-p work`, in the foreground): one worker, its
 * pid, error log and temporary files in `work`, and `http` the body of its http block.
 */
export function nginxConf(work: string, { errorLog, connections, http }: { errorLog: string; connections: number; http: string }): string {
  return `worker_processes 1;
daemon off;
pid ${work}/nginx.pid;
error_log ${errorLog};
events { worker_connections ${connections}; }
http {
  client_body_temp_path ${work}/tmp/body;
  proxy_temp_path ${work}/tmp/proxy;
  fastcgi_temp_path ${work}/tmp/fastcgi;
  uwsgi_temp_path ${work}/tmp/uwsgi;
  scgi_temp_path ${work}/tmp/scgi;
${http}}
`;
}
