/** saveState/loadState through RedisBackend (see test/fixtures/servers/persistence-scenarios.ts). */
import { randomUUID } from "node:crypto";
import { Redis } from "ioredis";
import { afterAll, describe } from "vitest";
import { RedisBackend } from "../../src/backends/redis.js";
import { persistenceScenarios } from "../fixtures/servers/persistence-scenarios.js";
import { REDIS_URL, redisSkipReason } from "../helpers/services.js";

const skip = await redisSkipReason();

describe.skipIf(!!skip)(`redis through the persistence API${skip ? ` (skipped: ${skip})` : ""}`, () => {
  const prefix = `duas-persist:${randomUUID()}:`;
  let n = 0;
  afterAll(async () => {
    const admin = new Redis(REDIS_URL);
    let cursor = "0";
    do {
      const [next, keys] = await admin.scan(cursor, "MATCH", `${prefix}*`, "COUNT", 1000);
      cursor = next;
      if (keys.length > 0) await admin.del(...keys);
    } while (cursor !== "0");
    admin.disconnect();
  });
  persistenceScenarios(() => new RedisBackend({ url: REDIS_URL, keyPrefix: `${prefix}${n++}:` }));
});
