/**
 * Redis journal: each run's row, step records, signals and audit events live
 * under keys sharing the hash tag `{runId}`; every operation is one Lua
 * script, so the fencing-token check and the write are atomic. User JSON
 * (outputs, inputs, signal values) is stored as opaque strings and never
 * decoded inside Lua (cjson would reformat numbers and empty arrays).
 *
 * Time is the server's: every script reads `TIME` itself to judge a lease's
 * expiry and to stamp `expiresAt`, `created_at`, `updated_at`, event `at`
 * and signal `sentAt`, so the clocks of the machines calling it play no
 * part (case pb-32).
 *
 * Persistence follows the Redis server's settings: run Redis with AOF
 * (`appendfsync everysec` or `always`) when the journal must survive a Redis
 * restart. Cluster mode is not supported (the run index is one key).
 *
 * The connection comes from the Redis driver shared by every Redis component
 * (same options and defaults, README "Redis connection options"; ioredis is
 * loaded only when the journal creates its own client): a dead Redis is a
 * `BackendError` within `connectTimeoutMs`, never a hang nor an unhandled
 * `'error'` event.
 *
 * @module
 */
import type { Redis } from "ioredis";
import { BackendError } from "../core/errors.js";
import type { JsonValue } from "../core/json.js";
import { checkOptions, optionKeys } from "../core/options.js";
import {
  type IoRedisClient,
  REDIS_CONNECTION_KEYS,
  RedisConnection,
  type RedisConnectionOptions,
  type RedisScript,
  redisScript,
  renamedOption,
  runScript,
} from "../drivers/redis.js";
import { RunNotFoundError, SignalConflictError, StaleFencingTokenError } from "./errors.js";
import type {
  Journal,
  JournalEvent,
  JournalEventInput,
  JournalEventType,
  LeaseResult,
  RunPatch,
  RunRecord,
  RunStatus,
  SignalRecord,
  StepRecord,
  UpdateRunResult,
  WriteStepOptions,
} from "./journal.js";
import {
  checkResetSeq,
  checkStepWrite,
  ENDED_RUN_STATUSES,
  jsonColumn,
  leaseMs,
  outputColumn,
  parseJournalJson,
  RETRYABLE_RUN_STATUSES,
  retryRefused,
  runFromRow,
  syncedWrite,
} from "./journal.js";

/** The keys of {@link RedisJournalOptions}: any other is an `InvalidOptionError`. */
const JOURNAL_REDIS_OPTIONS = optionKeys<RedisJournalOptions>({
  ...REDIS_CONNECTION_KEYS,
  prefix: true,
});

/**
 * Options of {@link RedisJournal}: the Redis connection options shared by
 * every Redis component (`client`, `url`, `keyPrefix`, `connectTimeoutMs`,
 * `commandTimeoutMs`; README, "Redis connection options").
 */
export interface RedisJournalOptions extends RedisConnectionOptions {
  /** Prefix of every key of the journal. @default "dumplings:durable:" */
  keyPrefix?: string;
  /** @deprecated Use `keyPrefix` (the same; giving both with different values is an `InvalidOptionError`). */
  prefix?: string;
}

const TOKEN_CHECK = `
local cur = redis.call('HGET', KEYS[1], 'fencing_token')
if not cur then return {'notfound'} end
if tonumber(cur) ~= tonumber(ARGV[1]) then return {'stale', cur} end`;

/**
 * The store's clock inside a script: `TIME` (allowed before writes since
 * Redis 5's effect replication, the only mode of Redis 7), in epoch ms, and
 * how an event's JSON (built by the caller without `at`) gets it: spliced in
 * as text, so user strings in the event are never decoded by cjson.
 */
const CLOCK = `
local function nowms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function fmt(n) return string.format('%d', n) end
local function stamp(event, now, token, extra)
  local head = '{"at":' .. fmt(now)
  if token then head = head .. ',"fencingToken":' .. fmt(token) end
  return head .. (extra or '') .. ',' .. string.sub(event, 2)
end`;

