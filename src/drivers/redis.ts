/**
 * The Redis driver: the one place that knows how to reach Redis, shared by
 * the session backend (`RedisBackend`), the workflow hot tier
 * (`RedisHotTier`), the durable journal (`RedisJournal`), the run stream
 * (`RedisRunStream`) and the BullMQ queue and workers (`DurableQueue`,
 * `DurableWorker`).
 *
 * It owns:
 * - **the options**, one vocabulary and one set of defaults for every Redis
 *   component ({@link RedisConnectionOptions}): `client` (injected, left
 *   open), `url` (default `process.env.REDIS_URL`, else
 *   {@link DEFAULT_REDIS_URL}, read at construction), `keyPrefix` (each
 *   component keeps its own default), `connectTimeoutMs` and
 *   `commandTimeoutMs` (default 2000 ms each). A bad value is an
 *   {@link InvalidOptionError} from the constructor, before any connection;
 *   an old option name is a deprecated alias ({@link renamedOption});
 * - **connections**: `ioredis` is loaded when a component first needs a
 *   client of its own ({@link loadIoredis}; importing the library never loads
 *   it, nor `bullmq`: {@link loadBullmq}). A client the driver creates has
 *   bounded connect and command timeouts and the `maxRetriesPerRequest` its
 *   caller needs (0: a command in flight when the connection drops fails and
 *   is never re-sent, so a call reported as failed does not land later;
 *   `null` for BullMQ's workers); no offline queue unless BullMQ needs one;
 *   it connects on first use and reconnects in the background (at most 1 s
 *   apart). It always has
 *   an `'error'` listener, so a dead Redis never crashes the process nor
 *   prints ioredis's "Unhandled error event" stack traces: the connection
 *   failure is reported by the call that needed the connection;
 * - **outages**: the first call while Redis is unreachable waits at most
 *   `connectTimeoutMs`; then calls fail at once until the connection is back
 *   (a circuit breaker, so an outage holds no growing queue: ioredis#285);
 *   calls on an injected client are bounded by `commandTimeoutMs` with a timer;
 * - **errors**: every driver error becomes a {@link BackendError} (backend
 *   `redis`) naming what was being done and the key, with the driver's error
 *   as `cause`;
 * - **scripts**: {@link redisScript} / {@link runScript} run a Lua script by
 *   its SHA (one round trip, the script text sent only when Redis does not
 *   know it yet);
 * - **eviction**: a component that is the source of truth (sessions, the
 *   durable journal, run streams, the LangGraph checkpointer) checks the
 *   server's `maxmemory-policy` once per connection, before its first command
 *   ({@link RedisSourceOfTruthOptions}): anything but `noeviction` is refused
 *   with an {@link InvalidOptionError} (option `allowEviction`), or accepted
 *   with a process warning (`DUMPLINGS_REDIS_EVICTION`) when `allowEviction`
 *   is true. A cache (the checkpoint hot tier) does not check.
 *
 * @module
 */
import { createHash } from "node:crypto";
import type { Redis, RedisOptions } from "ioredis";
import { BackendError, DumplingsError, InvalidOptionError } from "../core/errors.js";
import type { OptionKeyList } from "../core/options.js";
import { parseUrlOption, positiveOption, redactUrl, renamedOption as sharedRenamedOption } from "./options.js";
import { loadIoredis } from "./redis-load.js";

/** Connection URL when neither `url` nor `REDIS_URL` is set. */
export const DEFAULT_REDIS_URL = "redis://127.0.0.1:6379";
/** Default bound on connecting, in ms, of every Redis component. */
export const DEFAULT_CONNECT_TIMEOUT_MS = 2000;
/** Default bound on one command, in ms, of every Redis component. */
export const DEFAULT_COMMAND_TIMEOUT_MS = 2000;

/** Name of every Redis component in errors (`[dumplings:redis] …`). */
const NAME = "redis";

/**
 * An ioredis client as the library's public types name it (the `client`
 * option, a component's `client`). Structural, so an ioredis `Redis` fits as
 * is, and the published declarations never import `ioredis` (an optional peer
 * dependency): an app without it type-checks with `skipLibCheck: false`. The
 * components call its commands through ioredis's own types.
 */
