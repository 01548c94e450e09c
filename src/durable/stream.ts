/**
 * The side channel of a run: an ordered stream of JSON events (model tokens,
 * progress) that clients subscribe to and resume from an index. Tokens cannot
 * be journaled (a replay does not re-stream them), so they travel here; the
 * side channel never drives control flow — the journal alone decides what
 * happened.
 *
 * Two implementations: {@link MemoryRunStream} (one process) and
 * {@link RedisRunStream} (Redis Streams, any number of processes/machines).
 * Indexes are 1-based and dense per run.
 *
 * @module
 */
import { EventEmitter } from "node:events";
import type { Redis } from "ioredis";
import { assertJson, type JsonValue } from "../core/json.js";
import {
  positiveMs,
  RedisConnection,
  type RedisConnectionOptions,
  redisScript,
  renamedOption,
  runScript,
} from "../drivers/redis.js";

/** One event of a run's side channel. */
export interface RunStreamEvent {
  /** 1-based position in the run's stream. */
  index: number;
  data: JsonValue;
}

/** Options of {@link RunEventStream.subscribe}. */
export interface SubscribeOptions {
  /** Deliver events whose index is greater than this (resume point). @default 0 (from the start) */
  after?: number;
  /** Stops the subscription. */
  signal?: AbortSignal;
  /** Stop after delivering an event for which this returns true (e.g. `{ type: "end" }`). */
  until?: (event: RunStreamEvent) => boolean;
}

/** A per-run event stream. */
export interface RunEventStream {
  /**
   * Appends an event.
   * @returns its index
   * @throws {NonJsonValueError}
   */
  append(runId: string, data: JsonValue): Promise<number>;
  /** Events with index > `after` (at most `limit`). */
  read(runId: string, after?: number, limit?: number): Promise<RunStreamEvent[]>;
  /** Live events with index > `options.after`, first the stored ones, then new ones as they arrive. */
  subscribe(runId: string, options?: SubscribeOptions): AsyncIterable<RunStreamEvent>;
  /** Removes a run's stream. */
  delete(runId: string): Promise<void>;
  /** Releases connections the stream created. */
  close(): Promise<void>;
}

/**
 * In-process side channel (one machine, one process).
 *
 * @example
 * const stream = new MemoryRunStream();
 * for await (const e of stream.subscribe("run-1", { until: (e) => (e.data as any).type === "end" })) console.log(e);
 */
export class MemoryRunStream implements RunEventStream {
  private readonly runs = new Map<string, JsonValue[]>();
  private readonly emitter = new EventEmitter().setMaxListeners(0);

  /** {@inheritDoc RunEventStream.append} */
  async append(runId: string, data: JsonValue): Promise<number> {
    assertJson(data, "stream event");
    let list = this.runs.get(runId);
    if (!list) {
      list = [];
      this.runs.set(runId, list);
    }
    list.push(JSON.parse(JSON.stringify(data)) as JsonValue);
    this.emitter.emit(runId);
    return list.length;
  }

  /** {@inheritDoc RunEventStream.read} */
  async read(runId: string, after = 0, limit = Number.POSITIVE_INFINITY): Promise<RunStreamEvent[]> {
    const list = this.runs.get(runId) ?? [];
    const out: RunStreamEvent[] = [];
    for (let i = after; i < list.length && out.length < limit; i++)
      out.push({ index: i + 1, data: list[i] as JsonValue });
    return out;
  }

  /** {@inheritDoc RunEventStream.subscribe} */
  async *subscribe(runId: string, options: SubscribeOptions = {}): AsyncIterable<RunStreamEvent> {
    let after = options.after ?? 0;
    for (;;) {
      if (options.signal?.aborted) return;
      const events = await this.read(runId, after);
      for (const e of events) {
        yield e;
        after = e.index;
        if (options.until?.(e)) return;
      }
      if (events.length === 0) {
        await new Promise<void>((resolve) => {
          const done = () => {
            this.emitter.off(runId, done);
            options.signal?.removeEventListener("abort", done);
            resolve();
          };
          this.emitter.on(runId, done);
          options.signal?.addEventListener("abort", done);
        });
      }
    }
  }

  /** {@inheritDoc RunEventStream.delete} */
  async delete(runId: string): Promise<void> {
    this.runs.delete(runId);
  }

  /** No-op. */
  async close(): Promise<void> {}
}

/**
 * Options of {@link RedisRunStream}: the Redis connection options shared by
 * every Redis component (`client`, `url`, `keyPrefix`, `connectTimeoutMs`,
 * `commandTimeoutMs`; README, "Redis connection options") and the stream's own.
 */
export interface RedisRunStreamOptions extends RedisConnectionOptions<Redis> {
  /** Prefix of every key of the stream. @default "dumplings:stream:" */
  keyPrefix?: string;
  /** @deprecated Use `keyPrefix` (the same; giving both with different values is an `InvalidOptionError`). */
  prefix?: string;
  /** Maximum events kept per run (older ones trimmed). @default 10000 */
  maxLength?: number;
  /** Blocking-read timeout (ms) of a subscription poll. @default 1000 */
  blockMs?: number;
}