/** Operators' common write: new status, token + 1, lease and the given fields cleared. */
const TAKE_OVER = `
local function takeover(status, now, clear)
  local token = tonumber(redis.call('HGET', KEYS[1], 'fencing_token')) + 1
  redis.call('HSET', KEYS[1], 'status', status, 'fencing_token', tostring(token), 'updated_at', fmt(now))
  redis.call('HDEL', KEYS[1], 'lease_owner', 'lease_expires_at', unpack(clear))
  return token
end
local function runreply()
  local run = redis.call('HGETALL', KEYS[1])
  table.insert(run, 1, 'ok')
  return run
end`;

const luaSet = (values: Iterable<string>) => `{${[...values].map((v) => `['${v}'] = true`).join(", ")}}`;

const SCRIPTS = {
  create: redisScript(`${CLOCK}
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local now = nowms()
redis.call('HSET', KEYS[1], 'run_id', ARGV[1], 'workflow', ARGV[2], 'status', 'pending', 'input_json', ARGV[3],
  'fencing_token', '0', 'created_at', fmt(now), 'updated_at', fmt(now))
redis.call('RPUSH', KEYS[2], stamp(ARGV[4], now))
redis.call('ZADD', KEYS[3], fmt(now), ARGV[1])
return 1`),
  lease: redisScript(`${CLOCK}
if redis.call('EXISTS', KEYS[1]) == 0 then return {'notfound'} end
local f = redis.call('HMGET', KEYS[1], 'lease_owner', 'lease_expires_at', 'fencing_token')
local now = nowms()
if f[1] and f[2] and tonumber(f[2]) > now and f[1] ~= ARGV[1] then return {'held', f[1], f[2]} end
local token = tonumber(f[3]) + 1
local exp = now + tonumber(ARGV[2])
redis.call('HSET', KEYS[1], 'fencing_token', tostring(token), 'lease_owner', ARGV[1], 'lease_expires_at', fmt(exp),
  'updated_at', fmt(now))
redis.call('RPUSH', KEYS[2], stamp(ARGV[3], now, token))
return {'ok', tostring(token), fmt(exp), redis.call('HGET', KEYS[1], 'status')}`),
  renew: redisScript(`${CLOCK}${TOKEN_CHECK}
local exp = nowms() + tonumber(ARGV[2])
redis.call('HSET', KEYS[1], 'lease_expires_at', fmt(exp))
return {'ok', fmt(exp)}`),
  release: redisScript(`${TOKEN_CHECK}
redis.call('HDEL', KEYS[1], 'lease_owner', 'lease_expires_at')
return {'ok'}`),
  writeStep: redisScript(`${CLOCK}${TOKEN_CHECK}
local n = redis.call('HLEN', KEYS[3])
local seq = tonumber(ARGV[2])
if seq > n then return {'gap', tostring(n)} end
local meta = redis.call('HGET', KEYS[3], ARGV[2])
if meta then
  local sep = string.find(meta, ':', 1, true)
  local st = string.sub(meta, 1, sep - 1)
  local nm = string.sub(meta, sep + 1)
  if nm ~= ARGV[3] or st == 'completed' then return {'conflict', tostring(n), st, nm} end
end
redis.call('HSET', KEYS[3], ARGV[2], ARGV[4] .. ':' .. ARGV[3])
redis.call('HSET', KEYS[2], ARGV[2], ARGV[5])
redis.call('RPUSH', KEYS[4], stamp(ARGV[6], nowms()))
return {'ok'}`),
  updateRun: redisScript(`${CLOCK}${TOKEN_CHECK}
if ARGV[2] == 'waiting' and ARGV[5] ~= '' then
  local s = redis.call('HGET', KEYS[2], string.sub(ARGV[5], 2))
  if s then return {'signal', s} end
end
local now = nowms()
redis.call('HSET', KEYS[1], 'status', ARGV[2], 'updated_at', fmt(now))
local fields = {'output_json', 'error_json', 'waiting_for', 'wake_at'}
for i = 1, 4 do
  local v = ARGV[2 + i]
  if v == '' then redis.call('HDEL', KEYS[1], fields[i]) else redis.call('HSET', KEYS[1], fields[i], string.sub(v, 2)) end
end
redis.call('RPUSH', KEYS[3], stamp(ARGV[7], now))
return {'ok'}`),
  signal: redisScript(`${CLOCK}
if redis.call('EXISTS', KEYS[1]) == 0 then return {'notfound'} end
local now = nowms()
if redis.call('HSETNX', KEYS[2], ARGV[1], fmt(now) .. '\\n' .. ARGV[2]) == 0 then return {'conflict'} end
redis.call('RPUSH', KEYS[3], stamp(ARGV[3], now))
local run = redis.call('HGETALL', KEYS[1])
table.insert(run, 1, 'ok')
return run`),
  appendEvent: redisScript(`${CLOCK}
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('RPUSH', KEYS[2], stamp(ARGV[1], nowms()))
return 1`),
  cancel: redisScript(`${CLOCK}${TAKE_OVER}
if redis.call('EXISTS', KEYS[1]) == 0 then return {'notfound'} end
local ended = ${luaSet(ENDED_RUN_STATUSES)}
if ended[redis.call('HGET', KEYS[1], 'status')] then return runreply() end
local now = nowms()
local token = takeover('cancelled', now, {'waiting_for', 'wake_at'})
redis.call('RPUSH', KEYS[2], stamp(ARGV[1], now, token))
return runreply()`),
  reset: redisScript(`${CLOCK}${TAKE_OVER}
if redis.call('EXISTS', KEYS[1]) == 0 then return {'notfound'} end
local n = redis.call('HLEN', KEYS[3])
for i = tonumber(ARGV[1]) + 1, n - 1 do
  redis.call('HDEL', KEYS[2], fmt(i))
  redis.call('HDEL', KEYS[3], fmt(i))
end
local now = nowms()
local token = takeover('pending', now, {'output_json', 'error_json', 'waiting_for', 'wake_at'})
redis.call('RPUSH', KEYS[4], stamp(ARGV[2], now, token))
return runreply()`),
  retry: redisScript(`${CLOCK}${TAKE_OVER}
if redis.call('EXISTS', KEYS[1]) == 0 then return {'notfound'} end
local st = redis.call('HGET', KEYS[1], 'status')
local n = redis.call('HLEN', KEYS[3])
local retryable = ${luaSet(RETRYABLE_RUN_STATUSES)}
if not retryable[st] then return {'refused', st, fmt(n - 1)} end
local dropped = ''
if n > 0 then
  local meta = redis.call('HGET', KEYS[3], fmt(n - 1))
  local sep = string.find(meta, ':', 1, true)
  if string.sub(meta, 1, sep - 1) == 'failed' then
    redis.call('HDEL', KEYS[2], fmt(n - 1))
    redis.call('HDEL', KEYS[3], fmt(n - 1))
    dropped = ',"seq":' .. fmt(n - 1) .. ',"name":' .. cjson.encode(string.sub(meta, sep + 1))
  end
end
local now = nowms()
local token = takeover('pending', now, {'output_json', 'error_json', 'waiting_for', 'wake_at'})
redis.call('RPUSH', KEYS[4], stamp(ARGV[1], now, token, dropped))
return runreply()`),
} as const;