export interface IoRedisClient {
  /** Connection state: `wait`, `connecting`, `connect`, `ready`, `close`, `reconnecting` or `end`. */
  readonly status: string;
  /** Closes the connection gracefully. */
  quit(): Promise<unknown>;
  /** Closes the connection at once. */
  disconnect(): void;
}

/**
 * Connection options shared by every Redis component. Components add their
 * own options beside these (TTL, stream length…) and their own default
 * `keyPrefix`.
 *
 * @typeParam C - the client shape the component accepts (an ioredis `Redis` fits every one)
 */
export interface RedisConnectionOptions<C = IoRedisClient> {
  /**
   * A client to use, e.g. an ioredis `Redis`; it is left open by `close()`.
   * When absent, an ioredis client is created from `url`.
   */
  client?: C;
  /**
   * URL of the created client: `redis://[user:password@]host[:port][/db]`,
   * `rediss://…` (TLS) or `unix:/path/to/redis.sock[?db=N]`. Ignored (but
   * checked) when `client` is given.
   * @default process.env.REDIS_URL ?? "redis://127.0.0.1:6379"
   */
  url?: string;
  /** Prefix of every Redis key the component touches. The default depends on the component. */
  keyPrefix?: string;
  /** Bound on connecting, in ms (created client): the first call during an outage fails after this long. @default 2000 */
  connectTimeoutMs?: number;
  /** Bound on each command, in ms; a call that takes longer fails with `BackendError`. @default 2000 */
  commandTimeoutMs?: number;
}

/**
 * The keys of {@link RedisConnectionOptions}, for each component's option
 * check (`optionKeys<…>({ ...REDIS_CONNECTION_KEYS, own: true })`).
 */
export const REDIS_CONNECTION_KEYS: OptionKeyList<RedisConnectionOptions> = {
  client: true,
  url: true,
  keyPrefix: true,
  connectTimeoutMs: true,
  commandTimeoutMs: true,
};

/**
 * The option of a Redis component that is the source of truth of what it
 * stores (`RedisBackend`, `RedisJournal`, `RedisRunStream`, the LangGraph
 * `RedisSaverStorage`): Redis configured to evict keys under memory pressure
 * (any `maxmemory-policy` but `noeviction`) would silently lose runs,
 * sessions, histories and stream events, and a durable run whose keys
 * vanished could run its completed steps again.
 */
export interface RedisSourceOfTruthOptions {
  /**
   * Accept a server whose `maxmemory-policy` is not `noeviction`: the
   * component works and emits one process warning (`process.emitWarning`,
   * code `DUMPLINGS_REDIS_EVICTION`) per connection instead of refusing.
   * When false, the first call on such a server (and each call until the
   * policy is `noeviction`) fails with an {@link InvalidOptionError} (option
   * `allowEviction`) and nothing is read or written. The policy is read with
   * `CONFIG GET maxmemory-policy`, else (managed Redis, `CONFIG` disabled or
   * renamed) from `INFO memory`; when neither answers, nothing is refused.
   * @default false
   */
  allowEviction?: boolean;
}

/** The keys of {@link RedisSourceOfTruthOptions}, for the option check of each source-of-truth component. */
export const REDIS_SOURCE_OF_TRUTH_KEYS: OptionKeyList<RedisSourceOfTruthOptions> = { allowEviction: true };

/** `code` of the process warning a source-of-truth component emits when `allowEviction` accepts an evicting server. */
export const EVICTION_WARNING_CODE = "DUMPLINGS_REDIS_EVICTION";

