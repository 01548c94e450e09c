/**
 * Redis backend (`dumplings-ai/redis`): agent states in Redis through ioredis
 * or any injected client of the small {@link RedisLikeClient} shape.
 *
 * Layout, per session key `k` under the key prefix `p` (default `duas:`):
 * - `p` + `k` — a HASH, the header: `fmt` (storage format, `"1"`), `meta`,
 *   `config`, `state` (JSON text), `rev` (revision), `count` (history length),
 *   `gen` (the revision of the last full history rewrite: a history deleted
 *   and saved again never reuses one, as a stream checks), `tail` (digest of
 *   the last message's JSON);
 * - `p` + `k` + `/history` — a LIST, one history message per element.
 *   `/` is refused in state keys, so a history list can never collide with the
 *   header of another key (a `:history` suffix could: key `a:history`).
 *
 * Every write is ONE Lua script (EVALSHA, EVAL on `NOSCRIPT`), so it is
 * atomic and costs one round trip. It checks the revision (compare-and-set),
 * the stored history length, and the stored `tail` digest against the
 * writer's message at `baseLength - 1` (an edit at the boundary is detected,
 * not assumed, and leads to a full rewrite); then it appends only the new
 * messages (`RPUSH` of `history.slice(baseLength)`) or rewrites the list,
 * updates the header, increments the revision and applies the TTL to both
 * keys with the same `PEXPIRE` (a history never expires while its header
 * lives). Reads are Lua scripts too, so a load sees one consistent revision.
 *
 * Connections come from the Redis driver (`src/drivers/redis.ts`), shared by
 * every Redis component: the same options, defaults and outage handling
 * (README, "Redis connection options"). A dead or paused Redis never hangs a
 * caller (the fault reported in ioredis#285): the first call during an outage
 * waits at most `connectTimeoutMs`, later ones fail at once until the
 * connection is back; calls are bounded by `commandTimeoutMs`; ioredis is
 * loaded only when the backend creates its own client. A write also carries
 * a deadline in the server's clock (offset measured at connect time): if a
 * paused server runs it only after the caller was told it failed, the script
 * refuses it, so a save reported as failed does not land later (best effort:
 * to within the measured clock offset and a 250 ms margin).
 *
 * Values: meta/config/state and each message are stored as `JSON.stringify`
 * text, so every string (NUL, control characters, lone surrogates) round-trips
 * exactly. With `compressHistory`, a message whose JSON is at least 1 KiB is
 * stored as `~` + base64(gzip(JSON)); plain messages always start with `{`,
 * and a reader decodes both, whatever its own option.
 *
 * The original design's Redis backend (dumplingsAI 0.4.0) stored one STRING per
 * session at `duas:{key}`, the whole state as JSON (its snake_case `meta`,
 * `config`, `state` and the `history` array, or the current camelCase shape).
 * Such an entry is read by every read path (`read`, `load`, `readHeader`,
 * `iterHistory`) as revision `1`, and listed by `listKeys`; the next write
 * converts it to the layout above in the same atomic script, at revision 2 or
 * above (under compare-and-set: a writer that read it at revision 1 while
 * another converted it gets a `ConflictError`); `delete` removes it.
 *
 * Needs Redis >= 6 (`SCAN … TYPE`). Not supported: Redis Cluster (the two
 * keys of a session are not hash-tagged, and SCAN would see one node only).
 *
 * @module
 */
import { gunzipSync, gzipSync } from "node:zlib";
import { BackendError, ConflictError, FormatError, InvalidStateError, StateNotFoundError } from "../core/errors.js";
import { assertJson, parseStoredJson } from "../core/json.js";
import type { Message, Protocol } from "../core/messages.js";
import { checkOptions, optionKeys } from "../core/options.js";
import { fromOriginalRecord, isOriginalRecord } from "../core/original.js";
import { AgentConfigSchema, AgentRuntimeStateSchema, type AgentState, StateMetaSchema } from "../core/state.js";
import { instanceIdentity, urlIdentity } from "../drivers/options.js";
import {
  globEscape,
  positiveMs,
  REDIS_CONNECTION_KEYS,
  REDIS_SOURCE_OF_TRUTH_KEYS,
  RedisConnection,
  type RedisConnectionOptions,
  type RedisScript,
  type RedisSourceOfTruthOptions,
  redisScript,
  runScript,
} from "../drivers/redis.js";
import { validateKey } from "./keys.js";
import {
  ConfigMemo,
  checkRevision,
  checkStateShape,
  decodeStoredMessage,
  jsonText,
  messageDigest,
  messageText,
  PartMemo,
  parseHeaderField,
  tailDigest,
} from "./stored.js";
import type {
  HeaderReadOptions,
  HeaderResult,
  HistoryReadOptions,
  ReadResult,
  StateBackend,
  WriteOptions,
  WriteResult,
} from "./types.js";
import { checkHeaderReadOptions, checkHistoryReadOptions, checkWriteOptions } from "./write-options.js";