type Reply = (string | null)[];

function pairs(flat: (string | null)[]): Record<string, string> {
  const out: Record<string, string> = {};
  for (let i = 0; i + 1 < flat.length; i += 2) out[String(flat[i])] = String(flat[i + 1]);
  return out;
}

/** `""` = absent, `"=" + text` = present (so an empty string value stays representable). */
const opt = (v: string | number | null | undefined) => (v === null || v === undefined ? "" : `=${v}`);

function parseSignal(runId: string, name: string, stored: string): SignalRecord {
  const nl = stored.indexOf("\n");
  const value = parseJournalJson<JsonValue>(
    stored.slice(nl + 1),
    `the value of signal ${JSON.stringify(name)} of run ${JSON.stringify(runId)}`,
  );
  return { runId, name, sentAt: Number(stored.slice(0, nl)), value };
}

/**
 * Redis implementation of {@link Journal} (Lua scripts).
 *
 * @example
 * const journal = new RedisJournal({ url: process.env.REDIS_URL, keyPrefix: "myapp:durable:" });
 */
export class RedisJournal implements Journal {
  readonly name = "redis";
  /** The client in use (created or injected). */
  readonly client: IoRedisClient;
  private readonly conn: RedisConnection<Redis>;
  private readonly prefix: string;

  /**
   * @param options - `client` or `url`, `keyPrefix` (default `dumplings:durable:`), timeouts
   * @throws {InvalidOptionError} on a malformed URL, a timeout that is not a positive number of ms, or `prefix` and `keyPrefix` both given and different
   */
  constructor(options: RedisJournalOptions = {}) {
    checkOptions("redis", options, JOURNAL_REDIS_OPTIONS);
    const { prefix, ...rest } = options;
    const keyPrefix = renamedOption("keyPrefix", rest.keyPrefix, "prefix", prefix);
    this.conn = new RedisConnection<Redis>({ ...rest, keyPrefix } as RedisConnectionOptions<Redis>, {
      label: "journal",
      keyPrefix: "dumplings:durable:",
    });
    this.client = this.conn.client;
    this.prefix = this.conn.keyPrefix;
  }