/** How a component wants its own client made (not user options: each component fixes these). */
export interface RedisConnectionSettings {
  /** What the component is, for messages: `backend`, `journal`, `hot tier`… */
  label: string;
  /** The component's default `keyPrefix`. */
  keyPrefix: string;
  /**
   * ioredis `maxRetriesPerRequest` of the created client: 0 fails a command in
   * flight when the connection drops (and never re-sends it); `null` (BullMQ
   * workers) waits through reconnects and re-sends unanswered commands.
   * @default 0
   */
  maxRetriesPerRequest?: number | null;
  /** Keep ioredis's offline queue: commands sent before the connection is ready wait for it (BullMQ's own commands). @default false */
  offlineQueue?: boolean;
  /** Apply `commandTimeoutMs` to every command of the created client (false for connections running blocking commands). @default true */
  commandTimeout?: boolean;
  /** Start connecting at construction instead of at the first call. @default false */
  connectNow?: boolean;
  /** Called each time the created client (re)connects. */
  onReady?: () => void;
  /** Treat the injected `client` as the component's own: listen to it and close it on `close()` (duplicates the component made). */
  adopt?: boolean;
  /**
   * The component is the source of truth of its data: check `maxmemory-policy` before the first command
   * of each connection and honour the `allowEviction` option ({@link RedisSourceOfTruthOptions}).
   * @default false
   */
  sourceOfTruth?: boolean;
}

/** The commands the eviction check may use, all optional (an injected client may have only some). */
interface PolicyReader {
  config?(sub: string, name: string): Promise<unknown>;
  info?(section: string): Promise<unknown>;
  eval?(script: string, numKeys: number): Promise<unknown>;
}

/** The events and state of an ioredis client the driver uses, all optional so any injected shape fits. */
interface Watchable {
  status?: string;
  on?(event: string, listener: () => void): unknown;
  off?(event: string, listener: () => void): unknown;
  once?(event: string, listener: () => void): unknown;
}

/**
 * Resolves a renamed option of a Redis component (see {@link sharedRenamedOption}).
 *
 * @throws {InvalidOptionError} when both names are given and differ
 * @example
 * const keyPrefix = renamedOption("keyPrefix", options.keyPrefix, "prefix", options.prefix);
 */
export function renamedOption<T>(name: string, value: T | undefined, oldName: string, oldValue: T | undefined) {
  return sharedRenamedOption(NAME, name, value, oldName, oldValue);
}

/**
 * Checks a duration option of a Redis component (a timeout, a TTL).
 *
 * @returns `value` rounded up to whole ms, or `fallback`
 * @throws {InvalidOptionError} when `value` is not a positive finite number
 */
export function positiveMs(option: string, value: unknown, fallback: number): number {
  return positiveOption(NAME, option, value, fallback);
}

/** Where a created client connects: a `redis://`/`rediss://` URL, or a unix socket (and database). */
export type RedisTarget = { url: string } | { path: string; db?: number };

/**
 * Checks a Redis URL and says where it points.
 *
 * @param url - `redis://…`, `rediss://…` or `unix:/path[?db=N]`
 * @param source - where the URL came from, for the message (e.g. `REDIS_URL`)
 * @throws {InvalidOptionError} (option `url`) when it is not one of those or does not parse
 */
export function parseRedisUrl(url: unknown, source?: string): RedisTarget {
  const u = parseUrlOption(NAME, url, ["redis:", "rediss:", "unix:"], source);
  const text = url as string;
  const refuse = (why: string): never => {
    throw new InvalidOptionError(NAME, "url", `${why}${source ? ` (read from ${source})` : ""}`);
  };
  const db = u.protocol === "unix:" ? u.searchParams.get("db") : u.pathname.replace(/^\//, "");
  if (db && !/^\d+$/.test(db)) refuse(`${JSON.stringify(redactUrl(text))} names database ${JSON.stringify(db)}`);
  if (u.protocol === "unix:") {
    if (!u.pathname || u.pathname === "/") refuse(`${JSON.stringify(redactUrl(text))} names no socket path`);
    return db ? { path: u.pathname, db: Number(db) } : { path: u.pathname };
  }
  if (!u.hostname) refuse(`${JSON.stringify(redactUrl(text))} names no host`);
  return { url: text };
}

/**
 * Bounds a command's promise by `ms` (the `commandTimeoutMs` option): it rejects with a plain error
 * after that long, naming the option to raise (the caller maps it), and the timer never outlives the
 * promise.
 */
export function withTimeout<T>(promise: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new Error(`no answer from Redis within ${ms} ms (commandTimeoutMs: raise it for large writes)`)),
      ms,
    );
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

