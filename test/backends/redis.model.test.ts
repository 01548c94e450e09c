/** Model-based property test of the Redis backend's append/rewrite logic (plain and compressed). */
import { randomUUID } from "node:crypto";
import fc from "fast-check";
import { Redis } from "ioredis";
import { afterAll, describe, it } from "vitest";
import { RedisBackend } from "../../src/backends/redis.js";
import { check, op } from "../helpers/backend-model.js";
import { REDIS_URL, redisSkipReason } from "../helpers/services.js";

const skip = await redisSkipReason();

describe.skipIf(!!skip)(`redis: append/rewrite logic against a model${skip ? ` (skipped: ${skip})` : ""}`, () => {
  const prefix = `duas-model:${randomUUID()}:`;
  const plain = new RedisBackend({ url: REDIS_URL, keyPrefix: prefix });
  const zipped = new RedisBackend({ url: REDIS_URL, keyPrefix: prefix, compressHistory: true, compressMinBytes: 64 });
  afterAll(async () => {
    await plain.close();
    await zipped.close();
    const admin = new Redis(REDIS_URL);
    let cursor = "0";
    do {
      const [next, keys] = await admin.scan(cursor, "MATCH", `${prefix}*`, "COUNT", 1000);
      cursor = next;
      if (keys.length > 0) await admin.del(...keys);
    } while (cursor !== "0");
    admin.disconnect();
  });
  let run = 0;
  for (const [name, backend] of [
    ["plain", plain],
    ["compressed", zipped],
  ] as const) {
    it(`${name}: every step stores exactly the model's state`, async () => {
      await fc.assert(
        fc.asyncProperty(fc.array(op, { minLength: 1, maxLength: 25 }), async (ops) => {
          await check(backend, `model-${run++}`, ops);
        }),
        { numRuns: 40 },
      );
    });
  }
});