/**
 * The minimal structural shape of a Redis client this backend calls. An
 * ioredis `Redis` instance fits as is; so does any client offering these
 * methods with ioredis' argument conventions (idea after kysely's structural
 * dialect clients).
 *
 * @example
 * import { Redis } from "ioredis";
 * const backend = new RedisBackend({ client: new Redis(process.env.REDIS_URL!) });
 */
export interface RedisLikeClient {
  /** `EVALSHA sha numKeys ...keysAndArgs`; rejects with an error whose message starts with `NOSCRIPT` when unknown. */
  evalsha(sha: string, numKeys: number, ...args: (string | number)[]): Promise<unknown>;
  /** `EVAL script numKeys ...keysAndArgs`. */
  eval(script: string, numKeys: number, ...args: (string | number)[]): Promise<unknown>;
  /** `SCAN cursor MATCH pattern COUNT n TYPE hash`; resolves to `[nextCursor, keys]`. */
  scan(
    cursor: string,
    patternToken: "MATCH",
    pattern: string,
    countToken: "COUNT",
    count: number,
    typeToken: "TYPE",
    type: string,
  ): Promise<[string, string[]]>;
  /**
   * Optional: `MULTI … EXEC` of the given commands, used by `read` when present
   * (a transaction returns a big history without the copy a Lua script makes;
   * without it `read` uses a Lua script, equally atomic).
   */
  multi?(commands: (string | number)[][]): { exec(): Promise<[Error | null, unknown][] | null> };
  /** Optional: graceful close. Called by `close()` only for a client the backend created itself. */
  quit?(): Promise<unknown>;
}

export type { RedisConnectionOptions };

/**
 * Options of {@link RedisBackend}: the Redis connection options shared by
 * every Redis component (`client`, `url`, `keyPrefix`, `connectTimeoutMs`,
 * `commandTimeoutMs`; README, "Redis connection options") and the backend's own.
 */
export interface RedisBackendOptions extends RedisConnectionOptions<RedisLikeClient>, RedisSourceOfTruthOptions {
  /** Prefix of every Redis key the backend touches. @default "duas:" */
  keyPrefix?: string;
  /** Time to live of a session in ms, applied to all of its keys at every write; absent = no expiry. */
  ttlMs?: number;
  /** Store messages of at least `compressMinBytes` of JSON gzip-compressed (base64). Reading handles both. @default false */
  compressHistory?: boolean;
  /** Smallest message JSON, in UTF-16 code units, that `compressHistory` compresses. @default 1024 */
  compressMinBytes?: number;
}

/**
 * The revision an entry of the original design (a STRING, see the module comment) reads as; the write
 * that converts it makes 2 or above, so a writer still holding 1 gets a `ConflictError`.
 */
const SEED_REVISION = 1;

/** Whether a MULTI reply's error is Redis' WRONGTYPE (a STRING where a HASH was read). */
function isWrongType(error: unknown): boolean {
  return error instanceof Error && error.message.startsWith("WRONGTYPE");
}

/** Storage format of the header hash (`fmt` field). */
const STORAGE_FORMAT = "1";
/** Marker of a compressed history element (plain messages are JSON objects, starting with `{`). */
const COMPRESSED_MARK = "~";
/** Messages per page of `iterHistory`. */
const PAGE_SIZE = 500;
/** Margin, ms, between a write's server-side deadline and the caller's timeout. */
const DEADLINE_MARGIN_MS = 250;

/*
 * KEYS[1] header hash, KEYS[2] history list.
 * ARGV[1] expected revision ("" none, "n" must not exist, else an integer)
 * ARGV[2] force ("1"/"0")
 * ARGV[3] base length (-1: full rewrite; else append after this many stored messages)
 * ARGV[4..6] meta, config, state JSON (config or state "": unchanged, keep the stored one); ARGV[7] new message count;
 * ARGV[8] TTL ms ("0": none)
 * ARGV[9] deadline in server ms ("0": none)
 * ARGV[10] digest of the message at base - 1 as the writer has it ("" when base <= 0)
 * ARGV[11] digest of the new last message ("" for an empty history); ARGV[12..] messages
 * KEYS[3] the revision floor (a string key): a new session starts above it, so a writer holding a
 * revision of a deleted (or, with a TTL, expired) session can never match the new one (ABA). With a
 * TTL every write raises it to its revision, since an expiry cannot.
 * A STRING at KEYS[1] is an entry of the original design (see the module comment): revision 1 for the
 * compare-and-set, no history list (an append is "full"); a full write replaces it, at revision 2 or
 * above (so a writer still holding 1 conflicts).
 * Returns {"ok", revision} | {"conflict", revision or -1} | {"full"} | {"late"} | {"corrupt", header count, list length}.
 * An append onto a list whose length is not the header's count (evicted, cut by hand) is refused
 * ("corrupt"); a full rewrite replaces the list whole. All or nothing: every check and read (the
 * list's length against the header's count, the revision
 * floor, the TTL command on the header, which fails as its later calls would, on an ACL or a bad TTL)
 * comes before the first write, so a script that fails has written nothing.
 */
