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
 * **Which attempt said it.** A step's body runs at least once: a failed
 * attempt is retried, an attempt cut by a crash runs again in another process,
 * an operator may retry a failed step. Each attempt streams its tokens anew, so
 * a reader that concatenated every token would show `"Hello,Hello, world"`
 * (case pb-35). Therefore every event a run appends carries its origin:
 * `runId`, the `seq` and `attempt` of the step whose body appended it (absent
 * outside steps), and the `fencingToken` of the executor (a new one per
 * process that takes the run over, and per operator retry). The durable agent
 * starts every retried `llm` attempt with a `{ type: "reset", seq, attempt }`
 * event naming the abandoned attempt, so a live reader can clear what it
 * showed; {@link readText} / {@link rebuildText} rebuild exactly the text of
 * the journaled attempts.
 *
 * @module
 */
import { EventEmitter } from "node:events";
import type { Redis } from "ioredis";
import { BackendError, InvalidOptionError } from "../core/errors.js";
import { assertJson, type JsonValue } from "../core/json.js";
import { checkOptions, optionKeys, shownValue } from "../core/options.js";
import {
  positiveMs,
  REDIS_CONNECTION_KEYS,
  REDIS_SOURCE_OF_TRUTH_KEYS,
  RedisConnection,
  type RedisConnectionOptions,
  type RedisSourceOfTruthOptions,
  redisScript,
  renamedOption,
  runScript,
} from "../drivers/redis.js";
import { currentRun, currentStep } from "./context.js";
import { RunStreamError } from "./errors.js";
import { ENDED_RUN_STATUSES, type Journal, type StepRecord } from "./journal.js";
import type { EventOrigin, RunEventStream, RunStreamEvent, SubscribeOptions } from "./stream-contract.js";

/** The keys of {@link SubscribeOptions}: any other is an `InvalidOptionError`. */
const SUBSCRIBE_OPTIONS = optionKeys<SubscribeOptions>({ after: true, signal: true, until: true, journal: true });
/** The keys of {@link RebuildTextOptions}: any other is an `InvalidOptionError`. */
const REBUILD_OPTIONS = optionKeys<RebuildTextOptions>({ steps: true, seq: true, type: true });
/** The keys of {@link ReadTextOptions}: any other is an `InvalidOptionError`. */
const READ_TEXT_OPTIONS = optionKeys<ReadTextOptions>({ steps: true, seq: true, type: true, journal: true });

/** The keys of {@link RedisRunStreamOptions}: any other is an `InvalidOptionError`. */
const STREAM_OPTIONS = optionKeys<RedisRunStreamOptions>({
  ...REDIS_CONNECTION_KEYS,
  ...REDIS_SOURCE_OF_TRUTH_KEYS,
  prefix: true,
  maxLength: true,
  blockMs: true,
  ttlMs: true,
});

export type { EventOrigin, RunEventStream, RunStreamEvent, SubscribeOptions } from "./stream-contract.js";

/**
 * The origin of an event appended to `runId`: `origin` when given, else the
 * current step attempt when the caller runs inside that run, else none.
 */
function originOf(runId: string, origin: EventOrigin | undefined): EventOrigin | undefined {
  if (origin) return origin;
  const run = currentRun();
  if (!run || run.runId !== runId) return undefined;
  const step = currentStep();
  return {
    ...(step && step.runId === runId ? { seq: step.seq, attempt: step.attempt } : {}),
    fencingToken: run.fencingToken,
  };
}

type Tags = Omit<RunStreamEvent, "index" | "data">;

/** Validates the options of a subscription. @throws {InvalidOptionError} */
function checkSubscribe(options: SubscribeOptions): void {
  checkOptions("subscribe", options, SUBSCRIBE_OPTIONS);
  const { after, journal } = options;
  if (after !== undefined && (typeof after !== "number" || !Number.isInteger(after) || after < 0)) {
    throw new InvalidOptionError("subscribe", "after", `must be a non-negative integer, got ${shownValue(after)}`);
  }
  if (
    journal !== undefined &&
    (journal === null ||
      typeof journal !== "object" ||
      typeof journal.getRun !== "function" ||
      typeof journal.now !== "function")
  ) {
    throw new InvalidOptionError("subscribe", "journal", "must be a journal (with getRun and now)");
  }
}