/**
 * Escapes Redis glob characters (`*`, `?`, `[`, `]`, `\`) so that a user
 * string — a key prefix, an id — matches literally in a pattern (`SCAN
 * MATCH`, `KEYS`, `PSUBSCRIBE`). The one helper every Redis component uses:
 * no user string reaches a pattern without it.
 *
 * @param s - the literal text
 * @returns `s` with each glob character preceded by a backslash
 * @example
 * client.scan("0", "MATCH", `${globEscape(keyPrefix)}*`) // keyPrefix "app[1]:" matches only itself
 */
export function globEscape(s: string): string {
  return s.replace(/[*?[\]\\]/g, (c) => `\\${c}`);
}

/** A Lua script and its SHA-1, for {@link runScript}. */
export interface RedisScript {
  readonly source: string;
  readonly sha: string;
}

/** The two commands {@link runScript} needs (an ioredis `Redis` has them). */
export interface ScriptClient {
  evalsha(sha: string, numKeys: number, ...args: (string | number | Buffer)[]): Promise<unknown>;
  eval(script: string, numKeys: number, ...args: (string | number | Buffer)[]): Promise<unknown>;
}

/** Prepares a Lua script for {@link runScript} (its SHA is computed once). */
export function redisScript(source: string): RedisScript {
  return { source, sha: createHash("sha1").update(source).digest("hex") };
}

/**
 * Runs a script by SHA (`EVALSHA`), sending its text (`EVAL`) only when the
 * server does not know it (`NOSCRIPT`: first use, restart, `SCRIPT FLUSH`).
 *
 * @returns the script's reply
 * @throws the driver's error (call it inside {@link RedisConnection.call})
 */
export async function runScript(
  client: ScriptClient,
  script: RedisScript,
  keys: readonly string[],
  args: readonly (string | number | Buffer)[],
): Promise<unknown> {
  try {
    return await client.evalsha(script.sha, keys.length, ...keys, ...args);
  } catch (e) {
    if (e instanceof Error && e.message.startsWith("NOSCRIPT")) {
      return await client.eval(script.source, keys.length, ...keys, ...args);
    }
    throw e;
  }
}

/**
 * A Redis connection for one component: options, the client (created or
 * injected), outage handling and typed errors. Components hold one and never
 * create an ioredis client themselves.
 *
 * @typeParam C - the client shape the component calls
 * @example
 * const conn = new RedisConnection<Redis>(options, { label: "journal", keyPrefix: "dumplings:durable:" });
 * const h = await conn.call(`cannot read run "r1"`, "r1", (c) => c.hgetall(`${conn.keyPrefix}{r1}:run`));
 * await conn.close();
 */
export class RedisConnection<C = IoRedisClient> {
  /** Backend name in errors: `redis`. */
  readonly name = NAME;
  /** The client in use (created or injected). */
  readonly client: C;
  /** The key prefix in use (the option, else the component's default). */
  readonly keyPrefix: string;
  /** The URL of the created client (the option or its default; `undefined` with an injected client and no `url`). */
  readonly url: string | undefined;
  /** Bound on connecting, ms. */
  readonly connectTimeoutMs: number;
  /** Bound on each command, ms. */
  readonly commandTimeoutMs: number;
  /** The client when the connection owns it (created, or adopted), else `undefined`. */
  private readonly own: Redis | undefined;
  private readonly label: string;
  private lastError: unknown;
  private connecting: Promise<void> | undefined;
  /** A database number the server refused: every call fails with it (ioredis would use database 0). */
  private selectError: InvalidOptionError | undefined;
  /** Set when a connect wait timed out; cleared by the next "ready". Calls meanwhile fail at once. */
  private unreachable = false;
  private closed = false;
  /** Source of truth only: refuse (`"refuse"`) or warn (`"warn"`) on an evicting server; undefined: no check. */
  private readonly eviction: "refuse" | "warn" | undefined;
  /** The eviction check of the current connection once it passed (kept until the next reconnect). */
  private policyChecked: Promise<void> | undefined;

