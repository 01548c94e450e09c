/**
 * The cold store conformance suite through both tiers: SQLite as the cold store with the Redis
 * hot tier in front (a fresh key prefix per test), as a deployment runs it. Every read and
 * write of the suite then crosses the Redis driver as well as the SQLite one.
 */
import { randomUUID } from "node:crypto";
import path from "node:path";
import * as vitest from "vitest";
import { runColdStoreConformance } from "../../src/testing/index.js";
import { SqliteColdStore } from "../../src/workflow/cold-sqlite.js";
import { RedisHotTier } from "../../src/workflow/hot-redis.js";
import { REDIS_URL, redisSkipReason } from "../helpers/services.js";
import { tempDir } from "./helpers.js";

const skip = await redisSkipReason();

runColdStoreConformance(
  "sqlite + redis hot tier",
  () => {
    const tmp = tempDir("hot-conformance");
    const cold = new SqliteColdStore({ path: path.join(tmp.dir, "cold.db") });
    const hot = new RedisHotTier({ url: REDIS_URL, keyPrefix: `hot-conformance:${randomUUID()}:` });
    return {
      cold,
      hot,
      async destroy() {
        await hot.close();
        await cold.close();
        tmp.cleanup();
      },
    };
  },
  { test: vitest, skip },
);
