/**
 * The shared backend conformance suite against a real Redis (REDIS_URL,
 * default 127.0.0.1:6379), once plain and once with compressed history.
 * Every test gets its own key prefix; its keys are deleted after it.
 */
import { randomUUID } from "node:crypto";
import { Redis } from "ioredis";
import * as vitest from "vitest";
import { RedisBackend } from "../../src/backends/redis.js";
import type { StateBackend } from "../../src/backends/types.js";
import { runBackendConformance } from "../../src/testing/index.js";
import { REDIS_URL, redisSkipReason } from "../helpers/services.js";

const skip = await redisSkipReason();
const admin = skip ? undefined : new Redis(REDIS_URL, { lazyConnect: true, maxRetriesPerRequest: 1 });
vitest.afterAll(() => admin?.disconnect());

async function destroy(backend: StateBackend): Promise<void> {
  const prefix = (backend as RedisBackend).keyPrefix;
  await backend.close?.();
  let cursor = "0";
  do {
    const [next, keys] = await admin!.scan(cursor, "MATCH", `${prefix}*`, "COUNT", 1000);
    cursor = next;
    if (keys.length > 0) await admin!.del(...keys);
  } while (cursor !== "0");
}

// A roomy command timeout: the 100,000-message write is one command and this machine is shared.
runBackendConformance(
  "redis",
  () => new RedisBackend({ url: REDIS_URL, keyPrefix: `duas-test:${randomUUID()}:`, commandTimeoutMs: 30_000 }),
  { test: vitest, skip, destroy },
);

runBackendConformance(
  "redis (compressHistory)",
  () =>
    new RedisBackend({
      url: REDIS_URL,
      keyPrefix: `duas-test:${randomUUID()}:`,
      commandTimeoutMs: 30_000,
      compressHistory: true,
      compressMinBytes: 16,
    }),
  { test: vitest, skip, destroy, largeHistory: 20_000, samples: "bundled" },
);