  /**
   * @param options - see {@link RedisConnectionOptions}
   * @param settings - see {@link RedisConnectionSettings}
   * @throws {InvalidOptionError} on a malformed URL (option or `REDIS_URL`), a timeout that is not a positive number of ms, a key prefix that is not a string, an `allowEviction` that is not a boolean
   */
  constructor(
    options: (RedisConnectionOptions<C> & RedisSourceOfTruthOptions) | undefined,
    settings: RedisConnectionSettings,
  ) {
    const o = options ?? {};
    this.label = settings.label;
    const allow = o.allowEviction;
    if (allow !== undefined && typeof allow !== "boolean") {
      throw new InvalidOptionError(
        NAME,
        "allowEviction",
        `must be true or false, got ${JSON.stringify(allow) ?? String(allow)}`,
      );
    }
    this.eviction = settings.sourceOfTruth ? (allow ? "warn" : "refuse") : undefined;
    const prefix = o.keyPrefix ?? settings.keyPrefix;
    if (typeof prefix !== "string") {
      throw new InvalidOptionError(NAME, "keyPrefix", `must be a string, got ${String(prefix)}`);
    }
    this.keyPrefix = prefix;
    this.connectTimeoutMs = positiveMs("connectTimeoutMs", o.connectTimeoutMs, DEFAULT_CONNECT_TIMEOUT_MS);
    this.commandTimeoutMs = positiveMs("commandTimeoutMs", o.commandTimeoutMs, DEFAULT_COMMAND_TIMEOUT_MS);
    if (o.url !== undefined) parseRedisUrl(o.url);
    if (o.client) {
      this.client = o.client;
      this.url = o.url;
      this.own = settings.adopt ? (o.client as unknown as Redis) : undefined;
    } else {
      this.url = o.url ?? process.env.REDIS_URL ?? DEFAULT_REDIS_URL;
      const target = parseRedisUrl(this.url, o.url === undefined && process.env.REDIS_URL ? "REDIS_URL" : undefined);
      this.own = this.create(target, settings);
      this.client = this.own as unknown as C;
    }
    if (this.own) this.watch(this.own, settings.onReady);
  }

  /**
   * Runs `fn` on the client: first waits (bounded) for an owned client's
   * connection, then bounds an injected client's call by `commandTimeoutMs`
   * (an owned client bounds each command itself); any driver error becomes a
   * {@link BackendError}.
   *
   * @param what - what is being done, e.g. `cannot load "k"`
   * @param key - the key involved, if any
   * @param fn - the Redis work
   * @throws {BackendError} when Redis fails, is unreachable or does not answer in time, or the connection is closed
   * @throws {InvalidOptionError} (option `allowEviction`) when the component is a source of truth, the
   *   server's `maxmemory-policy` is not `noeviction` and `allowEviction` is not true (nothing was run)
   */
  async call<T>(what: string, key: string | undefined, fn: (client: C) => Promise<T>): Promise<T> {
    if (this.closed) throw new BackendError(NAME, `${what}: the ${this.label} is closed`, { key });
    try {
      await this.ready();
      if (this.eviction) await this.checkEviction();
      return await (this.own ? fn(this.client) : withTimeout(fn(this.client), this.commandTimeoutMs));
    } catch (e) {
      if (e instanceof DumplingsError) throw e;
      throw new BackendError(NAME, what, { key, cause: e });
    }
  }

  /**
   * Waits for the connection as a call does, with the same bound and errors.
   *
   * @param what - what needs it, for the error, e.g. `cannot start a worker`
   * @throws {BackendError} when Redis is not reachable within `connectTimeoutMs`, or the connection is closed
   */
  connect(what: string): Promise<void> {
    return this.call(what, undefined, () => Promise.resolve());
  }