  private k(runId: string, part: "run" | "steps" | "stepmeta" | "signals" | "events") {
    return `${this.prefix}{${runId}}:${part}`;
  }

  private get index() {
    return `${this.prefix}runs`;
  }

  private exec(what: string, runId: string, script: RedisScript, keys: string[], args: (string | number)[]) {
    return this.call(what, runId, (c) => runScript(c, script, keys, args.map(String)));
  }

  private call<T>(what: string, runId: string, fn: (client: Redis) => Promise<T>): Promise<T> {
    return this.conn.call(`cannot ${what} run "${runId}"`, runId, fn);
  }

  private tokenReply(runId: string, token: number, reply: Reply): void {
    if (reply[0] === "notfound") throw new RunNotFoundError(runId);
    if (reply[0] === "stale") throw new StaleFencingTokenError(runId, token, Number(reply[1]));
  }

  /** An event's JSON without `at` (the script stamps it with the store's clock). */
  private eventJson(type: JournalEventType, e: Partial<JournalEvent> = {}): string {
    const { at: _at, runId: _runId, index: _index, ...fields } = e;
    return JSON.stringify({ type, ...fields });
  }

  /** A run hash returned by an operator script (`['ok', field, value, …]`). */
  private runReply(runId: string, r: Reply): RunRecord {
    if (r[0] === "notfound") throw new RunNotFoundError(runId);
    return runFromRow(pairs(r.slice(1)));
  }

  /** {@inheritDoc Journal.now} (`TIME`) */
  async now(): Promise<number> {
    const [sec, usec] = await this.conn.call("cannot read the clock of Redis", undefined, (c) => c.time());
    return Number(sec) * 1000 + Math.floor(Number(usec) / 1000);
  }

  /** {@inheritDoc Journal.createRun} */
  async createRun(init: { runId: string; workflow: string; input: JsonValue }) {
    const input = jsonColumn(init.input, "run input") ?? "null";
    const created = await this.exec(
      "create",
      init.runId,
      SCRIPTS.create,
      [this.k(init.runId, "run"), this.k(init.runId, "events"), this.index],
      [init.runId, init.workflow, input, this.eventJson("run_created", { name: init.workflow })],
    );
    const run = await this.getRun(init.runId);
    if (!run) throw new RunNotFoundError(init.runId);
    return { created: Number(created) === 1, run };
  }

  /** {@inheritDoc Journal.getRun} */
  async getRun(runId: string): Promise<RunRecord | undefined> {
    const h = await this.call("read", runId, (c) => c.hgetall(this.k(runId, "run")));
    return h.run_id === undefined ? undefined : runFromRow(h);
  }

