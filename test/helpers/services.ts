/**
 * Test helpers for the real servers tests talk to.
 *
 * Redis (REDIS_URL, default redis://127.0.0.1:6379) and PostgreSQL
 * (DATABASE_URL, default postgres://postgres@127.0.0.1:5432/test). When a
 * server is unreachable, tests that need it skip with a visible reason on a
 * developer's machine; with DUMPLINGS_REQUIRE_SERVICES=1 (CI) they fail.
 */
import net from "node:net";

export const REDIS_URL = process.env.REDIS_URL ?? "redis://127.0.0.1:6379";
export const DATABASE_URL = process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/test";
export const SERVICES_REQUIRED = process.env.DUMPLINGS_REQUIRE_SERVICES === "1";

function reachable(url: string, defaultPort: number, timeoutMs = 1000): Promise<boolean> {
  const u = new URL(url);
  const port = Number(u.port || defaultPort);
  const host = u.hostname.replace(/^\[|\]$/g, "") || "127.0.0.1";
  return new Promise((resolve) => {
    const socket = net.connect({ host, port });
    const done = (ok: boolean) => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(timeoutMs, () => done(false));
    socket.once("connect", () => done(true));
    socket.once("error", () => done(false));
  });
}

/**
 * Returns `undefined` when the service is up, else the reason to skip.
 * Throws when services are required (CI) and the service is down.
 */
async function check(name: string, url: string, port: number): Promise<string | undefined> {
  if (await reachable(url, port)) return undefined;
  const reason = `${name} is not reachable at ${url}`;
  if (SERVICES_REQUIRED) throw new Error(`${reason} and DUMPLINGS_REQUIRE_SERVICES=1`);
  console.warn(`[skip] ${reason}; tests that need it are skipped`);
  return reason;
}

/** Skip reason for Redis tests, or undefined when Redis is up. */
export const redisSkipReason = (): Promise<string | undefined> => check("Redis", REDIS_URL, 6379);
/** Skip reason for PostgreSQL tests, or undefined when PostgreSQL is up. */
export const postgresSkipReason = (): Promise<string | undefined> => check("PostgreSQL", DATABASE_URL, 5432);