/** `events` (read after `after`) must start at `after + 1`: else the events between were trimmed. */
function checkGap(runId: string, after: number, events: readonly RunStreamEvent[]): void {
  const first = events[0]?.index;
  if (first !== undefined && first > after + 1) {
    throw new RunStreamError(
      runId,
      "trimmed",
      `no longer holds events ${after + 1} to ${first - 1} (it keeps the last maxLength events of a run; the reader's cursor is ${after}, the first event held is ${first})`,
      { after, firstIndex: first },
    );
  }
}

/**
 * How long (ms, journal clock) a running run's lease must have been expired before its producer counts as
 * lost: a process waiting on the lease (another `runDurable`, a worker's retry) takes the run over within
 * milliseconds of the expiry, and its readers must not be told the run died.
 */
const PRODUCER_GRACE_MS = 1000;

/**
 * What a subscription with `journal` does when no event came (see {@link SubscribeOptions.journal}):
 * `undefined` to keep waiting, else the events still to deliver and how the subscription ends after them.
 */
async function settle(
  stream: Pick<RunEventStream, "read">,
  runId: string,
  after: number,
  journal: NonNullable<SubscribeOptions["journal"]>,
): Promise<{ events: RunStreamEvent[]; error?: RunStreamError } | undefined> {
  const run = await journal.getRun(runId);
  if (!run) return undefined;
  const finished = ENDED_RUN_STATUSES.has(run.status);
  const lost =
    run.status === "running" &&
    (run.leaseExpiresAt === undefined || run.leaseExpiresAt + PRODUCER_GRACE_MS < (await journal.now()));
  if (!finished && !lost) return undefined;
  // every event of a run is appended before the journal records its end: read them now
  const events = await stream.read(runId, after);
  checkGap(runId, after, events);
  if (lost) {
    const error = new RunStreamError(
      runId,
      "producer-lost",
      `gets no more events: the run is running but its lease expired${run.leaseExpiresAt === undefined ? "" : ` at ${new Date(run.leaseExpiresAt).toISOString()}`} (journal clock) with no live holder, so the process running it died (subscribe again to follow a worker that takes it over)`,
      { after: events.at(-1)?.index ?? after },
    );
    return { events, error };
  }
  if (events.length === 0 && (await stream.read(runId, 0, 1)).length === 0) {
    return {
      events,
      error: new RunStreamError(
        runId,
        "gone",
        `holds none of its events although the run is ${run.status} (the stream expired by ttlMs, or was deleted)`,
        { after },
      ),
    };
  }
  return { events };
}

/** The tag fields of an event appended to `runId` (only those that are set). */
function tagsOf(runId: string, origin: EventOrigin | undefined): Tags {
  if (!origin) return {};
  const out: Tags = { runId };
  for (const k of ["seq", "attempt", "fencingToken"] as const) {
    const v = origin[k];
    if (v === undefined) continue;
    if (!Number.isInteger(v) || v < 0) throw new TypeError(`stream event origin: ${k} must be a non-negative integer`);
    out[k] = v;
  }
  return out;
}

/** How often (ms) a {@link MemoryRunStream} subscription with `journal` reads the run while no event comes. */
const MEMORY_POLL_MS = 1000;

/**
 * In-process side channel (one machine, one process).
 *
 * @example
 * const stream = new MemoryRunStream();
 * for await (const e of stream.subscribe("run-1", { until: (e) => (e.data as any).type === "end" })) console.log(e);
 */
export class MemoryRunStream implements RunEventStream {
  private readonly runs = new Map<string, (Tags & { data: JsonValue })[]>();
  private readonly emitter = new EventEmitter().setMaxListeners(0);

  /** {@inheritDoc RunEventStream.append} */
  async append(runId: string, data: JsonValue, origin?: EventOrigin): Promise<number> {
    assertJson(data, "stream event");
    const tags = tagsOf(runId, originOf(runId, origin));
    let list = this.runs.get(runId);
    if (!list) {
      list = [];
      this.runs.set(runId, list);
    }
    list.push({ ...tags, data: JSON.parse(JSON.stringify(data)) as JsonValue });
    this.emitter.emit(runId);
    return list.length;
  }

  /** {@inheritDoc RunEventStream.read} */
  async read(runId: string, after = 0, limit = Number.POSITIVE_INFINITY): Promise<RunStreamEvent[]> {
    const list = this.runs.get(runId) ?? [];
    const out: RunStreamEvent[] = [];
    for (let i = after; i < list.length && out.length < limit; i++) {
      const { data, ...tags } = list[i] as Tags & { data: JsonValue };
      out.push({ index: i + 1, ...tags, data: JSON.parse(JSON.stringify(data)) as JsonValue });
    }
    return out;
  }