  /** {@inheritDoc Journal.listRuns} */
  async listRuns(filter: { status?: RunStatus; limit?: number } = {}): Promise<RunRecord[]> {
    const ids = await this.conn.call("cannot list runs", undefined, (c) => c.zrevrange(this.index, 0, -1));
    const limit = filter.limit ?? 1000;
    const out: RunRecord[] = [];
    for (let i = 0; i < ids.length && out.length < limit; i += 200) {
      const batch = ids.slice(i, i + 200);
      const res =
        (await this.conn.call("cannot list runs", undefined, (c) => {
          const pipe = c.pipeline();
          for (const id of batch) pipe.hgetall(this.k(id, "run"));
          return pipe.exec();
        })) ?? [];
      for (const [err, h] of res) {
        if (err) throw new BackendError("redis", "cannot list runs", { cause: err });
        const row = h as Record<string, string>;
        if (row.run_id === undefined) continue;
        const run = runFromRow(row, true); // a bad run is listed with its readError
        if (!filter.status || run.status === filter.status) out.push(run);
        if (out.length >= limit) break;
      }
    }
    return out;
  }

  /** {@inheritDoc Journal.acquireLease} */
  async acquireLease(runId: string, owner: string, ttlMs: number): Promise<LeaseResult> {
    const r = (await this.exec(
      "lease",
      runId,
      SCRIPTS.lease,
      [this.k(runId, "run"), this.k(runId, "events")],
      [owner, leaseMs(ttlMs), this.eventJson("lease_acquired", { name: owner })],
    )) as Reply;
    if (r[0] === "notfound") throw new RunNotFoundError(runId);
    if (r[0] === "held") return { acquired: false, owner: String(r[1]), expiresAt: Number(r[2]) };
    return {
      acquired: true,
      fencingToken: Number(r[1]),
      expiresAt: Number(r[2]),
      ...(typeof r[3] === "string" ? { status: r[3] as RunStatus } : {}),
    };
  }

  /** {@inheritDoc Journal.renewLease} */
  async renewLease(runId: string, token: number, ttlMs: number): Promise<number> {
    const r = (await this.exec(
      "renew the lease of",
      runId,
      SCRIPTS.renew,
      [this.k(runId, "run")],
      [token, leaseMs(ttlMs)],
    )) as Reply;
    this.tokenReply(runId, token, r);
    return Number(r[1]);
  }

  /** {@inheritDoc Journal.releaseLease} */
  async releaseLease(runId: string, token: number): Promise<void> {
    await this.exec("release the lease of", runId, SCRIPTS.release, [this.k(runId, "run")], [token]);
  }

  /** {@inheritDoc Journal.readSteps} */
  async readSteps(runId: string): Promise<StepRecord[]> {
    // The records alone (HVALS): their seq is in each, so the fields are neither sent nor made into strings.
    const texts = await this.call("read the steps of", runId, (c) => c.hvals(this.k(runId, "steps")));
    const n = texts.length;
    const parsed = new Array<StepRecord>(n);
    for (let i = 0; i < n; i++) {
      parsed[i] = parseJournalJson<StepRecord>(texts[i] as string, `a step record of run ${JSON.stringify(runId)}`);
    }
    // Seqs have no gaps: the n records are #0…#(n-1), each put in its place (no sort, whose comparator
    // would be called some 10,000 times for 1,000 records). Anything else is sorted.
    const steps = new Array<StepRecord>(n);
    for (const step of parsed) {
      const seq = step.seq;
      if (!Number.isInteger(seq) || seq < 0 || seq >= n || steps[seq] !== undefined) {
        return parsed.sort((a, b) => a.seq - b.seq);
      }
      steps[seq] = step;
    }
    return steps;
  }

