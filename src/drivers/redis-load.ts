/**
 * Loads the Redis driver packages, `ioredis` and `bullmq` (optional peer
 * dependencies), on first use. Kept apart from `redis.ts` so the published
 * declarations, which never name these packages' types, do not reach them.
 *
 * @module
 */
import type * as BullMQ from "bullmq";
import type * as IORedis from "ioredis";
import { requirePeer } from "../core/peers.js";

let ioredis: typeof IORedis | undefined;
let bullmq: typeof BullMQ | undefined;

/**
 * Loads `ioredis` on first use (importing the library never loads it).
 *
 * @throws {MissingPeerError} when ioredis is not installed (an optional peer dependency)
 */
export function loadIoredis(): typeof IORedis {
  ioredis ??= requirePeer<typeof IORedis>("redis", "ioredis");
  return ioredis;
}

/**
 * Loads `bullmq` on first use (importing `dumplings-ai/durable` never loads it; it loads ioredis too).
 *
 * @throws {MissingPeerError} when bullmq is not installed (an optional peer dependency)
 */
export function loadBullmq(): typeof BullMQ {
  bullmq ??= requirePeer<typeof BullMQ>("durable", "bullmq");
  return bullmq;
}