const WRITE_SCRIPT = `
local seed = redis.call('TYPE', KEYS[1]).ok == 'string'
local h
if seed then h = {'1', false, false, false} else h = redis.call('HMGET', KEYS[1], 'rev', 'count', 'gen', 'tail') end
local rev = h[1] and tonumber(h[1]) or nil
if ARGV[9] ~= '0' then
  local t = redis.call('TIME')
  if tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) > tonumber(ARGV[9]) then return {'late'} end
end
local exp = ARGV[1]
if ARGV[2] ~= '1' and exp ~= '' then
  if exp == 'n' then
    if rev then return {'conflict', rev} end
  elseif rev == nil or rev ~= tonumber(exp) then
    return {'conflict', rev or -1}
  end
end
local base = tonumber(ARGV[3])
local gen = h[3] and tonumber(h[3]) or 0
local count = h[2] and tonumber(h[2]) or -1
local len = redis.call('LLEN', KEYS[2])
if base >= 0 and rev and not seed and len ~= count then return {'corrupt', count, len} end
if base >= 0 then
  if rev == nil or count ~= base then return {'full'} end
  if base > 0 and h[4] ~= ARGV[10] then return {'full'} end
end
local floor = tonumber(redis.call('GET', KEYS[3])) or 0
local ttl = tonumber(ARGV[8])
if ttl > 0 then redis.call('PEXPIRE', KEYS[1], ARGV[8]) else redis.call('PERSIST', KEYS[1]) end
local rewrite = false
if base < 0 then
  redis.call('DEL', KEYS[2])
  if seed then redis.call('DEL', KEYS[1]) end
  rewrite = true
end
for i = 12, #ARGV, 1000 do
  redis.call('RPUSH', KEYS[2], unpack(ARGV, i, math.min(i + 999, #ARGV)))
end
local newrev
if rev and not seed then newrev = rev + 1 else
  newrev = floor + 1
  if seed and newrev < 2 then newrev = 2 end
end
if rewrite then gen = newrev end
redis.call('HSET', KEYS[1], 'fmt', '${STORAGE_FORMAT}', 'meta', ARGV[4],
  'rev', newrev, 'count', ARGV[7], 'gen', gen, 'tail', ARGV[11])
if ARGV[5] ~= '' then redis.call('HSET', KEYS[1], 'config', ARGV[5]) end
if ARGV[6] ~= '' then redis.call('HSET', KEYS[1], 'state', ARGV[6]) end
if ttl > 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[8])
  redis.call('PEXPIRE', KEYS[2], ARGV[8])
  if newrev > floor then redis.call('SET', KEYS[3], newrev) end
else
  redis.call('PERSIST', KEYS[1])
  redis.call('PERSIST', KEYS[2])
end
return {'ok', newrev}
`;

/*
 * KEYS[1] header, KEYS[2] history. ARGV[1] start, ARGV[2] stop (LRANGE indexes; start > stop: header only).
 * Returns false when missing, {"seed", text} for a STRING (an entry of the original design), else
 * {{fmt, rev, count, gen, meta, config, state}, items}.
 */
const READ_SCRIPT = `
if redis.call('TYPE', KEYS[1]).ok == 'string' then return {'seed', redis.call('GET', KEYS[1])} end
local h = redis.call('HMGET', KEYS[1], 'fmt', 'rev', 'count', 'gen', 'meta', 'config', 'state')
if not h[2] then return false end
local start = tonumber(ARGV[1])
local stop = tonumber(ARGV[2])
local items = {}
if stop < 0 or start <= stop then items = redis.call('LRANGE', KEYS[2], start, stop) end
return {h, items}
`;

/* KEYS[1] header, KEYS[2] history, KEYS[3] revision floor (raised to the deleted revision). Returns 1 when the header existed. */
const DELETE_SCRIPT = `
local rev = nil
if redis.call('TYPE', KEYS[1]).ok == 'hash' then rev = tonumber(redis.call('HGET', KEYS[1], 'rev')) end
local n = redis.call('DEL', KEYS[1])
redis.call('DEL', KEYS[2])
if rev and rev > (tonumber(redis.call('GET', KEYS[3])) or 0) then redis.call('SET', KEYS[3], rev) end
return n
`;