  /**
   * {@inheritDoc RunEventStream.subscribe}
   * @throws {RunStreamError} with `journal`: the finished run's stream is gone, or its producer was lost
   * @throws {InvalidOptionError} on an unknown option, an `after` that is not a non-negative integer, a `journal` that is not one
   */
  async *subscribe(runId: string, options: SubscribeOptions = {}): AsyncIterable<RunStreamEvent> {
    checkSubscribe(options);
    const { journal, signal, until } = options;
    let after = options.after ?? 0;
    for (;;) {
      if (signal?.aborted) return;
      const events = await this.read(runId, after);
      // with a journal, look at the run whenever nothing is left to deliver (at the start, after each poll)
      const end = events.length === 0 && journal ? await settle(this, runId, after, journal) : undefined;
      for (const e of end ? end.events : events) {
        yield e;
        after = e.index;
        if (until?.(e)) return;
      }
      if (end?.error) throw end.error;
      if (end) return;
      if (events.length === 0) {
        await new Promise<void>((resolve) => {
          let timer: ReturnType<typeof setTimeout> | undefined;
          const done = () => {
            clearTimeout(timer);
            this.emitter.off(runId, done);
            signal?.removeEventListener("abort", done);
            resolve();
          };
          this.emitter.on(runId, done);
          signal?.addEventListener("abort", done);
          if (journal) timer = setTimeout(done, MEMORY_POLL_MS);
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
export interface RedisRunStreamOptions extends RedisConnectionOptions, RedisSourceOfTruthOptions {
  /** Prefix of every key of the stream. @default "dumplings:stream:" */
  keyPrefix?: string;
  /** @deprecated Use `keyPrefix` (the same; giving both with different values is an `InvalidOptionError`). */
  prefix?: string;
  /** Maximum events kept per run (older ones trimmed). @default 10000 */
  maxLength?: number;
  /** Blocking-read timeout (ms) of a subscription poll. @default 1000 */
  blockMs?: number;
  /**
   * Time to live of a run's stream after its last event, in ms: every append sets both of the run's
   * keys to expire that long after it (Redis `PEXPIRE`), so the streams of finished runs go away
   * without a `delete`. @default undefined (kept until `delete`)
   */
  ttlMs?: number;
}

// ARGV: data, max length, ttl in ms ('0': none), then the origin's field/value pairs (r runId, s seq, a attempt,
// t fencing token). All or nothing: the TTL command runs once before the first write (it fails there as it
// would later, on an ACL or a bad TTL), so a refused append has appended nothing.
const APPEND_SCRIPT = redisScript(`
if ARGV[3] ~= '0' then redis.call('PEXPIRE', KEYS[2], ARGV[3]) end
local n = redis.call('INCR', KEYS[2])
local fields = { 'd', ARGV[1] }
for i = 4, #ARGV do fields[#fields + 1] = ARGV[i] end
redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[2], n .. '-1', unpack(fields))
if ARGV[3] ~= '0' then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
end
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
  private readonly ttlMs: number | undefined;
  private readonly readers = new Set<RedisConnection<Redis>>();
  /** Set by `close()`: subscriptions stop instead of reconnecting. */
  private closed = false;

  /**
   * @param options - `client` or `url`, `keyPrefix` (default `dumplings:stream:`), `maxLength` (default 10000), `blockMs` (default 1000),
   *   `ttlMs` (default none), timeouts
   * @throws {InvalidOptionError} on a malformed URL, a timeout or `blockMs` that is not a positive number of ms, or `prefix` and `keyPrefix` both given and different
   */
  constructor(options: RedisRunStreamOptions = {}) {
    checkOptions("RedisRunStream", options, STREAM_OPTIONS);
    const { prefix, maxLength, blockMs, ttlMs, ...rest } = options;
    const keyPrefix = renamedOption("keyPrefix", rest.keyPrefix, "prefix", prefix);
    this.blockMs = positiveMs("blockMs", blockMs, 1000);
    this.ttlMs = ttlMs === undefined ? undefined : positiveMs("ttlMs", ttlMs, 1);
    this.conn = new RedisConnection<Redis>({ ...rest, keyPrefix } as RedisConnectionOptions<Redis>, {
      label: "run stream",
      keyPrefix: "dumplings:stream:",
      sourceOfTruth: true,
    });
    this.prefix = this.conn.keyPrefix;
    this.maxLength = maxLength ?? 10_000;
  }

  private key(runId: string) {
    return `${this.prefix}{${runId}}:events`;
  }

  /** {@inheritDoc RunEventStream.append} @throws {BackendError} when Redis fails */
  async append(runId: string, data: JsonValue, origin?: EventOrigin): Promise<number> {
    assertJson(data, "stream event");
    const tags = tagsOf(runId, originOf(runId, origin));
    const fields: string[] = [];
    if (tags.runId !== undefined) fields.push("r", tags.runId);
    if (tags.seq !== undefined) fields.push("s", String(tags.seq));
    if (tags.attempt !== undefined) fields.push("a", String(tags.attempt));
    if (tags.fencingToken !== undefined) fields.push("t", String(tags.fencingToken));
    const n = await this.conn.call(`cannot append to the stream of run "${runId}"`, runId, (c) =>
      runScript(
        c,
        APPEND_SCRIPT,
        [this.key(runId), `${this.prefix}{${runId}}:n`],
        [
          JSON.stringify(data),
          String(this.maxLength),
          String(this.ttlMs === undefined ? 0 : Math.ceil(this.ttlMs)),
          ...fields,
        ],
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

  /**
   * {@inheritDoc RunEventStream.subscribe}
   *
   * A lost connection (killed, reset, timed out) is replaced by a fresh one, after a backoff (50 ms,
   * doubling, at most 1 s), and the subscription goes on from its cursor: no event is lost or repeated.
   * It gives up when it has not read for `connectTimeoutMs` since the first failure (plus the last
   * connection attempt, itself bounded by `connectTimeoutMs`).
   *
   * @throws {BackendError} when Redis fails with an error reply, or stays unreachable past that budget
   * @throws {RunStreamError} when the events after the cursor were trimmed (`reason: "trimmed"`); with
   *   `journal`, when the finished run's stream is gone or its producer was lost
   * @throws {InvalidOptionError} on an unknown option, an `after` that is not a non-negative integer, a `journal` that is not one
   */
  async *subscribe(runId: string, options: SubscribeOptions = {}): AsyncIterable<RunStreamEvent> {
    checkSubscribe(options);
    const { journal, signal, until } = options;
    // A blocked XREAD answers within blockMs: bound it by that plus the command timeout.
    // Only a subscription whose connection has been up is reconnected: one that never connected (Redis
    // down, known down) fails at once, as every other call does.
    let connected = false;
    const open = () => {
      const r = this.conn.duplicate({ commandTimeout: this.blockMs + this.conn.commandTimeoutMs });
      this.readers.add(r);
      const client = r.client as unknown as { status?: string; once?: (event: string, fn: () => void) => void };
      if (client.status === "ready") connected = true;
      else
        client.once?.("ready", () => {
          connected = true;
        });
      return r;
    };
    let reader = open();
    let after = options.after ?? 0;
    let idle = journal !== undefined; // with a journal, look at the run before blocking at all
    let failingSince: number | undefined;
    let backoff = 50;
    try {
      while (!signal?.aborted) {
        const end = idle && journal ? await settle(this, runId, after, journal) : undefined;
        if (end) {
          for (const e of end.events) {
            yield e;
            if (until?.(e)) return;
          }
          if (end.error) throw end.error;
          return;
        }
        const from = after === 0 ? "0-0" : `${after}-1`;
        let res: [string, [string, string[]][]][] | null;
        try {
          res = (await reader.call(`cannot read the stream of run "${runId}"`, runId, (c) =>
            c.call("XREAD", "BLOCK", this.blockMs, "STREAMS", this.key(runId), from),
          )) as [string, [string, string[]][]][] | null;
        } catch (e) {
          if (signal?.aborted || this.closed || !connected || !lostConnection(e)) throw e;
          failingSince ??= Date.now();
          if (Date.now() - failingSince >= this.conn.connectTimeoutMs) {
            throw new BackendError(
              "redis",
              `cannot read the stream of run "${runId}": the subscription's connection was lost and not replaced within connectTimeoutMs (${this.conn.connectTimeoutMs} ms); its cursor was ${after}`,
              { key: runId, cause: e },
            );
          }
          this.readers.delete(reader);
          reader.disconnect();
          await pause(backoff, signal);
          backoff = Math.min(backoff * 2, 1000);
          reader = open();
          continue;
        }
        failingSince = undefined;
        backoff = 50;
        const events = (res ?? []).flatMap(([, entries]) => entries.map(parseEntry));
        checkGap(runId, after, events);
        idle = events.length === 0;
        for (const e of events) {
          yield e;
          after = e.index;
          if (until?.(e)) return;
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
    this.closed = true;
    for (const r of this.readers) r.disconnect();
    await this.conn.close();
  }
}

/** Whether a failed read lost its connection (killed, reset, timed out), rather than Redis refusing the command. */
function lostConnection(e: unknown): boolean {
  if (!(e instanceof BackendError) || e.cause === undefined) return false;
  return !(e.cause instanceof Error && e.cause.name === "ReplyError");
}

/** Waits `ms`, or less when `signal` aborts. */
function pause(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      signal?.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal?.addEventListener("abort", done);
  });
}

function parseEntry([id, fields]: [string, string[]]): RunStreamEvent {
  const tags: Tags = {};
  let data: JsonValue = null;
  for (let i = 0; i + 1 < fields.length; i += 2) {
    const value = fields[i + 1] as string;
    const field = fields[i];
    if (field === "d") data = JSON.parse(value) as JsonValue;
    else if (field === "r") tags.runId = value;
    else if (field === "s") tags.seq = Number(value);
    else if (field === "a") tags.attempt = Number(value);
    else if (field === "t") tags.fencingToken = Number(value);
  }
  return { index: Number(id.split("-")[0]), ...tags, data };
}

// ---------------------------------------------------------------- rebuilding the text

/** Options of {@link rebuildText}. */
export interface RebuildTextOptions {
  /**
   * The run's step records (`journal.readSteps(runId)`): keep only the events
   * of each step's completed attempt, so the text is exactly what the journal
   * recorded (an attempt still streaming, or a failed step, adds nothing).
   * Without them, the latest attempt of each step is kept (what a live reader shows).
   */
  steps?: readonly StepRecord[];
  /** Only the text streamed by this step (0-based `seq`). @default every step and the events outside steps */
  seq?: number;
  /** `data.type` of the events whose `data.text` is the text. @default "token" */
  type?: string;
}

/** Options of {@link readText}. */
export interface ReadTextOptions extends RebuildTextOptions {
  /** The run's journal: its step records are read and used as `steps` (ignored when `steps` is given). */
  journal?: Pick<Journal, "readSteps">;
}

type Obj = { [key: string]: JsonValue };
const objectOf = (v: JsonValue): Obj | undefined =>
  v !== null && typeof v === "object" && !Array.isArray(v) ? (v as Obj) : undefined;
const intOf = (v: JsonValue | undefined): number | undefined =>
  typeof v === "number" && Number.isInteger(v) && v >= 0 ? v : undefined;

/** The step attempt that appended `e`: its tags, else the `seq`/`attempt` its data carries (a stream that drops tags). */
function attemptOf(e: RunStreamEvent, data: Obj | undefined) {
  let seq = e.seq;
  let attempt = e.attempt;
  if (seq === undefined && data) {
    seq = intOf(data.seq);
    attempt = intOf(data.attempt);
    // untagged reset: its data names the abandoned attempt; it was appended by the next one
    if (data.type === "reset" && attempt !== undefined) attempt += 1;
  }
  return { seq, attempt, token: e.fencingToken };
}

/** (fencing token, attempt) ordering: a later executor, then a later attempt, is newer. */
const newer = (a: [number, number], b: [number, number]) => a[0] > b[0] || (a[0] === b[0] && a[1] > b[1]);

/**
 * Rebuilds the text a run streamed, from its side-channel events: the
 * concatenated `data.text` of the `token` events, without the tokens of
 * abandoned attempts (case pb-35: a retried `llm` step gives `"Hello, world"`,
 * never `"Hello, Hello, world"`).
 *
 * Rules, per step (`seq`):
 * - with `steps` (the journal's records): only the events of the attempt the
 *   journal recorded as completed (same `attempt`, same `fencingToken`);
 * - without: only the events of the latest attempt (highest `fencingToken`,
 *   then highest `attempt`), minus any attempt a `{ type: "reset", seq, attempt }`
 *   event abandoned (that attempt and earlier ones, wherever their events
 *   arrived — a zombie's late tokens included);
 * - events outside steps (no `seq`) are always kept.
 *
 * Pure: a live reader can keep the events it received and call it again.
 *
 * @param events - a run's events in stream order (`stream.read(runId)` or those of a subscription)
 * @param options - `steps` (journal records), `seq` (one step), `type` (default `"token"`)
 * @returns the text
 * @example
 * const events = [];
 * for await (const e of stream.subscribe(runId, { signal })) {
 *   events.push(e);
 *   render(rebuildText(events));
 * }
 */
export function rebuildText(events: readonly RunStreamEvent[], options: RebuildTextOptions = {}): string {
  checkOptions("rebuildText", options, REBUILD_OPTIONS);
  const type = options.type ?? "token";
  const latest = new Map<number, [number, number]>();
  const resets: { seq: number; attempt: number; token: number }[] = [];
  for (const e of events) {
    const data = objectOf(e.data);
    const { seq, attempt, token } = attemptOf(e, data);
    if (seq !== undefined && attempt !== undefined) {
      const key: [number, number] = [token ?? 0, attempt];
      const seen = latest.get(seq);
      if (!seen || newer(key, seen)) latest.set(seq, key);
    }
    if (data?.type === "reset") {
      const rSeq = intOf(data.seq);
      const rAttempt = intOf(data.attempt);
      if (rSeq !== undefined && rAttempt !== undefined) {
        resets.push({ seq: rSeq, attempt: rAttempt, token: token ?? Number.POSITIVE_INFINITY });
      }
    }
  }
  const completed = new Map<number, StepRecord>();
  for (const s of options.steps ?? []) if (s.status === "completed") completed.set(s.seq, s);
  let text = "";
  for (const e of events) {
    const data = objectOf(e.data);
    if (data?.type !== type || typeof data.text !== "string") continue;
    const { seq, attempt, token } = attemptOf(e, data);
    if (seq === undefined) {
      if (options.seq === undefined) text += data.text;
      continue;
    }
    if (options.seq !== undefined && seq !== options.seq) continue;
    if (attempt === undefined) {
      text += data.text;
      continue;
    }
    if (options.steps) {
      const rec = completed.get(seq);
      if (rec && rec.attempt === attempt && (token === undefined || token === rec.fencingToken)) text += data.text;
      continue;
    }
    const best = latest.get(seq);
    if (best && (best[0] !== (token ?? 0) || best[1] !== attempt)) continue;
    if (resets.some((r) => r.seq === seq && attempt <= r.attempt && (token ?? 0) <= r.token)) continue;
    text += data.text;
  }
  return text;
}

/**
 * Reads a run's side channel and rebuilds the text it streamed, without the
 * tokens of abandoned attempts (see {@link rebuildText} for the rules). With
 * `journal`, exactly the text of the journaled (completed) attempts: for a
 * durable agent's run, the text of its recorded assistant messages.
 *
 * A stream whose first events were trimmed (a {@link RedisRunStream} keeps the
 * last `maxLength` events of a run) is refused rather than rebuilt without its
 * beginning: a `RunStreamError` (`reason: "trimmed"`, a `FormatError`). With
 * `journal`, read the recorded step outputs instead (they hold the whole text).
 *
 * @param stream - the run's side channel
 * @param runId - the run
 * @param options - `journal` (or `steps`), `seq` (one step's text), `type` (default `"token"`)
 * @returns the text (empty when the run streamed nothing)
 * @throws {BackendError} when the stream or the journal fails
 * @throws {RunStreamError} (a `FormatError`, `reason: "trimmed"`) when the stream no longer holds the run's first events
 * @example
 * await runDurable("chat-1", agent.workflow(), { journal, stream, input: { messages } });
 * await readText(stream, "chat-1", { journal }); // "Hello, world" even if the first llm attempt died mid-stream
 */
export async function readText(stream: RunEventStream, runId: string, options: ReadTextOptions = {}): Promise<string> {
  checkOptions("readText", options, READ_TEXT_OPTIONS);
  const { journal, ...rest } = options;
  const events = await stream.read(runId);
  checkGap(runId, 0, events);
  const steps = rest.steps ?? (journal ? await journal.readSteps(runId) : undefined);
  return rebuildText(events, { ...rest, ...(steps ? { steps } : {}) });
}
