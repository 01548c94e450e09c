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
 * The original design (the workflow-snapshot article) kept a plain string
 * holding the state JSON at the same key. Such an entry is read (as the
 * step its `step_index` names; the store maps its snake_case state), and a
 * write replaces it with the hash unless it holds a newer step. A key of
 * another type, or a string that is not such a state, is never overwritten
 * or read as a snapshot: both are errors (counted by the store like any
 * hot-tier failure).
 *
 * @module
 */
import { BackendError } from "../../core/errors.js";
import { checkOptions, optionKeys } from "../../core/options.js";
import {
  positiveMs,
  REDIS_CONNECTION_KEYS,
  RedisConnection,
  type RedisConnectionOptions,
  redisScript,
  runScript,
  type ScriptClient,
} from "../../drivers/redis.js";

/** The keys of {@link RedisHotTierOptions}: any other is an `InvalidOptionError`. */
const HOT_REDIS_OPTIONS = optionKeys<RedisHotTierOptions>({
  ...REDIS_CONNECTION_KEYS,
  ttlMs: true,
});

/**
 * The part of an ioredis client the hot tier uses (any compatible client can be injected). With
 * `evalsha` (an ioredis client has it), a write sends its script's SHA instead of its text.
 */
export interface RedisClientLike {
  /** `EVAL script numKeys ...keysAndArgs`. */
  eval(script: string, numKeys: number, ...args: (string | number | Buffer)[]): Promise<unknown>;
  /** Optional: `EVALSHA sha numKeys ...keysAndArgs`; rejects with an error whose message starts with `NOSCRIPT` when unknown. */
  evalsha?(sha: string, numKeys: number, ...args: (string | number | Buffer)[]): Promise<unknown>;
  /** `HMGET key ...fields`. */
  hmget(key: string, ...fields: string[]): Promise<(string | null)[]>;
  /** `DEL ...keys`. */
  del(...keys: string[]): Promise<number>;
  /** Closes the connection gracefully. */
  quit(): Promise<unknown>;
  /** Closes the connection at once. */
  disconnect(): void;
  /** Connection state (`ready` when connected). */
  readonly status: string;
}

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
  /** True for a string entry written by the original design (snake_case state JSON). */
  original?: boolean;
}

/** A snapshot to cache: its state JSON as text, or as the UTF-8 bytes of that text (sent as they are). */
export interface HotWrite {
  stepIndex: number;
  stateJson: string | Uint8Array;
}

/** The step of an original-layout string entry (`nil` when it is not one). */
const ORIGINAL_STEP = `
local function original_step(key)
  local ok, v = pcall(cjson.decode, redis.call('GET', key))
  if ok and type(v) == 'table' and v['workflow_id'] ~= nil and tonumber(v['step_index']) then
    return tonumber(v['step_index'])
  end
  return nil
end`;

const WRITE_IF_NEWER = `${ORIGINAL_STEP}
local t = redis.call('TYPE', KEYS[1]).ok
if t == 'hash' then
  local cur = redis.call('HGET', KEYS[1], 'step')
  if cur and tonumber(cur) > tonumber(ARGV[1]) then return 0 end
elseif t == 'string' then
  local step = original_step(KEYS[1])
  if step == nil then return redis.error_reply('the key holds a string that is not a workflow state: left as it is') end
  if step > tonumber(ARGV[1]) then return 0 end
  redis.call('DEL', KEYS[1])
elseif t ~= 'none' then
  return redis.error_reply('the key holds a ' .. t .. ', not a cached workflow: left as it is')
end
redis.call('HSET', KEYS[1], 'step', ARGV[1], 'state', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1`;
const WRITE_SCRIPT = redisScript(WRITE_IF_NEWER);

const READ = `
local t = redis.call('TYPE', KEYS[1]).ok
if t == 'hash' then return {'hash', redis.call('HGET', KEYS[1], 'step'), redis.call('HGET', KEYS[1], 'state')} end
if t == 'string' then return {'string', redis.call('GET', KEYS[1])} end
return {t}`;

/** The same bytes as a Buffer (what ioredis sends as they are), not copied. */
const asBuffer = (b: Uint8Array): Buffer =>
  Buffer.isBuffer(b) ? b : Buffer.from(b.buffer, b.byteOffset, b.byteLength);

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
    checkOptions("redis", options, HOT_REDIS_OPTIONS);
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
   * @param entry - the step and its state JSON, as text or as its UTF-8 bytes
   * @throws {BackendError} when Redis fails (the store counts it; it is never fatal)
   */
  async put(workflowId: string, entry: HotWrite): Promise<void> {
    const json = entry.stateJson;
    await this.conn.call(`cannot cache workflow ${JSON.stringify(workflowId)}`, workflowId, (c) => {
      if (!c.evalsha) {
        // A minimal injected client gets the text, as it always did.
        const text = typeof json === "string" ? json : asBuffer(json).toString("utf8");
        return c.eval(WRITE_IF_NEWER, 1, this.key(workflowId), entry.stepIndex, text, this.ttlMs);
      }
      // ioredis sends a Buffer's bytes as they are (no second UTF-8 encoding of the state).
      const state = typeof json === "string" ? json : asBuffer(json);
      return runScript(c as ScriptClient, WRITE_SCRIPT, [this.key(workflowId)], [entry.stepIndex, state, this.ttlMs]);
    });
  }

  /**
   * Reads a cached snapshot.
   * @returns the entry, or `undefined` when missing or expired
   * @throws {BackendError} when Redis fails
   */
  async get(workflowId: string): Promise<HotEntry | undefined> {
    const what = `cannot read the cached workflow ${JSON.stringify(workflowId)}`;
    const reply = (await this.conn.call(what, workflowId, (c) => c.eval(READ, 1, this.key(workflowId)))) as
      | (string | null)[]
      | null;
    const [type, a, b] = reply ?? [];
    if (type === "none") return undefined;
    if (type === "hash") return a == null || b == null ? undefined : { stepIndex: Number(a), stateJson: b };
    if (type === "string" && typeof a === "string") {
      // The original design's entry: the state JSON itself, its step in step_index.
      let step: unknown;
      try {
        const v = JSON.parse(a) as Record<string, unknown> | null;
        step = v !== null && typeof v === "object" && "workflow_id" in v ? v.step_index : undefined;
      } catch {
        step = undefined;
      }
      if (typeof step === "number" && Number.isInteger(step) && step >= 0) {
        return { stepIndex: step, stateJson: a, original: true };
      }
    }
    throw new BackendError(
      this.name,
      `${what}: ${this.key(workflowId)} holds a ${type ?? "value"} that is not a cached workflow (left as it is)`,
      { key: workflowId },
    );
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