/* Header fields a read returns, in this order (READ_SCRIPT lists the same). */
const HEADER_FIELDS = ["fmt", "rev", "count", "gen", "meta", "config", "state"] as const;

/* Server time in ms. */
const TIME_SCRIPT = `local t = redis.call('TIME') return t[1] * 1000 + math.floor(t[2] / 1000)`;

const SCRIPTS = {
  write: redisScript(WRITE_SCRIPT),
  read: redisScript(READ_SCRIPT),
  delete: redisScript(DELETE_SCRIPT),
  time: redisScript(TIME_SCRIPT),
};

interface Header {
  rev: number;
  count: number;
  gen: number;
  meta: string;
  config: string;
  state: string;
}

/** The keys of {@link RedisBackendOptions}: any other is an `InvalidOptionError`. */
const REDIS_OPTIONS = optionKeys<RedisBackendOptions>({
  ...REDIS_CONNECTION_KEYS,
  ...REDIS_SOURCE_OF_TRUTH_KEYS,
  ttlMs: true,
  compressHistory: true,
  compressMinBytes: true,
});

/**
 * Redis implementation of {@link StateBackend} with revisions, O(new messages)
 * appends, streaming reads and an optional TTL.
 *
 * @example
 * import { RedisBackend } from "dumplings-ai/redis";
 * const backend = new RedisBackend({ url: "redis://127.0.0.1:6379", ttlMs: 7 * 24 * 3600_000 });
 * const { revision } = await backend.write("weather-1", state, { expectedRevision: null });
 * await backend.write("weather-1", next, { expectedRevision: revision, baseLength: state.history.length });
 * await backend.close();
 */
export class RedisBackend implements StateBackend {
  /** Backend name used in errors and the registry. */
  readonly name = "redis";
  /** Key prefix in use. */
  readonly keyPrefix: string;
  /** The store's identity: server (URL without password, or the injected client) and key prefix. */
  readonly storeId: string;
  /** Per key: the config stored at a revision (an unchanged config is neither serialised nor sent). */
  private readonly configs = new ConfigMemo();
  /** Per key: the `state` part's text stored at a revision (an unchanged one is not sent when the CAS pins it). */
  private readonly states = new PartMemo();
  private readonly conn: RedisConnection<RedisLikeClient>;
  private readonly ttlMs: number;
  private readonly commandTimeoutMs: number;
  private readonly compress: boolean;
  private readonly compressMinBytes: number;
  private clockOffsetMs: number | undefined;

  /**
   * @param options - see {@link RedisBackendOptions}
   * @throws {InvalidOptionError} when `ttlMs` or a timeout is not a positive finite number, or the URL is malformed
   */
  constructor(options: RedisBackendOptions = {}) {
    checkOptions("redis", options, REDIS_OPTIONS);
    this.ttlMs = positiveMs("ttlMs", options.ttlMs, 0);
    this.conn = new RedisConnection(options, {
      label: "backend",
      keyPrefix: "duas:",
      sourceOfTruth: true,
      onReady: () => {
        this.clockOffsetMs = undefined; // maybe another server now: measure again
      },
    });
    this.keyPrefix = this.conn.keyPrefix;
    this.storeId =
      options.client !== undefined || this.conn.url === undefined
        ? `${instanceIdentity("redis", this.conn.client as object)}#${JSON.stringify(this.keyPrefix)}`
        : urlIdentity("redis", this.conn.url, 6379, this.keyPrefix, "/0");
    this.commandTimeoutMs = this.conn.commandTimeoutMs;
    this.compress = options.compressHistory ?? false;
    this.compressMinBytes =
      options.compressMinBytes === undefined ? 1024 : Math.max(0, Math.floor(options.compressMinBytes));
  }

  private headerKey(key: string): string {
    return this.keyPrefix + key;
  }

  private historyKey(key: string): string {
    return `${this.keyPrefix}${key}/history`;
  }

  /** The revision floor of the whole prefix (no session key can be empty before a `/`). */
  private floorKey(): string {
    return `${this.keyPrefix}/revision-floor`;
  }

  /** Stores the whole state (upsert, full history rewrite). @throws {BackendError} @throws {NonJsonValueError} */
  async save(key: string, state: AgentState): Promise<void> {
    await this.write(key, state);
  }

  /**
   * Loads the state stored under `key`.
   *
   * @throws {StateNotFoundError} when nothing is stored
   * @throws {FormatError} when the stored data is corrupt
   * @throws {BackendError} when Redis fails or does not answer in time
   */
  async load(key: string): Promise<AgentState> {
    const r = await this.read(key);
    if (!r) throw new StateNotFoundError(key, this.name);
    return r.state;
  }

