/**
 * Redis hot tier of the checkpoint store: the latest snapshot of each
 * workflow under `agent:state:{workflowId}` (a hash `{ step, state }`) with a
 * TTL (default 24 h), through `ioredis`.
 *
 * It is a cache: every failure is reported to the caller (who counts and
 * logs it) and never decides anything. Clients created here have bounded
 * timeouts and no offline queue, so a dead Redis costs at most
 * `connectTimeoutMs` / `commandTimeoutMs`, never a hang. A write only
 * replaces an older step (a Lua compare on `step`), so a slow writer cannot
 * put an old snapshot over a newer one.
 *
 * @module
 */
import { Redis, type RedisOptions } from "ioredis";

/** The part of an ioredis client the hot tier uses (any compatible client can be injected). */
export type RedisClientLike = Pick<Redis, "eval" | "hmget" | "del" | "quit" | "disconnect" | "status">;

/** Options of {@link RedisHotTier}. */
export interface RedisHotTierOptions {
  /** An injected ioredis client (left open by `close()`). */
  client?: RedisClientLike;
  /** URL when no client is given. @default process.env.REDIS_URL ?? "redis://127.0.0.1:6379" */
  url?: string;
  /** Prefix before `agent:state:{workflowId}` (e.g. a tenant or test name). @default "" */
  keyPrefix?: string;
  /** Time to live of a hot entry, ms (renewed on every write). @default 86_400_000 (24 h) */
  ttlMs?: number;
  /** Connect timeout of a created client, ms. @default 1000 */
  connectTimeoutMs?: number;
  /** Per-command timeout of a created client, ms. @default 1000 */
  commandTimeoutMs?: number;
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
  private readonly prefix: string;
  private readonly owned: boolean;
  private readonly connectTimeoutMs: number;

  /** @param options - an injected `client` or a `url`, `keyPrefix`, `ttlMs`, timeouts */
  constructor(options: RedisHotTierOptions = {}) {
    this.prefix = options.keyPrefix ?? "";
    this.ttlMs = options.ttlMs ?? 86_400_000;
    if (!Number.isInteger(this.ttlMs) || this.ttlMs <= 0) throw new RangeError(`ttlMs must be a positive integer`);
    this.connectTimeoutMs = options.connectTimeoutMs ?? 1000;
    if (options.client) {
      this.client = options.client;
      this.owned = false;
    } else {
      const url = options.url ?? process.env.REDIS_URL ?? "redis://127.0.0.1:6379";
      const settings: RedisOptions = {
        connectTimeout: options.connectTimeoutMs ?? 1000,
        commandTimeout: options.commandTimeoutMs ?? 1000,
        maxRetriesPerRequest: 0,
        enableOfflineQueue: false,
        // Keep reconnecting in the background (cheap), so the tier comes back by itself.
        retryStrategy: (times) => Math.min(100 * 2 ** Math.min(times, 5), 2000),
        lazyConnect: false,
      };
      const client = new Redis(url, settings);
      // Errors surface on commands; the connection's own error events would otherwise be unhandled.
      client.on("error", () => undefined);
      this.client = client;
      this.owned = true;
    }
  }

  /** The Redis key of a workflow: `{keyPrefix}agent:state:{workflowId}`. */
  key(workflowId: string): string {
    return `${this.prefix}agent:state:${workflowId}`;
  }

  /**
   * Waits (at most `timeoutMs`, default the connect timeout) for the client's connection;
   * never throws. `CheckpointStore.open` calls it once, so the first writes do not fail
   * merely because the connection was still being established (there is no offline queue).
   * @returns whether the client is ready
   */
  async waitReady(timeoutMs = this.connectTimeoutMs): Promise<boolean> {
    const c = this.client as Redis;
    if (c.status === "ready") return true;
    if (typeof c.once !== "function") return false;
    return new Promise((resolve) => {
      const t = setTimeout(() => done(false), timeoutMs);
      const done = (ok: boolean) => {
        clearTimeout(t);
        c.off("ready", onReady);
        resolve(ok);
      };
      const onReady = () => done(true);
      c.once("ready", onReady);
    });
  }

  /**
   * Caches a snapshot unless a newer step is cached.
   * @throws the driver's error (the store counts it; it is never fatal)
   */
  async put(workflowId: string, entry: HotEntry): Promise<void> {
    await this.client.eval(WRITE_IF_NEWER, 1, this.key(workflowId), entry.stepIndex, entry.stateJson, this.ttlMs);
  }

  /**
   * Reads a cached snapshot.
   * @returns the entry, or `undefined` when missing or expired
   * @throws the driver's error
   */
  async get(workflowId: string): Promise<HotEntry | undefined> {
    const [step, state] = await this.client.hmget(this.key(workflowId), "step", "state");
    if (step == null || state == null) return undefined;
    return { stepIndex: Number(step), stateJson: state };
  }

  /** Removes a cached snapshot. @throws the driver's error */
  async delete(workflowId: string): Promise<void> {
    await this.client.del(this.key(workflowId));
  }

  /** Closes a client this tier created (injected clients are left open). */
  async close(): Promise<void> {
    if (!this.owned) return;
    try {
      if (this.client.status === "ready") await this.client.quit();
      else this.client.disconnect();
    } catch {
      this.client.disconnect();
    }
  }
}
