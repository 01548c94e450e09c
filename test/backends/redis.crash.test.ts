/**
 * kill -9 in the middle of saves to Redis: a real child process saves three
 * sessions in a loop (appends, and a full rewrite every 10th save) and is
 * SIGKILLed; afterwards each session is exactly its last acknowledged save or
 * the one in flight, never a mix.
 */
import { randomUUID } from "node:crypto";
import { Redis } from "ioredis";
import { afterAll, describe, it } from "vitest";
import { RedisBackend } from "../../src/backends/redis.js";
import { expectWholeAfterKill, runAndKill } from "../fixtures/servers/kill-harness.js";
import { REDIS_URL, redisSkipReason } from "../helpers/services.js";

const skip = await redisSkipReason();

describe.skipIf(!!skip)(`redis: kill -9 mid-save${skip ? ` (skipped: ${skip})` : ""}`, () => {
  const prefix = `duas-crash:${randomUUID()}:`;
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

  for (const round of [1, 2]) {
    it(`each session loads as a complete save after SIGKILL (round ${round})`, async () => {
      const keys = [`a${round}`, `b${round}`, `c${round}`];
      const acks = await runAndKill("redis", REDIS_URL, prefix, keys, 12 + round * 5);
      const backend = new RedisBackend({ url: REDIS_URL, keyPrefix: prefix, commandTimeoutMs: 20_000 });
      try {
        await expectWholeAfterKill(backend, keys, acks);
      } finally {
        await backend.close();
      }
    });
  }
});