  /** Deletes both keys of the session atomically; true when it existed. @throws {BackendError} */
  async delete(key: string): Promise<boolean> {
    validateKey(key);
    this.configs.forget(key);
    this.states.forget(key);
    const n = await this.call(`cannot delete ${JSON.stringify(key)}`, key, () =>
      this.run(SCRIPTS.delete, [this.headerKey(key), this.historyKey(key), this.floorKey()], []),
    );
    return Number(n) > 0;
  }

  /** Every stored key (de-prefixed), found with SCAN (never KEYS). @throws {BackendError} */
  async listKeys(): Promise<string[]> {
    const keys = new Set<string>();
    const match = `${globEscape(this.keyPrefix)}*`;
    // the headers (hashes), then the original design's entries (strings, see the module comment)
    for (const type of ["hash", "string"]) {
      let cursor = "0";
      do {
        const [next, batch] = await this.call("cannot list keys", undefined, () =>
          this.conn.client.scan(cursor, "MATCH", match, "COUNT", 1000, "TYPE", type),
        );
        cursor = String(next);
        for (const k of batch) {
          const rest = String(k).slice(this.keyPrefix.length);
          if (String(k).startsWith(this.keyPrefix) && rest.length > 0 && !rest.includes("/")) keys.add(rest);
        }
      } while (cursor !== "0");
    }
    return [...keys];
  }

  /**
   * Revision-aware write in one atomic round trip (see the module comment).
   *
   * @param key - state key
   * @param state - the whole state; only `history.slice(baseLength)` is sent when appending
   * @param options - `expectedRevision` (number, `null` = must not exist), `baseLength`, `force`
   * @returns `{ revision, written, rewritten }`
   * @throws {ConflictError} when the stored revision differs from `expectedRevision` (nothing written)
   * @throws {TypeError} when `expectedRevision` is neither null nor a non-negative integer
   * @throws {NonJsonValueError} when a value is not JSON (path like `history[3].content`)
   * @throws {BackendError} when Redis fails or does not answer in time
   */
  async write(key: string, state: AgentState, options: WriteOptions = {}): Promise<WriteResult> {
    checkWriteOptions("redis", options);
    validateKey(key);
    checkStateShape(state);
    checkRevision(options.expectedRevision);
    const meta = jsonText(state.meta, "meta");
    // An unchanged config (ConfigMemo) is not serialised again, nor sent when the CAS pins its revision.
    const known = this.configs.lookup(key, state.config);
    const config = known?.text ?? jsonText(state.config, "config");
    const runtime = jsonText(state.state, "state");
    const history = state.history;
    const force = options.force === true;
    const expected = options.expectedRevision;
    const base = options.baseLength;
    const canAppend =
      !force &&
      typeof expected === "number" &&
      typeof base === "number" &&
      Number.isInteger(base) &&
      base >= 0 &&
      base <= history.length;
    const what = `cannot save ${JSON.stringify(key)}`;
    const attempt = async (from: number): Promise<WriteResult | "full"> => {
      const items: string[] = [];
      for (let i = Math.max(from, 0); i < history.length; i++) items.push(this.encodeMessage(history, i));
      const args: (string | number)[] = [
        expected === undefined ? "" : expected === null ? "n" : String(expected),
        force ? "1" : "0",
        from === -1 ? -1 : from,
        meta,
        !force && typeof expected === "number" && known?.revision === expected ? "" : config,
        !force && typeof expected === "number" && this.states.lookup(key, runtime) === expected ? "" : runtime,
        history.length,
        this.ttlMs,
        this.clockOffsetMs === undefined ? await this.deadline(key, what) : this.deadlineNow(),
        from > 0 ? messageDigest(history, from - 1) : "",
        tailDigest(history),
        ...items,
      ];
      const reply = (await this.call(what, key, () =>
        this.run(SCRIPTS.write, [this.headerKey(key), this.historyKey(key), this.floorKey()], args),
      )) as [string, number?, number?];
      switch (reply[0]) {
        case "ok":
          this.configs.remember(key, Number(reply[1]), state.config, config);
          this.states.remember(key, Number(reply[1]), runtime);
          return { revision: Number(reply[1]), written: items.length, rewritten: from === -1 };
        case "conflict": {
          const actual = Number(reply[1]);
          throw new ConflictError(key, expected ?? null, actual < 0 ? null : actual, this.name);
        }
        case "full":
          return "full";
        case "corrupt":
          throw new FormatError(
            `stored history of ${JSON.stringify(key)} has ${Number(reply[2])} messages, header says ${Number(reply[1])}: the list was evicted by Redis (maxmemory-policy) or changed by hand; nothing was written. Delete the key, or save with force: true to replace it`,
            { file: `redis:${this.historyKey(key)}` },
          );
        case "late":
          throw new BackendError(
            this.name,
            `${what}: Redis ran the write after its deadline (commandTimeoutMs, ${this.commandTimeoutMs} ms); it was not applied; for large messages or a slow link raise commandTimeoutMs (new RedisBackend({ commandTimeoutMs }))`,
            { key },
          );
        default:
          throw new BackendError(this.name, `${what}: unexpected script reply ${JSON.stringify(reply)}`, { key });
      }
    };
    // Encode every message of a full write up front, so a bad value fails before anything is sent.
    const first = await attempt(canAppend ? (base as number) : -1);
    if (first !== "full") return first;
    // The stored history is not the `baseLength` prefix we were told: rewrite it all (still under CAS).
    const second = await attempt(-1);
    if (second === "full") throw new BackendError(this.name, `${what}: full rewrite refused`, { key });
    return second;
  }

