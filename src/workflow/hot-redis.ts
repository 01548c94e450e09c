/**
 * Redis hot tier of the checkpoint store: the latest snapshot of each
 * workflow under `agent:state:{workflowId}` (a hash `{ step, state }`) with a
 * TTL (default 24 h).
 *
 * It is a cache: every failure is reported to the caller (who counts and
 * logs it) and never decides anything. The connection comes from the Redis
 * driver shared by every Redis component (same options and defaults, README
 * "Redis connection options"; ioredis is loaded only when the tier creates
 * its own client): a dead Redis costs at most `connectTimeoutMs` once, then
 * calls fail at once until it is back, never a hang. A write only replaces
 * an older step (a Lua compare on `step`), so a slow writer cannot put an old
 * snapshot over a newer one.
 *
 * @module
 */
import type { Redis } from "ioredis";
import { positiveMs, RedisConnection, type RedisConnectionOptions } from "../drivers/redis.js";

/** The part of an ioredis client the hot tier uses (any compatible client can be injected). */
export type RedisClientLike = Pick<Redis, "eval" | "hmget" | "del" | "quit" | "disconnect" | "status">;

/**
 * Options of {@link RedisHotTier}: the Redis connection options shared by
 * every Redis component (`client`, `url`, `keyPrefix`, `connectTimeoutMs`,
 * `commandTimeoutMs`; README, "Redis connection options") and the TTL.
 */
export interface RedisHotTierOptions extends RedisConnectionOptions<RedisClientLike> {
  /** Prefix before `agent:state:{workflowId}` (e.g. a tenant or test name). @default "" */
  keyPrefix?: string;
  /** Time to live of a hot entry, ms (renewed on every write). @default 86_400_000 (24 h) */
  ttlMs?: number;
}

/** One cached snapshot. */
export interface HotEntry {
  stepIndex: number;
  /** Stored state JSON text (as in the cold row). */
  stateJson: string;
}

const WRITE_IF_NEWER = `
local cur = redis.call('HGET', KEYS[1], 'step')
if cur and tonumber(cur) > tonumber(ARGV[1]) then return 0 end
redis.call('HSET', KEYS[1], 'step', ARGV[1], 'state', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1`;

/**
 * Hot (cache) tier in Redis.
 *
 * @example
 * const hot = new RedisHotTier({ url: process.env.REDIS_URL, ttlMs: 3_600_000 });
 * const store = await CheckpointStore.open({ cold, hot });
 */
export class RedisHotTier {
  readonly name = "redis";
  /** The client in use. */
  readonly client: RedisClientLike;
  /** TTL of an entry, ms. */
  readonly ttlMs: number;
  private readonly conn: RedisConnection<RedisClientLike>;

  /**
   * @param options - an injected `client` or a `url`, `keyPrefix`, `ttlMs`, timeouts
   * @throws {InvalidOptionError} on a malformed URL, or a TTL or timeout that is not a positive number of ms
   */
  constructor(options: RedisHotTierOptions = {}) {
    this.ttlMs = positiveMs("ttlMs", options.ttlMs, 86_400_000);
    this.conn = new RedisConnection(options, { label: "hot tier", keyPrefix: "" });
    this.client = this.conn.client;
  }

  /** The Redis key of a workflow: `{keyPrefix}agent:state:{workflowId}`. */
  key(workflowId: string): string {
    return `${this.conn.keyPrefix}agent:state:${workflowId}`;
  }

  /**
   * Waits (at most `timeoutMs`, default the connect timeout) for the client's connection;
   * never throws. `CheckpointStore.open` calls it once, so the first writes do not fail
   * merely because the connection was still being established (there is no offline queue).
   * @returns whether the client is ready
   */
  waitReady(timeoutMs?: number): Promise<boolean> {
    return this.conn.waitReady(timeoutMs);
  }

  /**
   * Caches a snapshot unless a newer step is cached.
   * @throws {BackendError} when Redis fails (the store counts it; it is never fatal)
   */
  async put(workflowId: string, entry: HotEntry): Promise<void> {
    await this.conn.call(`cannot cache workflow ${JSON.stringify(workflowId)}`, workflowId, (c) =>
      c.eval(WRITE_IF_NEWER, 1, this.key(workflowId), entry.stepIndex, entry.stateJson, this.ttlMs),
    );
  }

  /**
   * Reads a cached snapshot.
   * @returns the entry, or `undefined` when missing or expired
   * @throws {BackendError} when Redis fails
   */
  async get(workflowId: string): Promise<HotEntry | undefined> {
    const [step, state] = await this.conn.call(
      `cannot read the cached workflow ${JSON.stringify(workflowId)}`,
      workflowId,
      (c) => c.hmget(this.key(workflowId), "step", "state"),
    );
    if (step == null || state == null) return undefined;
    return { stepIndex: Number(step), stateJson: state };
  }

  /** Removes a cached snapshot. @throws {BackendError} when Redis fails */
  async delete(workflowId: string): Promise<void> {
    await this.conn.call(`cannot delete the cached workflow ${JSON.stringify(workflowId)}`, workflowId, (c) =>
      c.del(this.key(workflowId)),
    );
  }

  /** Closes a client this tier created (injected clients are left open). Idempotent. */
  async close(): Promise<void> {
    await this.conn.close();
  }
}