  /**
   * Waits (at most `connectTimeoutMs`) for the owned client to be connected;
   * resolves at once for an injected client. Concurrent callers share one
   * wait, so an outage adds no listener per call; once a wait has timed out,
   * calls fail at once until the client is ready again (ioredis keeps
   * reconnecting in the background).
   *
   * @throws {Error} (the caller maps it) when Redis is not reachable
   */
  ready(): Promise<void> {
    const redis = this.own;
    if (this.selectError) return Promise.reject(this.selectError);
    if (!redis || redis.status === "ready") return Promise.resolve();
    if (this.unreachable && !this.connecting) {
      return Promise.reject(
        new Error(`Redis is unreachable (status ${redis.status}); reconnecting in the background${this.last()}`, {
          cause: this.lastError,
        }),
      );
    }
    this.connecting ??= this.waitFor(redis, this.connectTimeoutMs).then((ok) => {
      this.connecting = undefined;
      // ioredis reports a refused SELECT as an "error" event, then is ready on database 0
      if (this.selectError) throw this.selectError;
      if (ok) return;
      this.unreachable = true;
      throw new Error(
        `not connected to Redis within ${this.connectTimeoutMs} ms (status ${redis.status})${this.last()}`,
        {
          cause: this.lastError,
        },
      );
    });
    return this.connecting;
  }

  /**
   * Waits at most `timeoutMs` for the client's connection; never throws
   * (`false` when not connected in time, or when an injected client cannot
   * tell). For a component that may start before Redis is up and must not
   * fail for it (the hot tier, when `CheckpointStore.open` starts).
   *
   * @param timeoutMs - the bound, ms @default connectTimeoutMs
   * @returns whether the client is connected
   */
  async waitReady(timeoutMs = this.connectTimeoutMs): Promise<boolean> {
    if (this.closed) return false;
    const client = this.client as Watchable;
    if (client.status === "ready") return true;
    if (typeof client.once !== "function" || typeof client.off !== "function") return false;
    const ok = await this.waitFor(client, timeoutMs);
    if (!ok && this.own) this.unreachable = true;
    return ok;
  }

  /**
   * A second connection of this one's client (`client.duplicate(overrides)`),
   * owned by the caller: with the same outage handling and errors, closed by
   * its own `close()`. For blocking commands (`XREAD BLOCK`), which would
   * hold up every other command of a shared connection. While this
   * connection knows Redis is down, the copy's calls fail at once too.
   *
   * @param overrides - ioredis options of the copy (`RedisOptions`), e.g. a longer `commandTimeout`
   */
  duplicate(overrides: Record<string, unknown> = {}): RedisConnection<C> {
    const copy = (this.client as unknown as Redis).duplicate(overrides as Partial<RedisOptions>);
    const conn = new RedisConnection<C>(
      {
        client: copy as unknown as C,
        keyPrefix: this.keyPrefix,
        connectTimeoutMs: this.connectTimeoutMs,
        commandTimeoutMs: this.commandTimeoutMs,
      },
      { label: this.label, keyPrefix: this.keyPrefix, adopt: true },
    );
    // Redis known down: the copy fails at once too, instead of waiting connectTimeoutMs again.
    conn.unreachable = this.unreachable && this.own?.status !== "ready";
    return conn;
  }

