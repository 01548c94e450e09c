/** Journal conformance on Redis (a unique key prefix per test, deleted afterwards). */
import { randomUUID } from "node:crypto";
import { RedisJournal } from "../../src/durable/journal-redis.js";
import { REDIS_URL, redisSkipReason } from "../helpers/services.js";
import { journalConformance } from "./journal-conformance.js";

const skip = await redisSkipReason();

journalConformance(
  "redis",
  async () => {
    const journal = new RedisJournal({ url: REDIS_URL, prefix: `test:dj:${randomUUID()}:` });
    return {
      journal,
      cleanup: async () => {
        await journal.clear();
        await journal.close();
      },
    };
  },
  skip,
);
