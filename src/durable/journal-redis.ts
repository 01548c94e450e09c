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
import { JournalIntegrityError, RunNotFoundError, SignalConflictError, StaleFencingTokenError } from "./errors.js";
import type {
  Journal,
  JournalEvent,
  JournalEventInput,
  JournalEventType,
  LeaseResult,
  ListRunsFilter,
  PruneOptions,
  PruneResult,
  RunPatch,
  RunRecord,
  RunStatus,
  SignalRecord,
  StepQuery,
  StepRecord,
  UpdateRunResult,
  WriteStepOptions,
} from "./journal.js";
import {
  blobWrite,
  checkListRuns,
  checkPruneOptions,
  checkResetSeq,
  checkStepQuery,
  checkStepWrite,
  createOnlyWrite,
  ENDED_RUN_STATUSES,
  jsonColumn,
  leaseMs,
  outputColumn,
  parseJournalJson,
  RETRYABLE_RUN_STATUSES,
  retryRefused,
  runFromRow,
  signalRefused,
  snapshotWrite,
  syncedWrite,
} from "./journal.js";
import { type AcquireLeaseOptions, leaseReentrant } from "./lease.js";

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
local function touch(now)
  redis.call('ZADD', KEYS[#KEYS], fmt(now), redis.call('HGET', KEYS[1], 'run_id'))
end
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
  touch(now)
  return token
end
local function runreply()
  local run = redis.call('HGETALL', KEYS[1])
  table.insert(run, 1, 'ok')
  return run
end`;

/**
 * A run's step metadata (`stepmeta`: seq → `<status>,<finishedAt>,<1 for a snapshot>:<name>`; an earlier
 * release wrote `<status>:<name>`) inside a script, `KEYS[1]` the run's hash and
 * `KEYS[3]` its `stepmeta`: `parsemeta` splits one entry; `stepmax` is the run's highest seq (-1 without
 * steps), kept in the run's `step_max` field by every script that changes it; a run written by an earlier
 * release has no such field and no holes, so its count of records - 1 is its highest seq.
 */
const STEP_META = `
local function parsemeta(meta)
  local sep = string.find(meta, ':', 1, true)
  local head = string.sub(meta, 1, sep - 1)
  local c1 = string.find(head, ',', 1, true)
  if not c1 then return head, string.sub(meta, sep + 1), nil, false end
  local c2 = string.find(head, ',', c1 + 1, true)
  local fin = tonumber(string.sub(head, c1 + 1, c2 - 1))
  return string.sub(head, 1, c1 - 1), string.sub(meta, sep + 1), fin, string.sub(head, c2 + 1) == '1'
end
local function stepmax()
  local m = redis.call('HGET', KEYS[1], 'step_max')
  if m then return tonumber(m) end
  return redis.call('HLEN', KEYS[3]) - 1
end
local function rescan()
  local mx = -1
  for _, f in ipairs(redis.call('HKEYS', KEYS[3])) do
    local n = tonumber(f)
    if n and n > mx then mx = n end
  end
  redis.call('HSET', KEYS[1], 'step_max', fmt(mx))
  return mx
end`;

/**
 * Blobs inside a script (`ARGV` holds the journal's key prefix): bytes under `<prefix>blob:<ref>`, the
 * number of step records referencing each in the hash `<prefix>blobrefs`, and a run's references per
 * record in its `steprefs` hash (seq → space-separated refs). `unref` drops one reference of each ref of
 * a list and deletes the blobs left without any; it returns how many. `dropstep` deletes one step
 * record (its data, its metadata, its references) and returns how many blobs went with it.
 */
const BLOB_REFS = `
local function unref(prefix, list)
  local n = 0
  for ref in string.gmatch(list, '%S+') do
    local c = redis.call('HINCRBY', prefix .. 'blobrefs', ref, -1)
    if c <= 0 then
      redis.call('HDEL', prefix .. 'blobrefs', ref)
      n = n + redis.call('DEL', prefix .. 'blob:' .. ref)
    end
  end
  return n
end
local function dropstep(steps, meta, steprefs, seq, prefix)
  redis.call('HDEL', steps, seq)
  redis.call('HDEL', meta, seq)
  local refs = redis.call('HGET', steprefs, seq)
  if not refs then return 0 end
  redis.call('HDEL', steprefs, seq)
  return unref(prefix, refs)
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
touch(now)
return 1`),
  lease: redisScript(`${CLOCK}
if redis.call('EXISTS', KEYS[1]) == 0 then return {'notfound'} end
local f = redis.call('HMGET', KEYS[1], 'lease_owner', 'lease_expires_at', 'fencing_token')
local now = nowms()
if f[1] and f[2] and tonumber(f[2]) > now and (f[1] ~= ARGV[1] or ARGV[4] ~= '1') then return {'held', f[1], f[2]} end
local token = tonumber(f[3]) + 1
local exp = now + tonumber(ARGV[2])
redis.call('HSET', KEYS[1], 'fencing_token', tostring(token), 'lease_owner', ARGV[1], 'lease_expires_at', fmt(exp),
  'updated_at', fmt(now))
redis.call('RPUSH', KEYS[2], stamp(ARGV[3], now, token))
touch(now)
return {'ok', tostring(token), fmt(exp), redis.call('HGET', KEYS[1], 'status')}`),
  renew: redisScript(`${CLOCK}${TOKEN_CHECK}
local exp = nowms() + tonumber(ARGV[2])
redis.call('HSET', KEYS[1], 'lease_expires_at', fmt(exp))
return {'ok', fmt(exp)}`),
  release: redisScript(`${TOKEN_CHECK}
redis.call('HDEL', KEYS[1], 'lease_owner', 'lease_expires_at')
return {'ok'}`),
  writeStep: redisScript(`${CLOCK}${TOKEN_CHECK}${STEP_META}${BLOB_REFS}
local mx = stepmax()
local seq = tonumber(ARGV[2])
local meta = redis.call('HGET', KEYS[3], ARGV[2])
if not meta and seq ~= mx + 1 then return {'gap', fmt(mx + 1)} end
if meta then
  local st, nm = parsemeta(meta)
  if nm ~= ARGV[3] or st == 'completed' or ARGV[9] == '1' then return {'conflict', fmt(mx + 1), st, nm} end
end
local prefix = ARGV[7]
local given = {}
for i = 10, #ARGV, 2 do given[ARGV[i]] = i + 1 end
for ref in string.gmatch(ARGV[8], '%S+') do
  if not given[ref] and redis.call('EXISTS', prefix .. 'blob:' .. ref) == 0 then return {'missing', ref} end
end
for ref in string.gmatch(ARGV[8], '%S+') do
  local key = prefix .. 'blob:' .. ref
  if given[ref] and redis.call('EXISTS', key) == 0 then redis.call('SET', key, ARGV[given[ref]]) end
  redis.call('HINCRBY', prefix .. 'blobrefs', ref, 1)
end
local oldrefs = redis.call('HGET', KEYS[5], ARGV[2])
if ARGV[8] ~= '' then redis.call('HSET', KEYS[5], ARGV[2], ARGV[8]) elseif oldrefs then redis.call('HDEL', KEYS[5], ARGV[2]) end
if oldrefs then unref(prefix, oldrefs) end
redis.call('HSET', KEYS[3], ARGV[2], ARGV[4] .. ':' .. ARGV[3])
redis.call('HSET', KEYS[2], ARGV[2], ARGV[5])
if seq > mx then redis.call('HSET', KEYS[1], 'step_max', ARGV[2]) end
redis.call('RPUSH', KEYS[4], stamp(ARGV[6], nowms()))
return {'ok'}`),
  /**
   * Prunes one run (`KEYS`: run, steps, stepmeta, steprefs): deletes at most `ARGV[3]` records that finished
   * before `ARGV[1]` (and at or after `ARGV[5]`) and lie before the `ARGV[2]`-th newest snapshot step, with
   * their blob references (`ARGV[4]`: the key prefix); returns their count, the blobs deleted, then their seqs.
   */
  prune: redisScript(`${CLOCK}${STEP_META}${BLOB_REFS}
if redis.call('EXISTS', KEYS[1]) == 0 then return {0, 0} end
local all = redis.call('HGETALL', KEYS[3])
local cutoff = tonumber(ARGV[1])
local keep = tonumber(ARGV[2])
local batch = tonumber(ARGV[3])
local from = tonumber(ARGV[5])
local snaps = {}
for i = 1, #all, 2 do
  local _, _, _, snap = parsemeta(all[i + 1])
  if snap then snaps[#snaps + 1] = tonumber(all[i]) end
end
if #snaps < keep then return {0, 0} end
table.sort(snaps)
local bound = snaps[#snaps - keep + 1]
if not redis.call('HGET', KEYS[1], 'step_max') then redis.call('HSET', KEYS[1], 'step_max', fmt(stepmax())) end
local out = {0, 0}
for i = 1, #all, 2 do
  if #out - 2 >= batch then break end
  local seq = tonumber(all[i])
  local _, _, fin = parsemeta(all[i + 1])
  if seq and seq < bound and fin and fin < cutoff and fin >= from then
    out[2] = out[2] + dropstep(KEYS[2], KEYS[3], KEYS[4], all[i], ARGV[4])
    out[#out + 1] = all[i]
  end
end
out[1] = #out - 2
return out`),
  /** Deletes a run's keys (`KEYS`: run, steps, stepmeta, signals, events, steprefs) and its blob references. */
  deleteRun: redisScript(`${BLOB_REFS}
for _, refs in ipairs(redis.call('HVALS', KEYS[6])) do unref(ARGV[1], refs) end
redis.call('DEL', unpack(KEYS))
return 1`),
  readSteps: redisScript(`${CLOCK}${STEP_META}
local all = redis.call('HGETALL', KEYS[2])
local from = tonumber(ARGV[1])
local p = ARGV[2]
local plen = string.len(p)
local seqs = {}
for i = 1, #all, 2 do
  local seq = tonumber(all[i])
  if seq and seq >= from then
    local _, nm = parsemeta(all[i + 1])
    if plen == 0 or string.sub(nm, 1, plen) == p then seqs[#seqs + 1] = seq end
  end
end
table.sort(seqs)
local last = tonumber(ARGV[3])
local first = 1
if last > 0 and #seqs > last then first = #seqs - last + 1 end
local out = {}
local fields = {}
for i = first, #seqs do
  fields[#fields + 1] = fmt(seqs[i])
  if #fields == 500 or i == #seqs then
    local got = redis.call('HMGET', KEYS[1], unpack(fields))
    for j = 1, #got do out[#out + 1] = got[j] end
    fields = {}
  end
end
return out`),
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
touch(now)
return {'ok'}`),
  signal: redisScript(`${CLOCK}
if redis.call('EXISTS', KEYS[1]) == 0 then return {'notfound'} end
local ended = ${luaSet(ENDED_RUN_STATUSES)}
local status = redis.call('HGET', KEYS[1], 'status')
if ended[status] then
  if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 1 then return {'conflict'} end
  return {'ended', status}
end
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
  reset: redisScript(`${CLOCK}${TAKE_OVER}${STEP_META}${BLOB_REFS}
if redis.call('EXISTS', KEYS[1]) == 0 then return {'notfound'} end
local mx = stepmax()
for i = tonumber(ARGV[1]) + 1, mx do
  dropstep(KEYS[2], KEYS[3], KEYS[5], fmt(i), ARGV[3])
end
rescan()
local now = nowms()
local token = takeover('pending', now, {'output_json', 'error_json', 'waiting_for', 'wake_at'})
redis.call('RPUSH', KEYS[4], stamp(ARGV[2], now, token))
return runreply()`),
  retry: redisScript(`${CLOCK}${TAKE_OVER}${STEP_META}${BLOB_REFS}
if redis.call('EXISTS', KEYS[1]) == 0 then return {'notfound'} end
local st = redis.call('HGET', KEYS[1], 'status')
local mx = stepmax()
local retryable = ${luaSet(RETRYABLE_RUN_STATUSES)}
if not retryable[st] then return {'refused', st, fmt(mx)} end
local dropped = ''
if mx >= 0 then
  local meta = redis.call('HGET', KEYS[3], fmt(mx))
  local mst, mnm = parsemeta(meta)
  if mst == 'failed' then
    dropstep(KEYS[2], KEYS[3], KEYS[5], fmt(mx), ARGV[2])
    rescan()
    dropped = ',"seq":' .. fmt(mx) .. ',"name":' .. cjson.encode(mnm)
  end
end
local now = nowms()
local token = takeover('pending', now, {'output_json', 'error_json', 'waiting_for', 'wake_at'})
redis.call('RPUSH', KEYS[4], stamp(ARGV[1], now, token, dropped))
return runreply()`),
} as const;

/** The same bytes as a Buffer (ioredis sends a Buffer as is), not copied. */
const asBuffer = (b: Uint8Array): Buffer =>
  Buffer.isBuffer(b) ? b : Buffer.from(b.buffer, b.byteOffset, b.byteLength);

/** Whether `a` sorts before `b` as Redis sorts members of equal score (bytes of UTF-8). */
const memberBefore = (a: string, b: string) => Buffer.compare(Buffer.from(a, "utf8"), Buffer.from(b, "utf8")) < 0;

type Reply = (string | null)[];

/** The keys of one run (`<prefix>{runId}:<part>`). */
const RUN_KEY_PARTS = ["run", "steps", "stepmeta", "signals", "events", "steprefs"] as const;

/** Step records a prune script deletes at most. */
const PRUNE_BATCH = 1000;

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

  private k(runId: string, part: (typeof RUN_KEY_PARTS)[number]) {
    return `${this.prefix}{${runId}}:${part}`;
  }

  /** The runs by creation time (score: `created_at`), which {@link listRuns} pages through. */
  private get index() {
    return `${this.prefix}runs`;
  }

  /**
   * The runs by `updated_at` (the score), kept by every script that changes a run's `updated_at` for the
   * processes of the previous release (a rolling deploy), whose `listRuns` read it; this one does not.
   */
  private get updated() {
    return `${this.prefix}runs:updated`;
  }

  private exec(what: string, runId: string, script: RedisScript, keys: string[], args: (string | number | Buffer)[]) {
    return this.call(what, runId, (c) =>
      runScript(
        c,
        script,
        keys,
        args.map((a) => (Buffer.isBuffer(a) ? a : String(a))),
      ),
    );
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
      [this.k(init.runId, "run"), this.k(init.runId, "events"), this.index, this.updated],
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

  /**
   * {@inheritDoc Journal.listRuns}
   *
   * Pages through the creation index (`runs`, score `created_at`) from the cursor down, 200 runs a round
   * trip, keeping those of the filter: a keyset walk (the runs of the cursor's millisecond that sort before
   * its id, then the older ones) on scores that never change.
   */
  async listRuns(filter?: ListRunsFilter): Promise<RunRecord[]> {
    const f = checkListRuns(this.name, filter);
    const out: RunRecord[] = [];
    const fail = (cause: unknown) => new BackendError("redis", "cannot list runs", { cause });
    /** Reads the runs of `ids` in order, keeps those of the filter; true when the page is full. */
    const take = async (ids: string[]): Promise<boolean> => {
      if (ids.length === 0) return false;
      const res =
        (await this.conn.call("cannot list runs", undefined, (c) => {
          const pipe = c.pipeline();
          for (const id of ids) pipe.hgetall(this.k(id, "run"));
          return pipe.exec();
        })) ?? [];
      for (const [err, h] of res) {
        if (err) throw fail(err);
        const row = h as Record<string, string>;
        if (row.run_id === undefined) continue; // deleted meanwhile
        const run = runFromRow(row, true); // a bad run is listed with its readError
        if (f.status !== undefined && run.status !== f.status) continue;
        if (f.workflow !== undefined && run.workflow !== f.workflow) continue;
        out.push(run);
        if (out.length >= f.limit) return true;
      }
      return false;
    };
    let cursor = f.after;
    for (;;) {
      let max = "+inf";
      if (cursor !== undefined) {
        const { createdAt, runId } = cursor;
        const ties = await this.conn.call("cannot list runs", undefined, (c) =>
          c.zrangebyscore(this.index, createdAt, createdAt),
        );
        if (await take(ties.filter((id) => memberBefore(id, runId)).reverse())) return out;
        max = `(${createdAt}`;
      }
      const batch = await this.conn.call("cannot list runs", undefined, (c) =>
        c.zrevrangebyscore(this.index, max, "-inf", "WITHSCORES", "LIMIT", 0, 200),
      );
      if (batch.length === 0) return out;
      const ids: string[] = [];
      for (let i = 0; i < batch.length; i += 2) ids.push(String(batch[i]));
      if (await take(ids)) return out;
      cursor = { createdAt: Number(batch[batch.length - 1]), runId: String(batch[batch.length - 2]) };
    }
  }

  /** {@inheritDoc Journal.acquireLease} */
  async acquireLease(runId: string, owner: string, ttlMs: number, options?: AcquireLeaseOptions): Promise<LeaseResult> {
    const reentrant = leaseReentrant(this.name, options) ? "1" : "0";
    const r = (await this.exec(
      "lease",
      runId,
      SCRIPTS.lease,
      [this.k(runId, "run"), this.k(runId, "events"), this.updated],
      [owner, leaseMs(ttlMs), this.eventJson("lease_acquired", { name: owner }), reentrant],
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
  async readSteps(runId: string, query?: StepQuery): Promise<StepRecord[]> {
    const q = checkStepQuery(this.name, query);
    if (q !== undefined) return this.querySteps(runId, q);
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

  /**
   * {@link readSteps} with a query: one script filters the run's step metadata (`seq` → status and name,
   * no outputs) and reads only the matching records, the `last` newest of them when asked.
   */
  private async querySteps(
    runId: string,
    q: { fromSeq: number; namePrefix: string; last: number | undefined },
  ): Promise<StepRecord[]> {
    const texts = (await this.exec(
      "read the steps of",
      runId,
      SCRIPTS.readSteps,
      [this.k(runId, "steps"), this.k(runId, "stepmeta")],
      [q.fromSeq, q.namePrefix, q.last ?? 0],
    )) as Reply;
    const steps: StepRecord[] = [];
    for (const text of texts) {
      if (text !== null)
        steps.push(parseJournalJson<StepRecord>(text, `a step record of run ${JSON.stringify(runId)}`));
    }
    return steps;
  }

  /** {@inheritDoc Journal.writeStep} */
  async writeStep(token: number, record: StepRecord, options?: WriteStepOptions): Promise<void> {
    syncedWrite(this.name, options); // checked; Redis persists as the server is configured
    const output = outputColumn(record);
    // The record's JSON with the output's text spliced in (serialised once, by the step or just above).
    const snapshot = snapshotWrite(options);
    const blobs = blobWrite(this.name, options);
    const create = createOnlyWrite(options);
    const { output: _output, snapshot: _snapshot, ...fields } = record;
    const head = JSON.stringify({ ...fields, fencingToken: token, ...(snapshot ? { snapshot: true } : {}) });
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
        this.k(record.runId, "steprefs"),
      ],
      [
        token,
        record.seq,
        record.name,
        `${record.status},${record.finishedAt ?? ""},${snapshot ? "1" : ""}`,
        stored,
        this.eventJson(`step_${record.status}`, {
          seq: record.seq,
          name: record.name,
          attempt: record.attempt,
          fencingToken: token,
        }),
        this.prefix,
        blobs?.refs.join(" ") ?? "",
        create ? "1" : "",
        ...[...(blobs?.bytes ?? [])].flatMap(([ref, bytes]) => [ref, asBuffer(bytes)]),
      ],
    )) as Reply;
    this.tokenReply(record.runId, token, r);
    if (r[0] === "missing") {
      throw new JournalIntegrityError(
        record.runId,
        record.seq,
        `blob ${String(r[1])} is referenced but not stored: pass its bytes in WriteStepOptions.blobs`,
      );
    }
    // refused by the script: the shared check says why
    const found = r[0] === "conflict" ? { status: String(r[2]), name: String(r[3]) } : undefined;
    if (r[0] === "gap" || found) checkStepWrite(record.runId, token, token, Number(r[1]), found, record, create);
  }

  /** {@inheritDoc Journal.updateRun} */
  async updateRun(token: number, runId: string, patch: RunPatch): Promise<UpdateRunResult> {
    const output = jsonColumn(patch.output, "run output");
    const r = (await this.exec(
      "update",
      runId,
      SCRIPTS.updateRun,
      [this.k(runId, "run"), this.k(runId, "signals"), this.k(runId, "events"), this.updated],
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
    if (r[0] === "ended") throw signalRefused(runId, String(r[1]), name);
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
      await runScript(
        c,
        SCRIPTS.deleteRun,
        RUN_KEY_PARTS.map((part) => this.k(runId, part)),
        [this.prefix],
      );
      await c.zrem(this.index, runId);
      await c.zrem(this.updated, runId);
    });
  }

  /**
   * {@inheritDoc Journal.pruneRuns}
   *
   * Walks the run index (`ZSCAN`); per run, scripts that each read the run's step metadata (no outputs)
   * and delete at most 1,000 records. Redis frees the memory as it deletes (`vacuum` has no effect).
   */
  async pruneRuns(options: PruneOptions): Promise<PruneResult> {
    const o = await checkPruneOptions(this.name, options, () => this.now());
    const result: PruneResult = { deletedSteps: 0, deletedBlobs: 0 };
    let cursor = "0";
    do {
      const [next, flat] = await this.conn.call("cannot prune runs", undefined, (c) =>
        c.zscan(this.index, cursor, "COUNT", 200),
      );
      cursor = next;
      for (let i = 0; i < flat.length; i += 2) {
        const runId = String(flat[i]);
        for (;;) {
          const r = (await this.exec(
            "prune",
            runId,
            SCRIPTS.prune,
            [this.k(runId, "run"), this.k(runId, "steps"), this.k(runId, "stepmeta"), this.k(runId, "steprefs")],
            [o.before, o.keepLast, PRUNE_BATCH, this.prefix, o.from],
          )) as Reply;
          const n = Number(r[0]);
          result.deletedSteps += n;
          result.deletedBlobs += Number(r[1]);
          if (n < PRUNE_BATCH) break;
        }
      }
    } while (cursor !== "0");
    return result;
  }

  /** {@inheritDoc Journal.readBlob} */
  async readBlob(ref: string): Promise<Uint8Array | undefined> {
    const v = await this.conn.call(`cannot read blob ${ref}`, undefined, (c) =>
      c.getBuffer(`${this.prefix}blob:${ref}`),
    );
    return v === null ? undefined : new Uint8Array(v);
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
      [this.k(runId, "run"), this.k(runId, "events"), this.updated],
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
      [
        this.k(runId, "run"),
        this.k(runId, "steps"),
        this.k(runId, "stepmeta"),
        this.k(runId, "events"),
        this.k(runId, "steprefs"),
        this.updated,
      ],
      [toSeq, this.eventJson("run_reset", { seq: toSeq, by }), this.prefix],
    )) as Reply;
    return this.runReply(runId, r);
  }

  /** {@inheritDoc Journal.retryRun} */
  async retryRun(runId: string, by: string): Promise<RunRecord> {
    const r = (await this.exec(
      "retry",
      runId,
      SCRIPTS.retry,
      [
        this.k(runId, "run"),
        this.k(runId, "steps"),
        this.k(runId, "stepmeta"),
        this.k(runId, "events"),
        this.k(runId, "steprefs"),
        this.updated,
      ],
      [this.eventJson("run_retried", { by }), this.prefix],
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
    const parts = RUN_KEY_PARTS;
    for (;;) {
      const ids = await this.conn.call("cannot clear the journal", undefined, (c) => c.zrange(this.index, 0, 499));
      if (ids.length === 0) break;
      const res = await this.conn.call("cannot clear the journal", undefined, (c) => {
        const pipe = c.pipeline();
        for (const id of ids) pipe.del(...parts.map((part) => this.k(id, part)));
        pipe.zrem(this.index, ...ids);
        pipe.zrem(this.updated, ...ids);
        return pipe.exec();
      });
      for (const [err] of res ?? []) {
        if (err) throw new BackendError("redis", "cannot clear the journal", { cause: err });
      }
    }
    // the blobs: every one the runs referenced (the reference counts list them), then the counts
    for (;;) {
      const refs = await this.conn.call("cannot clear the journal", undefined, (c) =>
        c.hkeys(`${this.prefix}blobrefs`),
      );
      if (refs.length === 0) break;
      await this.conn.call("cannot clear the journal", undefined, async (c) => {
        for (let i = 0; i < refs.length; i += 500) {
          const part = refs.slice(i, i + 500);
          await c.del(...part.map((ref) => `${this.prefix}blob:${ref}`));
          await c.hdel(`${this.prefix}blobrefs`, ...part);
        }
      });
    }
    await this.conn.call("cannot clear the journal", undefined, (c) => c.del(this.index, this.updated));
  }

  /** Quits the client when this journal created it (an injected client is left open). Idempotent. */
  async close(): Promise<void> {
    await this.conn.close();
  }
}