  /** {@inheritDoc Journal.writeStep} */
  async writeStep(token: number, record: StepRecord, options?: WriteStepOptions): Promise<void> {
    syncedWrite(this.name, options); // checked; Redis persists as the server is configured
    const output = outputColumn(record);
    // The record's JSON with the output's text spliced in (serialised once, by the step or just above).
    const { output: _output, ...fields } = record;
    const head = JSON.stringify({ ...fields, fencingToken: token });
    const stored = output === null ? head : `${head.slice(0, -1)},"output":${output}}`;
    const r = (await this.exec(
      "write a step of",
      record.runId,
      SCRIPTS.writeStep,
      [
        this.k(record.runId, "run"),
        this.k(record.runId, "steps"),
        this.k(record.runId, "stepmeta"),
        this.k(record.runId, "events"),
      ],
      [
        token,
        record.seq,
        record.name,
        record.status,
        stored,
        this.eventJson(`step_${record.status}`, {
          seq: record.seq,
          name: record.name,
          attempt: record.attempt,
          fencingToken: token,
        }),
      ],
    )) as Reply;
    this.tokenReply(record.runId, token, r);
    if (r[0] === "gap") checkStepWrite(record.runId, token, token, Number(r[1]), undefined, record);
    if (r[0] === "conflict") {
      checkStepWrite(record.runId, token, token, Number(r[1]), { status: String(r[2]), name: String(r[3]) }, record);
    }
  }

  /** {@inheritDoc Journal.updateRun} */
  async updateRun(token: number, runId: string, patch: RunPatch): Promise<UpdateRunResult> {
    const output = jsonColumn(patch.output, "run output");
    const r = (await this.exec(
      "update",
      runId,
      SCRIPTS.updateRun,
      [this.k(runId, "run"), this.k(runId, "signals"), this.k(runId, "events")],
      [
        token,
        patch.status,
        opt(output),
        opt(patch.error === undefined ? undefined : JSON.stringify(patch.error)),
        opt(patch.waitingFor),
        opt(patch.wakeAt),
        this.eventJson(`run_${patch.status}` as JournalEventType, {
          ...(patch.waitingFor !== undefined ? { name: patch.waitingFor } : {}),
          fencingToken: token,
          ...(patch.status === "blocked" && patch.error !== undefined ? { detail: patch.error.message } : {}),
        }),
      ],
    )) as Reply;
    this.tokenReply(runId, token, r);
    if (r[0] === "signal") {
      return { ok: false, signal: parseSignal(runId, patch.waitingFor ?? "", String(r[1])) };
    }
    return { ok: true };
  }

  /** {@inheritDoc Journal.sendSignal} */
  async sendSignal(runId: string, name: string, value: JsonValue): Promise<RunRecord> {
    const text = jsonColumn(value, `signal "${name}" value`) ?? "null";
    const r = (await this.exec(
      "signal",
      runId,
      SCRIPTS.signal,
      [this.k(runId, "run"), this.k(runId, "signals"), this.k(runId, "events")],
      [name, text, this.eventJson("signal_received", { name })],
    )) as Reply;
    if (r[0] === "notfound") throw new RunNotFoundError(runId);
    if (r[0] === "conflict") throw new SignalConflictError(runId, name);
    return runFromRow(pairs(r.slice(1)));
  }

  /** {@inheritDoc Journal.getSignal} */
  async getSignal(runId: string, name: string): Promise<SignalRecord | undefined> {
    const s = await this.call("read a signal of", runId, (c) => c.hget(this.k(runId, "signals"), name));
    return s === null ? undefined : parseSignal(runId, name, s);
  }

  /** {@inheritDoc Journal.listSignals} */
  async listSignals(runId: string): Promise<SignalRecord[]> {
    const h = await this.call("list the signals of", runId, (c) => c.hgetall(this.k(runId, "signals")));
    return Object.entries(h)
      .map(([name, s]) => parseSignal(runId, name, s))
      .sort((a, b) => a.sentAt - b.sentAt || a.name.localeCompare(b.name));
  }

  /** {@inheritDoc Journal.readEvents} */
  async readEvents(runId: string): Promise<JournalEvent[]> {
    const list = await this.call("read the events of", runId, (c) => c.lrange(this.k(runId, "events"), 0, -1));
    return list.map((text, index) => ({
      runId,
      index,
      ...parseJournalJson<Omit<JournalEvent, "runId" | "index">>(
        text,
        `event #${index} of run ${JSON.stringify(runId)}`,
      ),
    }));
  }