  /**
   * Loads `key` with its revision, atomically (one Lua script).
   *
   * @returns `{ state, revision }`, or `undefined` when nothing is stored
   * @throws {FormatError} naming the key when the stored data is corrupt
   * @throws {BackendError} when Redis fails or does not answer in time
   */
  async read(key: string): Promise<ReadResult | undefined> {
    validateKey(key);
    const what = `cannot load ${JSON.stringify(key)}`;
    const client = this.conn.client;
    const multi = client.multi;
    const reply = await this.call(what, key, async () => {
      if (typeof multi !== "function") {
        return await this.run(SCRIPTS.read, [this.headerKey(key), this.historyKey(key)], [0, -1]);
      }
      const results = await multi
        .call(client, [
          ["hmget", this.headerKey(key), ...HEADER_FIELDS],
          ["lrange", this.historyKey(key), 0, -1],
        ])
        .exec();
      if (results?.length !== 2) throw new Error("MULTI/EXEC was aborted");
      // a STRING: an entry of the original design, read (atomically) by the script
      if (isWrongType(results[0]![0]))
        return await this.run(SCRIPTS.read, [this.headerKey(key), this.historyKey(key)], [0, -1]);
      for (const [error] of results) if (error) throw error;
      const header = results[0]![1] as unknown[];
      return header[1] === null || header[1] === undefined ? null : [header, results[1]![1]];
    });
    if (reply === null || reply === undefined || reply === false) return undefined;
    const seed = this.seedEntry(key, reply);
    if (seed !== undefined) return { state: seed, revision: SEED_REVISION };
    const [rawHeader, items] = reply as [unknown[], unknown[]];
    const header = this.decodeHeader(key, rawHeader);
    if (!Array.isArray(items) || items.length !== header.count) {
      throw new FormatError(
        `stored history of ${JSON.stringify(key)} has ${Array.isArray(items) ? items.length : "no"} messages, header says ${header.count}`,
        { file: `redis:${this.headerKey(key)}` },
      );
    }
    const state = this.assemble(key, header, []);
    this.configs.remember(key, header.rev, state.config, header.config);
    this.states.remember(key, header.rev, header.state);
    const protocol = state.meta.protocol;
    const file = `redis:${this.historyKey(key)}`;
    state.history = items.map((item, i) => this.decodeMessage(key, item, i, protocol, file));
    return { state, revision: header.rev };
  }

  /**
   * Reads the header (meta, config, state) and revision of `key` without its
   * history: one small script, whatever the history's size.
   *
   * @returns `{ header, revision }` (`header.meta.messageCount` is the stored history's length), or `undefined` when nothing is stored
   * @throws {FormatError} naming the key when the stored header is corrupt
   * @throws {BackendError} when Redis fails or does not answer in time
   */
  async readHeader(key: string, options: HeaderReadOptions = {}): Promise<HeaderResult | undefined> {
    // Every value is returned whole: `clipAt` allows clipping, it does not require it.
    checkHeaderReadOptions(this.name, options);
    validateKey(key);
    const reply = await this.call(`cannot load ${JSON.stringify(key)}`, key, () =>
      this.run(SCRIPTS.read, [this.headerKey(key), this.historyKey(key)], [1, 0]),
    );
    if (reply === null || reply === undefined || reply === false) return undefined;
    const seed = this.seedEntry(key, reply);
    if (seed !== undefined) {
      const { history, ...rest } = seed;
      return { header: { ...rest, meta: { ...rest.meta, messageCount: history.length } }, revision: SEED_REVISION };
    }
    const header = this.decodeHeader(key, (reply as [unknown[], unknown[]])[0]);
    const { history: _, ...rest } = this.assemble(key, header, []);
    return { header: { ...rest, meta: { ...rest.meta, messageCount: header.count } }, revision: header.rev };
  }