const APPEND_SCRIPT = redisScript(`
local n = redis.call('INCR', KEYS[2])
redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[2], n .. '-1', 'd', ARGV[1])
return n`);

/**
 * Side channel on Redis Streams: entry ids are `<index>-1`, so a client resumes
 * from any index with `XRANGE`/`XREAD`. A subscription reads on a connection
 * of its own (a blocking `XREAD` would hold up every other command).
 *
 * @example
 * const stream = new RedisRunStream({ url: process.env.REDIS_URL });
 * await stream.append("run-1", { type: "token", text: "Hel" });
 */
export class RedisRunStream implements RunEventStream {
  private readonly conn: RedisConnection<Redis>;
  private readonly prefix: string;
  private readonly maxLength: number;
  private readonly blockMs: number;
  private readonly readers = new Set<RedisConnection<Redis>>();

  /**
   * @param options - `client` or `url`, `keyPrefix` (default `dumplings:stream:`), `maxLength` (default 10000), `blockMs` (default 1000), timeouts
   * @throws {InvalidOptionError} on a malformed URL, a timeout or `blockMs` that is not a positive number of ms, or `prefix` and `keyPrefix` both given and different
   */
  constructor(options: RedisRunStreamOptions = {}) {
    const { prefix, maxLength, blockMs, ...rest } = options;
    const keyPrefix = renamedOption("keyPrefix", rest.keyPrefix, "prefix", prefix);
    this.blockMs = positiveMs("blockMs", blockMs, 1000);
    this.conn = new RedisConnection({ ...rest, keyPrefix }, { label: "run stream", keyPrefix: "dumplings:stream:" });
    this.prefix = this.conn.keyPrefix;
    this.maxLength = maxLength ?? 10_000;
  }

  private key(runId: string) {
    return `${this.prefix}{${runId}}:events`;
  }

  /** {@inheritDoc RunEventStream.append} @throws {BackendError} when Redis fails */
  async append(runId: string, data: JsonValue): Promise<number> {
    assertJson(data, "stream event");
    const n = await this.conn.call(`cannot append to the stream of run "${runId}"`, runId, (c) =>
      runScript(
        c,
        APPEND_SCRIPT,
        [this.key(runId), `${this.prefix}{${runId}}:n`],
        [JSON.stringify(data), String(this.maxLength)],
      ),
    );
    return Number(n);
  }

  /** {@inheritDoc RunEventStream.read} @throws {BackendError} when Redis fails */
  async read(runId: string, after = 0, limit?: number): Promise<RunStreamEvent[]> {
    const args: (string | number)[] = [this.key(runId), `${after + 1}-0`, "+"];
    if (limit !== undefined) args.push("COUNT", limit);
    const entries = (await this.conn.call(`cannot read the stream of run "${runId}"`, runId, (c) =>
      c.call("XRANGE", ...args),
    )) as [string, string[]][];
    return entries.map(parseEntry);
  }

  /** {@inheritDoc RunEventStream.subscribe} @throws {BackendError} when Redis fails */
  async *subscribe(runId: string, options: SubscribeOptions = {}): AsyncIterable<RunStreamEvent> {
    // A blocked XREAD answers within blockMs: bound it by that plus the command timeout.
    const reader = this.conn.duplicate({ commandTimeout: this.blockMs + this.conn.commandTimeoutMs });
    this.readers.add(reader);
    let after = options.after ?? 0;
    try {
      while (!options.signal?.aborted) {
        const from = after === 0 ? "0-0" : `${after}-1`;
        const res = (await reader.call(`cannot read the stream of run "${runId}"`, runId, (c) =>
          c.call("XREAD", "BLOCK", this.blockMs, "STREAMS", this.key(runId), from),
        )) as [string, [string, string[]][]][] | null;
        for (const [, entries] of res ?? []) {
          for (const entry of entries) {
            const e = parseEntry(entry);
            yield e;
            after = e.index;
            if (options.until?.(e)) return;
          }
        }
      }
    } finally {
      this.readers.delete(reader);
      reader.disconnect();
    }
  }

  /** {@inheritDoc RunEventStream.delete} @throws {BackendError} when Redis fails */
  async delete(runId: string): Promise<void> {
    await this.conn.call(`cannot delete the stream of run "${runId}"`, runId, (c) =>
      c.del(this.key(runId), `${this.prefix}{${runId}}:n`),
    );
  }

  /** Closes the connections this stream created (an injected client is left open). Idempotent. */
  async close(): Promise<void> {
    for (const r of this.readers) r.disconnect();
    await this.conn.close();
  }
}

function parseEntry([id, fields]: [string, string[]]): RunStreamEvent {
  const i = fields.indexOf("d");
  return { index: Number(id.split("-")[0]), data: JSON.parse(fields[i + 1] ?? "null") as JsonValue };
}