  /** {@inheritDoc Journal.deleteRun} */
  async deleteRun(runId: string): Promise<void> {
    await this.call("delete", runId, async (c) => {
      await c.del(
        this.k(runId, "run"),
        this.k(runId, "steps"),
        this.k(runId, "stepmeta"),
        this.k(runId, "signals"),
        this.k(runId, "events"),
      );
      await c.zrem(this.index, runId);
    });
  }

  /** {@inheritDoc Journal.appendEvent} */
  async appendEvent(runId: string, event: JournalEventInput): Promise<void> {
    const { type, ...fields } = event;
    const r = await this.exec(
      "append an event to",
      runId,
      SCRIPTS.appendEvent,
      [this.k(runId, "run"), this.k(runId, "events")],
      [this.eventJson(type, fields)],
    );
    if (Number(r) !== 1) throw new RunNotFoundError(runId);
  }

  /** {@inheritDoc Journal.cancelRun} */
  async cancelRun(runId: string, by: string, reason?: string): Promise<RunRecord> {
    const r = (await this.exec(
      "cancel",
      runId,
      SCRIPTS.cancel,
      [this.k(runId, "run"), this.k(runId, "events")],
      [this.eventJson("run_cancelled", { by, ...(reason !== undefined ? { detail: reason } : {}) })],
    )) as Reply;
    return this.runReply(runId, r);
  }

  /** {@inheritDoc Journal.resetRun} */
  async resetRun(runId: string, toSeq: number, by: string): Promise<RunRecord> {
    checkResetSeq(runId, toSeq);
    const r = (await this.exec(
      "reset",
      runId,
      SCRIPTS.reset,
      [this.k(runId, "run"), this.k(runId, "steps"), this.k(runId, "stepmeta"), this.k(runId, "events")],
      [toSeq, this.eventJson("run_reset", { seq: toSeq, by })],
    )) as Reply;
    return this.runReply(runId, r);
  }

  /** {@inheritDoc Journal.retryRun} */
  async retryRun(runId: string, by: string): Promise<RunRecord> {
    const r = (await this.exec(
      "retry",
      runId,
      SCRIPTS.retry,
      [this.k(runId, "run"), this.k(runId, "steps"), this.k(runId, "stepmeta"), this.k(runId, "events")],
      [this.eventJson("run_retried", { by })],
    )) as Reply;
    if (r[0] === "refused") throw retryRefused(runId, String(r[1]), Number(r[2]));
    return this.runReply(runId, r);
  }

  /**
   * Deletes every run of this journal (tests, teardown): the runs its index
   * lists, each run's five keys, then the index. No key pattern is involved,
   * so a prefix holding glob characters (`*`, `?`, `[`) or one that another
   * journal's prefix starts with never reaches another journal's runs.
   *
   * @throws {BackendError} when Redis fails or does not answer in time
   */
  async clear(): Promise<void> {
    const parts = ["run", "steps", "stepmeta", "signals", "events"] as const;
    for (;;) {
      const ids = await this.conn.call("cannot clear the journal", undefined, (c) => c.zrange(this.index, 0, 499));
      if (ids.length === 0) break;
      const res = await this.conn.call("cannot clear the journal", undefined, (c) => {
        const pipe = c.pipeline();
        for (const id of ids) pipe.del(...parts.map((part) => this.k(id, part)));
        pipe.zrem(this.index, ...ids);
        return pipe.exec();
      });
      for (const [err] of res ?? []) {
        if (err) throw new BackendError("redis", "cannot clear the journal", { cause: err });
      }
    }
    await this.conn.call("cannot clear the journal", undefined, (c) => c.del(this.index));
  }

  /** Quits the client when this journal created it (an injected client is left open). Idempotent. */
  async close(): Promise<void> {
    await this.conn.close();
  }
}
