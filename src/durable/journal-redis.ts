/**
 * Redis journal: each run's row, step records, signals and audit events live
 * under keys sharing the hash tag `{runId}`; every operation is one Lua
 * script, so the fencing-token check and the write are atomic. User JSON
 * (outputs, inputs, signal values) is stored as opaque strings and never
 * decoded inside Lua (cjson would reformat numbers and empty arrays).
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
import {
  globEscape,
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
  JournalEventType,
  LeaseResult,
  RunPatch,
  RunRecord,
  RunStatus,
  SignalRecord,
  StepRecord,
  UpdateRunResult,
} from "./journal.js";
import { checkStepWrite, jsonColumn, runFromRow } from "./journal.js";

/**
 * Options of {@link RedisJournal}: the Redis connection options shared by
 * every Redis component (`client`, `url`, `keyPrefix`, `connectTimeoutMs`,
 * `commandTimeoutMs`; README, "Redis connection options").
 */
export interface RedisJournalOptions extends RedisConnectionOptions<Redis> {
  /** Prefix of every key of the journal. @default "dumplings:durable:" */
  keyPrefix?: string;
  /** @deprecated Use `keyPrefix` (the same; giving both with different values is an `InvalidOptionError`). */
  prefix?: string;
}

const TOKEN_CHECK = `
local cur = redis.call('HGET', KEYS[1], 'fencing_token')
if not cur then return {'notfound'} end
if tonumber(cur) ~= tonumber(ARGV[1]) then return {'stale', cur} end`;