  /**
   * Closes the owned client (gracefully, within `commandTimeoutMs`, else at
   * once); an injected client is left open. Idempotent; later calls fail with
   * {@link BackendError}.
   */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    const redis = this.own;
    if (!redis) return;
    if (redis.status === "ready") {
      await withTimeout(redis.quit(), this.commandTimeoutMs).catch(() => redis.disconnect());
    } else {
      redis.disconnect();
    }
  }

  /** Closes the owned client at once, dropping commands in flight (a blocked `XREAD`). */
  disconnect(): void {
    this.closed = true;
    this.own?.disconnect();
  }

  // ---- internals ----

  /**
   * The eviction check of a source of truth, once per connection: reads the server's `maxmemory-policy`
   * and refuses (or warns about) anything but `noeviction`. A refusal is not kept, so a server fixed
   * meanwhile is accepted at the next call.
   */
  private checkEviction(): Promise<void> {
    this.policyChecked ??= this.readPolicy().then((policy) => {
      if (policy === undefined || policy === "noeviction") return;
      const where = this.url === undefined ? "the Redis server" : `Redis at ${redactUrl(this.url)}`;
      const why = `${where} has maxmemory-policy ${policy}: under memory pressure it deletes keys, and the ${this.label}'s data would vanish without an error (a durable run could run its completed steps again, a session lose its history). Set maxmemory-policy noeviction on the server`;
      if (this.eviction === "warn") {
        process.emitWarning(`[dumplings:redis] ${why}; allowEviction: true accepts it`, {
          code: EVICTION_WARNING_CODE,
        });
        return;
      }
      this.policyChecked = undefined;
      throw new InvalidOptionError(
        NAME,
        "allowEviction",
        `${why}, or pass allowEviction: true to accept eviction with a warning; nothing was read or written`,
      );
    });
    return this.policyChecked;
  }

  /** `maxmemory-policy`: `CONFIG GET`, else `INFO memory` (managed Redis may disable `CONFIG`); undefined when neither answers. */
  private async readPolicy(): Promise<string | undefined> {
    const c = this.client as PolicyReader;
    const bounded = <T>(p: Promise<T>) => (this.own ? p : withTimeout(p, this.commandTimeoutMs));
    try {
      if (typeof c.config === "function") {
        const r = await bounded(c.config("GET", "maxmemory-policy"));
        if (Array.isArray(r) && typeof r[1] === "string" && r[1] !== "") return r[1];
      }
    } catch {
      // CONFIG disabled or renamed: INFO below
    }
    try {
      const info =
        typeof c.info === "function"
          ? await bounded(c.info("memory"))
          : typeof c.eval === "function"
            ? await bounded(c.eval("return redis.call('INFO', 'memory')", 0))
            : undefined;
      const m = typeof info === "string" ? /^maxmemory_policy:(\S+)/m.exec(info) : null;
      return m?.[1];
    } catch {
      return undefined; // neither answers: not refused
    }
  }

  private create(target: RedisTarget, settings: RedisConnectionSettings): Redis {
    const { Redis } = loadIoredis();
    const retries = settings.maxRetriesPerRequest === undefined ? 0 : settings.maxRetriesPerRequest;
    const options: RedisOptions = {
      lazyConnect: settings.connectNow !== true,
      connectTimeout: this.connectTimeoutMs,
      ...(settings.commandTimeout === false ? {} : { commandTimeout: this.commandTimeoutMs }),
      maxRetriesPerRequest: retries,
      enableOfflineQueue: settings.offlineQueue === true,
      autoResendUnfulfilledCommands: retries === null,
      retryStrategy: (times) => Math.min(100 * times, 1000),
    };
    return "url" in target ? new Redis(target.url, options) : new Redis({ ...target, ...options });
  }

  /** Listens to an owned client: errors are kept for the failing call's message, never unhandled. */
  private watch(redis: Redis, onReady: (() => void) | undefined): void {
    redis.on("error", (e: unknown) => {
      this.lastError = e;
      if (e instanceof Error && /DB index is out of range|invalid DB index/i.test(e.message)) {
        // Every command would otherwise run on database 0: refuse them all, as a bad option.
        this.selectError = new InvalidOptionError(
          "redis",
          "url",
          `${redactUrl(this.url ?? "")} names database ${String(redis.options.db)}, which this server refuses (${e.message}); nothing was read or written`,
        );
        redis.disconnect();
      }
    });
    redis.on("ready", () => {
      this.unreachable = false;
      this.policyChecked = undefined; // maybe another server (or its configuration) now: check again
      onReady?.();
    });
  }

  /** Starts connecting when the owned client is idle, then waits for "ready" at most `ms`. */
  private waitFor(client: Watchable, ms: number): Promise<boolean> {
    const redis = this.own;
    if (redis && client === (redis as Watchable) && (redis.status === "wait" || redis.status === "end")) {
      redis.connect().catch((e: unknown) => {
        this.lastError = e;
      });
    }
    return new Promise<boolean>((resolve) => {
      const done = (ok: boolean) => {
        clearTimeout(timer);
        client.off?.("ready", onReady);
        resolve(ok);
      };
      const onReady = () => done(true);
      const timer = setTimeout(() => done(false), ms);
      client.once?.("ready", onReady);
      if (client.status === "ready") done(true);
    });
  }

  private last(): string {
    return this.lastError instanceof Error ? `: ${this.lastError.message}` : "";
  }
}
