/**
 * The cold store conformance suite through both tiers: SQLite as the cold store with the Redis
 * hot tier in front (a fresh key prefix per test), as a deployment runs it. Every read and
 * write of the suite then crosses the Redis driver as well as the SQLite one.
 */
import { randomUUID } from "node:crypto";
import * as vitest from "vitest";
import { RedisHotTier } from "../../src/durable/checkpoints/hot-redis.js";
import { REDIS_URL, redisSkipReason } from "../helpers/services.js";
import { runColdStoreConformance } from "./cold-store-suite.js";
import { sqliteColdFixture } from "./helpers.js";

const skip = await redisSkipReason();

runColdStoreConformance(
  "sqlite + redis hot tier",
  () => sqliteColdFixture(new RedisHotTier({ url: REDIS_URL, keyPrefix: `hot-conformance:${randomUUID()}:` })),
  { test: vitest, skip },
);