const SCRIPTS = {
  create: redisScript(`
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'run_id', ARGV[1], 'workflow', ARGV[2], 'status', 'pending', 'input_json', ARGV[3],
  'fencing_token', '0', 'created_at', ARGV[4], 'updated_at', ARGV[4])
redis.call('RPUSH', KEYS[2], ARGV[5])
redis.call('ZADD', KEYS[3], ARGV[4], ARGV[1])
return 1`),
  lease: redisScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return {'notfound'} end
local f = redis.call('HMGET', KEYS[1], 'lease_owner', 'lease_expires_at', 'fencing_token')
local now = tonumber(ARGV[3])
if f[1] and f[2] and tonumber(f[2]) > now and f[1] ~= ARGV[1] then return {'held', f[1], f[2]} end
local token = tonumber(f[3]) + 1
local exp = now + tonumber(ARGV[2])
redis.call('HSET', KEYS[1], 'fencing_token', tostring(token), 'lease_owner', ARGV[1], 'lease_expires_at', tostring(exp),
  'updated_at', ARGV[3])
redis.call('RPUSH', KEYS[2], cjson.encode({type = 'lease_acquired', at = now, name = ARGV[1], fencingToken = token}))
return {'ok', tostring(token), tostring(exp)}`),
  renew: redisScript(`${TOKEN_CHECK}
local exp = tonumber(ARGV[3]) + tonumber(ARGV[2])
redis.call('HSET', KEYS[1], 'lease_expires_at', tostring(exp))
return {'ok', tostring(exp)}`),
  release: redisScript(`${TOKEN_CHECK}
redis.call('HDEL', KEYS[1], 'lease_owner', 'lease_expires_at')
return {'ok'}`),
  writeStep: redisScript(`${TOKEN_CHECK}
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
redis.call('RPUSH', KEYS[4], ARGV[6])
return {'ok'}`),
  updateRun: redisScript(`${TOKEN_CHECK}
if ARGV[2] == 'waiting' and ARGV[5] ~= '' then
  local s = redis.call('HGET', KEYS[2], string.sub(ARGV[5], 2))
  if s then return {'signal', s} end
end
redis.call('HSET', KEYS[1], 'status', ARGV[2], 'updated_at', ARGV[7])
local fields = {'output_json', 'error_json', 'waiting_for', 'wake_at'}
for i = 1, 4 do
  local v = ARGV[2 + i]
  if v == '' then redis.call('HDEL', KEYS[1], fields[i]) else redis.call('HSET', KEYS[1], fields[i], string.sub(v, 2)) end
end
redis.call('RPUSH', KEYS[3], ARGV[8])
return {'ok'}`),
  signal: redisScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return {'notfound'} end
if redis.call('HSETNX', KEYS[2], ARGV[1], ARGV[2]) == 0 then return {'conflict'} end
redis.call('RPUSH', KEYS[3], ARGV[3])
local run = redis.call('HGETALL', KEYS[1])
table.insert(run, 1, 'ok')
return run`),
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
  return { runId, name, sentAt: Number(stored.slice(0, nl)), value: JSON.parse(stored.slice(nl + 1)) as JsonValue };
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
  readonly client: Redis;
  private readonly conn: RedisConnection<Redis>;
  private readonly prefix: string;

  /**
   * @param options - `client` or `url`, `keyPrefix` (default `dumplings:durable:`), timeouts
   * @throws {InvalidOptionError} on a malformed URL, a timeout that is not a positive number of ms, or `prefix` and `keyPrefix` both given and different
   */
  constructor(options: RedisJournalOptions = {}) {
    const { prefix, ...rest } = options;
    const keyPrefix = renamedOption("keyPrefix", rest.keyPrefix, "prefix", prefix);
    this.conn = new RedisConnection({ ...rest, keyPrefix }, { label: "journal", keyPrefix: "dumplings:durable:" });
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

  private eventJson(type: JournalEventType, e: Partial<JournalEvent> = {}): string {
    return JSON.stringify({ type, at: Date.now(), ...e });
  }

  /** {@inheritDoc Journal.createRun} */
  async createRun(init: { runId: string; workflow: string; input: JsonValue }) {
    const input = jsonColumn(init.input, "run input") ?? "null";
    const created = await this.exec(
      "create",
      init.runId,
      SCRIPTS.create,
      [this.k(init.runId, "run"), this.k(init.runId, "events"), this.index],
      [init.runId, init.workflow, input, Date.now(), this.eventJson("run_created", { name: init.workflow })],
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
        const run = runFromRow(row);
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
      [owner, ttlMs, Date.now()],
    )) as Reply;
    if (r[0] === "notfound") throw new RunNotFoundError(runId);
    if (r[0] === "held") return { acquired: false, owner: String(r[1]), expiresAt: Number(r[2]) };
    return { acquired: true, fencingToken: Number(r[1]), expiresAt: Number(r[2]) };
  }

  /** {@inheritDoc Journal.renewLease} */
  async renewLease(runId: string, token: number, ttlMs: number): Promise<number> {
    const r = (await this.exec(
      "renew the lease of",
      runId,
      SCRIPTS.renew,
      [this.k(runId, "run")],
      [token, ttlMs, Date.now()],
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
    const h = await this.call("read the steps of", runId, (c) => c.hgetall(this.k(runId, "steps")));
    return Object.values(h)
      .map((text) => JSON.parse(text) as StepRecord)
      .sort((a, b) => a.seq - b.seq);
  }

  /** {@inheritDoc Journal.writeStep} */
  async writeStep(token: number, record: StepRecord): Promise<void> {
    jsonColumn(record.output, `step "${record.name}" output`);
    const stored: StepRecord = { ...record, fencingToken: token };
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
        JSON.stringify(stored),
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
        Date.now(),
        this.eventJson(`run_${patch.status}` as JournalEventType, {
          ...(patch.waitingFor !== undefined ? { name: patch.waitingFor } : {}),
          fencingToken: token,
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
      [name, `${Date.now()}\n${text}`, this.eventJson("signal_received", { name })],
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
      ...(JSON.parse(text) as Omit<JournalEvent, "runId" | "index">),
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

  /** Deletes every key under this journal's prefix (tests, teardown). @throws {BackendError} */
  async clear(): Promise<void> {
    let cursor = "0";
    do {
      const [next, keys] = await this.conn.call("cannot clear the journal", undefined, (c) =>
        c.scan(cursor, "MATCH", `${globEscape(this.prefix)}*`, "COUNT", 500),
      );
      if (keys.length) await this.conn.call("cannot clear the journal", undefined, (c) => c.del(...keys));
      cursor = next;
    } while (cursor !== "0");
  }

  /** Quits the client when this journal created it (an injected client is left open). Idempotent. */
  async close(): Promise<void> {
    await this.conn.close();
  }
}
