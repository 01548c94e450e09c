/** The journal conformance suite on Redis (a unique key prefix per test, deleted afterwards). */
import { randomUUID } from "node:crypto";
import * as vitest from "vitest";
import { RedisJournal } from "../../src/durable/journal-redis.js";
import { runJournalConformance } from "../../src/testing/index.js";
import { REDIS_URL, redisSkipReason } from "../helpers/services.js";

runJournalConformance("redis", () => new RedisJournal({ url: REDIS_URL, prefix: `test:dj:${randomUUID()}:` }), {
  test: vitest,
  skip: await redisSkipReason(),
  destroy: async (journal) => {
    await journal.clear();
    await journal.close();
  },
});