  /**
   * Streams the history of `key` in pages of 500 messages, memory bounded by
   * one page. The stream is the history as stored when iteration began;
   * appends made meanwhile are not included.
   *
   * @param options - `revision`: the stored revision the stream must be (see {@link HistoryReadOptions})
   * @throws {StateNotFoundError} when nothing is stored
   * @throws {ConflictError} when `options.revision` is not the stored revision as the stream starts, or the
   *   history is rewritten (or deleted) while being read (appends meanwhile are not returned)
   * @throws {FormatError} / {BackendError} as `read`
   */
  async *iterHistory(key: string, options: HistoryReadOptions = {}): AsyncIterable<Message> {
    checkHistoryReadOptions(this.name, options);
    validateKey(key);
    const keys = [this.headerKey(key), this.historyKey(key)];
    const what = `cannot read the history of ${JSON.stringify(key)}`;
    let header: Header | undefined;
    let protocol: Protocol = "openai";
    for (let start = 0; header === undefined || start < header.count; start += PAGE_SIZE) {
      const stop = header === undefined ? PAGE_SIZE - 1 : Math.min(start + PAGE_SIZE, header.count) - 1;
      const reply = await this.call(what, key, () => this.run(SCRIPTS.read, keys, [start, stop]));
      if (reply === null || reply === undefined || reply === false) {
        if (header === undefined) throw new StateNotFoundError(key, this.name);
        throw new ConflictError(key, header.rev, null, this.name);
      }
      const seed = this.seedEntry(key, reply);
      if (seed !== undefined) {
        // an entry of the original design: whole in one string, so read whole (revision 0)
        if (header !== undefined) throw new ConflictError(key, header.rev, SEED_REVISION, this.name);
        if (options.revision !== undefined && options.revision !== SEED_REVISION) {
          throw new ConflictError(key, options.revision, SEED_REVISION, this.name);
        }
        yield* seed.history;
        return;
      }
      const [rawHeader, items] = reply as [unknown[], unknown[]];
      const now = this.decodeHeader(key, rawHeader);
      if (header === undefined) {
        header = now;
        if (options.revision !== undefined && options.revision !== now.rev) {
          throw new ConflictError(key, options.revision, now.rev, this.name);
        }
        // Checked as a load checks them: the messages against the protocol's schema, the format version.
        protocol = parseHeaderField(key, `redis:${keys[0]}`, "meta", now.meta, StateMetaSchema).protocol;
      } else if (now.gen !== header.gen) throw new ConflictError(key, header.rev, now.rev, this.name);
      const expectedItems = Math.max(0, Math.min(stop + 1, header.count) - start);
      if (!Array.isArray(items) || items.length < expectedItems) {
        throw new FormatError(`stored history of ${JSON.stringify(key)} is shorter than its header says`, {
          file: `redis:${keys[0]}`,
        });
      }
      for (let i = 0; i < expectedItems; i++) yield this.decodeMessage(key, items[i], start + i, protocol);
    }
  }

  /** Closes the client the backend created (an injected client is left open). Idempotent. */
  async close(): Promise<void> {
    await this.conn.close();
  }

  // ---- internals ----

  private encodeMessage(history: readonly unknown[], index: number): string {
    const message = history[index];
    if (typeof message !== "object" || message === null || Array.isArray(message)) {
      assertJson(message, `history[${index}]`, index);
      throw new InvalidStateError(`history[${index}]`, "a history message must be a JSON object");
    }
    const json = messageText(history, index); // checked and serialised, or the text the caller lent
    if (this.compress && json.length >= this.compressMinBytes) {
      return COMPRESSED_MARK + gzipSync(Buffer.from(json, "utf8")).toString("base64");
    }
    return json;
  }

  private decodeMessage(
    key: string,
    item: unknown,
    index: number,
    protocol: Protocol,
    file = `redis:${this.historyKey(key)}`,
  ): Message {
    if (typeof item !== "string") throw new FormatError(`history[${index}] is not a string`, { file });
    let json = item;
    if (item.startsWith(COMPRESSED_MARK)) {
      try {
        json = gunzipSync(Buffer.from(item.slice(1), "base64")).toString("utf8");
      } catch (cause) {
        throw new FormatError(`history[${index}] of ${JSON.stringify(key)} is not valid compressed data`, {
          file,
          cause,
        });
      }
    }
    return decodeStoredMessage(key, file, json, protocol, index);
  }

  /**
   * The state of an entry of the original design (a STRING: the whole state as JSON) when `reply` of
   * the read script is one, else undefined. Its `meta`/`config`/`state` may be spelled as the original
   * wrote them (snake_case) or in the current shape; everything is checked as a load checks it.
   *
   * @throws {FormatError} naming the key when the entry is not such a state
   */
  private seedEntry(key: string, reply: unknown): AgentState | undefined {
    if (!Array.isArray(reply) || reply[0] !== "seed") return undefined;
    const file = `redis:${this.headerKey(key)}`;
    const label = `stored state of ${JSON.stringify(key)} (a string in the original design's layout)`;
    const whole = parseStoredJson(reply[1], { file, label });
    const obj = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);
    if (!obj(whole) || !obj(whole.meta) || !obj(whole.config) || !Array.isArray(whole.history)) {
      throw new FormatError(`${label} is not a state (meta, config and history)`, { file });
    }
    let { meta, config } = whole;
    let state: unknown = whole.state ?? {};
    if (!obj(state)) throw new FormatError(`${label}: state is not an object`, { file });
    if (isOriginalRecord(meta)) {
      try {
        ({ meta, config, state } = fromOriginalRecord({ meta, config, state }, label) as unknown as {
          meta: Record<string, unknown>;
          config: Record<string, unknown>;
          state: Record<string, unknown>;
        });
      } catch (cause) {
        throw new FormatError((cause as Error).message, { file, cause });
      }
    }
    const history = whole.history;
    if (meta.messageCount === undefined) meta = { ...meta, messageCount: history.length };
    const parsed = {
      meta: parseHeaderField(key, file, "meta", JSON.stringify(meta), StateMetaSchema),
      config: parseHeaderField(key, file, "config", JSON.stringify(config), AgentConfigSchema),
      state: parseHeaderField(key, file, "state", JSON.stringify(state), AgentRuntimeStateSchema),
    };
    if (parsed.meta.messageCount !== history.length) {
      throw new FormatError(
        `${label} is corrupt: message_count is ${parsed.meta.messageCount} but the history holds ${history.length} messages`,
        { file },
      );
    }
    const protocol = parsed.meta.protocol;
    return {
      ...parsed,
      history: history.map((m, i) => decodeStoredMessage(key, file, JSON.stringify(m), protocol, i)),
    };
  }

  private decodeHeader(key: string, raw: unknown[]): Header {
    const file = `redis:${this.headerKey(key)}`;
    const [fmt, rev, count, gen, meta, config, state] = raw.map((v) => (v === null || v === false ? undefined : v));
    if (fmt !== STORAGE_FORMAT) {
      throw new FormatError(`unknown storage format ${JSON.stringify(fmt ?? null)} for ${JSON.stringify(key)}`, {
        file,
        version: fmt === undefined ? undefined : String(fmt),
      });
    }
    const n = (v: unknown, field: string): number => {
      const x = Number(v);
      if (v === undefined || !Number.isSafeInteger(x) || x < 0) {
        throw new FormatError(`header field ${field} of ${JSON.stringify(key)} is not a count: ${String(v)}`, {
          file,
        });
      }
      return x;
    };
    const s = (v: unknown, field: string): string => {
      if (typeof v !== "string")
        throw new FormatError(`header field ${field} of ${JSON.stringify(key)} is missing`, { file });
      return v;
    };
    return {
      rev: n(rev, "rev"),
      count: n(count, "count"),
      gen: n(gen ?? 0, "gen"),
      meta: s(meta, "meta"),
      config: s(config, "config"),
      state: s(state, "state"),
    };
  }

  private assemble(key: string, header: Header, history: Message[]): AgentState {
    const file = `redis:${this.headerKey(key)}`;
    return {
      meta: parseHeaderField(key, file, "meta", header.meta, StateMetaSchema),
      config: parseHeaderField(key, file, "config", header.config, AgentConfigSchema),
      state: parseHeaderField(key, file, "state", header.state, AgentRuntimeStateSchema),
      history,
    };
  }

  /** The server-clock deadline for a write sent now, measuring the clock offset first when it is not known. */
  private async deadline(key: string, what: string): Promise<string> {
    if (this.clockOffsetMs === undefined) {
      const server = Number(await this.call(what, key, () => this.run(SCRIPTS.time, [], [])));
      const t1 = Date.now();
      // The server read its clock before the local instant t1, so server - t1 never exceeds the true
      // offset: the deadline errs early (a slow write may be refused), never late (a refused one never lands).
      if (!Number.isFinite(server)) throw new BackendError(this.name, `${what}: bad TIME reply`, { key });
      this.clockOffsetMs = server - t1;
    }
    return this.deadlineNow();
  }

  /** The server-clock deadline for a write sent now, the clock offset being known (no await: a save's hot path). */
  private deadlineNow(): string {
    return String(Math.floor(Date.now() + (this.clockOffsetMs ?? 0) + this.commandTimeoutMs - DEADLINE_MARGIN_MS));
  }

  /** Runs a script by SHA (EVAL when the server does not know it). */
  private run(s: RedisScript, keys: string[], args: (string | number)[]): Promise<unknown> {
    return runScript(this.conn.client, s, keys, args);
  }

  /** Connects when needed and runs `fn` within the command timeout; driver errors become BackendError. */
  private call<T>(what: string, key: string | undefined, fn: () => Promise<T>): Promise<T> {
    return this.conn.call(what, key, fn);
  }
}
