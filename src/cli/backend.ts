/**
 * Which backend a CLI command talks to: the shared `--backend`, `--dir` and
 * `--db` options (falling back to the `DUMPLINGS_PERSISTENCE_BACKEND`,
 * `_DIR` and `_DB` environment variables, then to the library defaults), the
 * one SPEC syntax of every command (`spec.ts`: `file:DIR`, `sqlite:PATH`,
 * `postgres://…`, `redis://…`, `memory:`, or a registered backend name), and
 * reads through the public storage contract only (`load`, `listKeys`,
 * `delete`, and `iterHistory` when offered). Commands that only read open
 * with `mustExist`: a store that does not exist is an `InputNotFoundError`
 * (exit 3) and nothing is created. A backend's module is imported when a
 * command opens that backend (so `dumplings ls` on a file store loads neither
 * SQLite's backend nor the registry's built-ins).
 *
 * @module
 */
import { existsSync } from "node:fs";
import path from "node:path";
import type { Command } from "commander";
import { validateKey } from "../backends/keys.js";
import { readFailure } from "../backends/not-found.js";
import type { SQLiteBackend } from "../backends/sqlite.js";
import type { ClippedValue, StateBackend } from "../backends/types.js";
import { ConflictError, FormatError, StateNotFoundError, UnknownBackendError } from "../core/errors.js";
import type { Message } from "../core/messages.js";
import type { AgentState } from "../core/state.js";
import { InputNotFoundError, missingStore, UsageError } from "./errors.js";
import { parseSpec, SESSION_KINDS, type Spec, specForms } from "./spec.js";

/** Default directory of the file backend (as in the persistence layer). */
export const DEFAULT_DIR = "./.dumplingsAI_sessions";
/** Default database path of the SQLite backend (as in the persistence layer). */
export const DEFAULT_DB = "./.dumplingsAI_sessions.db";

/** The backend options every storage command accepts. */
export interface BackendOptions {
  /** `--backend`: a registered backend name (`file`, `sqlite`, `memory`, …). */
  backend?: string;
  /** `--dir`: directory of the file backend. */
  dir?: string;
  /** `--db`: database file of the SQLite backend. */
  db?: string;
}

/** A backend opened for a command, with the label used in messages. */
export interface OpenedBackend {
  /** The backend instance. */
  backend: StateBackend;
  /** Human label, e.g. `file:./.dumplingsAI_sessions` or `sqlite:./x.db`. */
  label: string;
}

/**
 * Adds `--backend`, `--dir` and `--db` to a command.
 *
 * @param command - the commander command
 * @returns the same command, for chaining
 */
export function withBackendOptions(command: Command): Command {
  return command
    .option("--backend <spec>", `${specForms(SESSION_KINDS, true)} (env DUMPLINGS_PERSISTENCE_BACKEND; default file)`)
    .option("--dir <path>", "directory of the file backend (env DUMPLINGS_PERSISTENCE_DIR)")
    .option("--db <path>", "database file of the SQLite backend (env DUMPLINGS_PERSISTENCE_DB)");
}

/** How a command opens its store. */
export interface OpenIntent {
  /**
   * The store must already exist: a `file`/`sqlite` path that does not exist, or a
   * PostgreSQL schema or SQLite file without session tables, is an {@link InputNotFoundError}
   * (exit 3) and nothing is created. For commands that only read or delete.
   */
  mustExist?: boolean;
}

/**
 * Opens the backend selected by the options and environment. What every
 * built-in storage command uses. `--backend` takes a registered name (`file`,
 * `sqlite`, `memory`, or one a module loaded with `node --import` registered)
 * or a SPEC, server SPECs (`redis:`, `postgres:`) included.
 *
 * @param options - `--backend`, `--dir`, `--db` values
 * @param env - environment to read @default process.env
 * @param open - see {@link OpenIntent}
 * @returns the backend and its label
 * @throws {UnknownBackendError} / {UsageError} / {InputNotFoundError} as {@link openSpec}
 */
export async function openBackendAsync(
  options: BackendOptions,
  env: NodeJS.ProcessEnv = process.env,
  open: OpenIntent = {},
): Promise<OpenedBackend> {
  return openParsed(sessionSpec(options, env), options, env, open);
}

/** The SPECs read from `DUMPLINGS_PERSISTENCE_BACKEND` (an unknown name among them names the variable). */
const FROM_ENV = new WeakSet<Spec>();

/** The SPEC `--backend` (or the environment) names; a bare name stays a name. */
function sessionSpec(options: BackendOptions, env: NodeJS.ProcessEnv): Spec {
  const fromEnv = options.backend === undefined && nonEmpty(env.DUMPLINGS_PERSISTENCE_BACKEND) !== undefined;
  const text = options.backend ?? nonEmpty(env.DUMPLINGS_PERSISTENCE_BACKEND) ?? "file";
  const spec = parseSpec(text, {
    kinds: SESSION_KINDS,
    names: true,
    option: fromEnv ? "DUMPLINGS_PERSISTENCE_BACKEND" : "--backend",
  });
  if (fromEnv) FROM_ENV.add(spec);
  return spec;
}

/**
 * Opens a backend from a SPEC, as `convert --from/--to` and `--backend` take them
 * (one syntax for every command, see `spec.ts`):
 *
 * - `file:<dir>` — a {@link FileBackend} on that directory;
 * - `sqlite:<db file>` — an {@link SQLiteBackend} on that database;
 * - `redis://…` or `redis:redis://…` — a `RedisBackend` (`?prefix=…` sets the key prefix, default `duas:`);
 * - `postgres://…` or `postgres:postgres://…` — a `PostgresBackend` (`?schema=…` sets the schema, default `dumplings`);
 * - `memory:` — an empty in-process store (useful only as a scratch target);
 * - a bare name — the registered backend of that name.
 *
 * The Redis and PostgreSQL drivers are loaded only when such a SPEC is used.
 *
 * @param spec - the SPEC text
 * @param open - see {@link OpenIntent}: with `mustExist`, a mistyped source is an error
 *   rather than a new empty store created on the spot (`convert --from`, `ls`, `show`, …)
 * @param option - the option's name for messages @default "--backend"
 * @returns a new backend instance (or the registered one) and its label
 * @throws {UsageError} for an unknown kind or a missing path/URL
 * @throws {InputNotFoundError} when `mustExist` and the store does not exist (nothing is created)
 * @throws {UnknownBackendError} for a bare name that is not registered
 * @example
 * await openSpec("sqlite:./sessions.db")
 * await openSpec("redis://127.0.0.1:6379/0?prefix=agents:")
 */
export async function openSpec(spec: string, open: OpenIntent = {}, option = "--backend"): Promise<OpenedBackend> {
  return openParsed(parseSpec(spec, { kinds: SESSION_KINDS, names: true, option }), {}, process.env, open);
}

async function openParsed(
  spec: Spec,
  options: BackendOptions,
  env: NodeJS.ProcessEnv,
  open: OpenIntent,
): Promise<OpenedBackend> {
  const create = open.mustExist === true ? { create: false } : {};
  let opened: OpenedBackend;
  if (spec.kind === "redis") {
    const { RedisBackend } = await import("../backends/redis.js");
    opened = { backend: new RedisBackend({ url: spec.url, keyPrefix: spec.param }), label: spec.label };
  } else if (spec.kind === "postgres") {
    const { PostgresBackend } = await import("../backends/postgres.js");
    opened = { backend: new PostgresBackend({ url: spec.url, schema: spec.param, ...create }), label: spec.label };
  } else {
    return openLocal(spec, options, env, open);
  }
  if (open.mustExist === true) {
    // A server store is opened lazily: ask it now, so a missing schema is reported before anything is read.
    try {
      await opened.backend.listKeys();
    } catch (error) {
      await closeBackend(opened.backend).catch(() => undefined);
      throw missingStore(error, spec.label);
    }
  }
  return opened;
}

/** Opens a `file:`/`sqlite:`/`memory:` SPEC or a bare registered name, importing only that backend's module. */
async function openLocal(
  spec: Spec,
  options: BackendOptions,
  env: NodeJS.ProcessEnv,
  open: OpenIntent,
): Promise<OpenedBackend> {
  const mustExist = open.mustExist === true;
  const check = (where: string, label: string) => {
    if (mustExist && !existsSync(path.resolve(where))) throw new InputNotFoundError(where, { store: label });
  };
  switch (spec.kind) {
    case "file":
      check(spec.path, spec.text);
      return { backend: await openFile(spec.path), label: spec.text };
    case "sqlite":
      check(spec.path, spec.text);
      return { backend: await openSqlite(spec.path, spec.text, mustExist), label: spec.text };
    case "memory": {
      const { MemoryBackend } = await import("../backends/memory.js");
      return { backend: new MemoryBackend(), label: "memory:" };
    }
    case "name":
      break;
    default:
      throw new UsageError(`${spec.text}: a server backend is opened with openBackendAsync`);
  }
  const name = spec.name;
  const baseDir = options.dir ?? nonEmpty(env.DUMPLINGS_PERSISTENCE_DIR) ?? DEFAULT_DIR;
  const dbPath = options.db ?? nonEmpty(env.DUMPLINGS_PERSISTENCE_DB) ?? DEFAULT_DB;
  if (name === "file") {
    const label = `file:${baseDir}`;
    check(baseDir, label);
    if (mustExist) return { backend: await openFile(baseDir), label };
  } else if (name === "sqlite") {
    const label = `sqlite:${dbPath}`;
    check(dbPath, label);
    if (mustExist) return { backend: await openSqlite(dbPath, label, true), label };
  }
  const { configureBuiltinBackends, getBackend, listBackendNames } = await import("../backends/registry.js");
  configureBuiltinBackends({ baseDir, dbPath });
  if (FROM_ENV.has(spec) && !listBackendNames().includes(name)) {
    throw new UnknownBackendError(name, listBackendNames(), { variable: "DUMPLINGS_PERSISTENCE_BACKEND" });
  }
  const backend = getBackend(name);
  const label = name === "file" ? `file:${baseDir}` : name === "sqlite" ? `sqlite:${dbPath}` : name;
  return { backend, label };
}

async function openFile(dir: string): Promise<StateBackend> {
  const { FileBackend } = await import("../backends/file/index.js");
  return new FileBackend({ baseDir: path.resolve(dir) });
}

async function openSqlite(file: string, label: string, mustExist: boolean): Promise<SQLiteBackend> {
  const { SQLiteBackend } = await import("../backends/sqlite.js");
  try {
    return new SQLiteBackend({ dbPath: path.resolve(file), ...(mustExist ? { create: false } : {}) });
  } catch (error) {
    throw missingStore(error, label);
  }
}

/**
 * Releases a backend's handles (SQLite connection, sockets) when it offers `close`.
 *
 * @param backend - the backend to close
 */
export async function closeBackend(backend: StateBackend): Promise<void> {
  await backend.close?.();
}

/**
 * Runs one read of a backend: its own not-found error (`ENOENT`, `FileNotFoundError`) becomes a
 * {@link StateNotFoundError}, as the library's read paths report it; any other error is thrown as it is.
 */
async function reading<T>(
  backend: StateBackend,
  key: string,
  label: string | undefined,
  read: () => T | Promise<T>,
): Promise<T> {
  try {
    return await read();
  } catch (e) {
    throw readFailure(e, key, labelOf(backend, label));
  }
}

function labelOf(backend: StateBackend, label: string | undefined): string {
  return label ?? (typeof backend.name === "string" && backend.name !== "" ? backend.name : "custom");
}

/**
 * Loads the raw stored state of a key through the storage contract (no
 * class resolution: the CLI never imports a user's module to inspect data).
 *
 * @param backend - the backend
 * @param key - the session key (validated first)
 * @param label - backend label for the not-found message
 * @returns the stored state
 * @throws {InvalidKeyError} for a bad key
 * @throws {StateNotFoundError} when nothing is stored under the key
 */
export async function loadRaw(backend: StateBackend, key: string, label?: string): Promise<AgentState> {
  validateKey(key);
  const state = await reading(backend, key, label, () => backend.load(key));
  if (state === undefined || state === null) throw new StateNotFoundError(key, label ?? backend.name);
  return state;
}

/**
 * Lists the keys of a backend, sorted.
 *
 * @param backend - the backend
 * @returns every stored key in code-point order
 */
export async function listKeysSorted(backend: StateBackend): Promise<string[]> {
  const keys = await backend.listKeys();
  return [...keys].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
}

function nonEmpty(value: string | undefined): string | undefined {
  return value === undefined || value === "" ? undefined : value;
}

/**
 * Reads the header (`meta`, `config`, `state`) of a stored session: with the
 * backend's `readHeader` when it has one (the history is not read at all),
 * else from a whole-state load.
 *
 * @param backend - the backend
 * @param key - the session key (validated first)
 * @param label - backend label for the not-found message
 * @returns the header; `meta.messageCount` is the stored history's length
 * @throws {InvalidKeyError} for a bad key
 * @throws {StateNotFoundError} when nothing is stored under the key
 */
export async function readHeaderOf(
  backend: StateBackend,
  key: string,
  label?: string,
): Promise<Omit<AgentState, "history">> {
  validateKey(key);
  if (typeof backend.readHeader === "function") {
    const found = await reading(backend, key, label, () => backend.readHeader?.(key));
    if (found === undefined || found === null) throw new StateNotFoundError(key, label ?? backend.name);
    return found.header;
  }
  const { history, ...header } = await loadRaw(backend, key, label);
  return { ...header, meta: { ...header.meta, messageCount: history.length } };
}

/**
 * Reads a stored session whole through the backend's verified read path, as
 * `show`, `export` and `convert` read it (for `.duas` files: the header's
 * checksum, every history line, `message_count` and `history_crc32`), without
 * keeping the history: the messages are streamed and counted.
 *
 * @param backend - the backend
 * @param key - the session key (validated first)
 * @param label - backend label for the not-found message
 * @returns the header of the saved state that was read
 * @throws {FormatError} when the session is malformed, or its history does not hold `message_count` messages
 * @throws {StateNotFoundError} / {InvalidKeyError} / {BackendError} as the read path
 */
export async function verifySession(
  backend: StateBackend,
  key: string,
  label?: string,
): Promise<Omit<AgentState, "history">> {
  return readSession(backend, key, label, async (session) => {
    let count = 0;
    for await (const _ of session.history) count++;
    const expected = session.header.meta.messageCount;
    if (count !== expected) {
      throw new FormatError(
        `stored session ${JSON.stringify(key)} says message_count = ${expected} but its history holds ${count} messages`,
      );
    }
    return session.header;
  });
}

/**
 * Runs `work` on every item, at most `limit` at a time, and returns the results in the items' order.
 *
 * @param items - the items
 * @param limit - most calls in flight at once (>= 1)
 * @param work - the call for one item
 * @returns one result per item, in order
 * @throws the first error a call threw: no call starts after it, and the calls in flight are awaited first
 */
export async function mapOrdered<T, R>(
  items: readonly T[],
  limit: number,
  work: (item: T, index: number) => Promise<R>,
): Promise<R[]> {
  const results = new Array<R>(items.length);
  let next = 0;
  let failure: { error: unknown } | undefined;
  const lane = async () => {
    while (next < items.length && failure === undefined) {
      const i = next++;
      try {
        results[i] = await work(items[i] as T, i);
      } catch (error) {
        failure ??= { error };
      }
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, Math.min(limit, items.length)) }, lane));
  if (failure) throw failure.error;
  return results;
}

/** A stored session opened for reading: its header and its history as a stream. */
export interface SessionView {
  /** `meta`, `config` and `state` of the stored session. */
  header: Omit<AgentState, "history">;
  /** The history, in order; iterate it once. It is the history of the same saved state as `header`. */
  history: AsyncIterable<Message>;
  /** True when the history is streamed from the backend (bounded memory), false when it was loaded whole. */
  streamed: boolean;
  /** The stored revision of the state read, when the backend keeps revisions. */
  revision?: number;
  /** Header values the backend returned clipped (see `OpenSessionOptions.clipAt`); absent when none. */
  clipped?: ClippedValue[];
}

/** Options of {@link openSession}. */
export interface OpenSessionOptions {
  /** Open exactly this stored revision: `ConflictError` when the session is stored at another one. */
  revision?: number;
  /**
   * Header values longer than this (UTF-16 code units) may be returned
   * clipped, listed in `clipped` (see `HeaderReadOptions.clipAt`): for a
   * reader that only shows them.
   */
  clipAt?: number;
}

/** How many times a read that met a save in between is started again (see {@link openSession}). */
const READ_ATTEMPTS = 10;

/**
 * Opens a stored session for reading through the storage contract. When the
 * backend offers both `readHeader` and `iterHistory`, only the header is read
 * now and the history is streamed (memory bounded regardless of its size),
 * pinned to the header's revision: a save landing between the two reads
 * (a live session) makes the stream refuse to start (`ConflictError`), and the
 * header is read again, so header and history are always one saved state
 * (after 10 such races in a row, the whole state is loaded instead).
 * Otherwise the whole state is loaded.
 *
 * @param backend - the backend
 * @param key - the session key (validated first)
 * @param label - backend label for the not-found message
 * @param options - `revision`: open only that stored revision; `clipAt`: long header values may come clipped
 * @returns the header and a one-shot history stream of the same saved state
 * @throws {InvalidKeyError} for a bad key
 * @throws {StateNotFoundError} when nothing is stored under the key
 * @throws {ConflictError} when `options.revision` is not the stored revision
 */
export async function openSession(
  backend: StateBackend,
  key: string,
  label?: string,
  options: OpenSessionOptions = {},
): Promise<SessionView> {
  validateKey(key);
  if (typeof backend.readHeader === "function" && typeof backend.iterHistory === "function") {
    for (let attempt = 1; ; attempt++) {
      const found = await reading(backend, key, label, () =>
        backend.readHeader?.(key, options.clipAt === undefined ? undefined : { clipAt: options.clipAt }),
      );
      if (found === undefined || found === null) throw new StateNotFoundError(key, label ?? backend.name);
      const revision = found.revision;
      if (options.revision !== undefined && revision !== undefined && revision !== options.revision) {
        throw new ConflictError(key, options.revision, revision, backend.name);
      }
      const stream = backend.iterHistory(key, revision === undefined ? {} : { revision })[Symbol.asyncIterator]();
      let first: IteratorResult<Message>;
      try {
        // Started now: a save between the header and the history is a ConflictError before any message.
        first = await stream.next();
      } catch (e) {
        if (!(e instanceof ConflictError) || options.revision !== undefined)
          throw readFailure(e, key, labelOf(backend, label));
        // A session saved faster than a header and a first page can be read in turn: read it whole instead
        // (one saved state, in memory).
        if (attempt >= READ_ATTEMPTS) return whole(backend, key, label);
        continue;
      }
      const view: SessionView = { header: found.header, history: resumed(first, stream), streamed: true, revision };
      if (found.clipped !== undefined && found.clipped.length > 0) view.clipped = found.clipped;
      return view;
    }
  }
  if (options.revision !== undefined && typeof backend.read === "function") {
    const view = await whole(backend, key, label);
    if (view.revision !== options.revision)
      throw new ConflictError(key, options.revision, view.revision ?? null, backend.name);
    return view;
  }
  return whole(backend, key, label);
}

/** The whole stored state, loaded at once (with its revision when the backend keeps revisions). */
async function whole(backend: StateBackend, key: string, label: string | undefined): Promise<SessionView> {
  if (typeof backend.read === "function") {
    const found = await reading(backend, key, label, () => backend.read?.(key));
    if (found === undefined || found === null) throw new StateNotFoundError(key, label ?? backend.name);
    const { history, ...header } = found.state;
    return { header, history: toAsync(history), streamed: false, revision: found.revision };
  }
  const state = await loadRaw(backend, key, label);
  const { history, ...header } = state;
  return { header, history: toAsync(history), streamed: false };
}

/**
 * Opens a session with {@link openSession} and reads it with `read`; when a
 * paged store reports that a save changed the history mid-read
 * (`ConflictError`), the whole read starts again (the 10th time on the session
 * loaded whole). `read` must have no effect outside itself before it finishes
 * (it may run again).
 *
 * @param backend - the backend
 * @param key - the session key
 * @param label - backend label for the not-found message
 * @param read - consumes the session; its result is returned
 * @param options - `clipAt`, passed to {@link openSession}
 * @returns what `read` returned for one saved state
 * @throws what `read` or {@link openSession} throw
 */
export async function readSession<T>(
  backend: StateBackend,
  key: string,
  label: string | undefined,
  read: (session: SessionView) => Promise<T>,
  options: Pick<OpenSessionOptions, "clipAt"> = {},
): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    // The last attempt loads the session whole (one saved state, in memory): a paged store written
    // faster than it can be read page by page is still read.
    const session =
      attempt < READ_ATTEMPTS ? await openSession(backend, key, label, options) : await whole(backend, key, label);
    try {
      return await read(session);
    } catch (e) {
      if (e instanceof ConflictError && attempt < READ_ATTEMPTS) continue;
      throw e;
    }
  }
}

/** `first` then the rest of `rest`; a consumer that stops early closes `rest` (its file or connection). */
async function* resumed<T>(first: IteratorResult<T>, rest: AsyncIterator<T>): AsyncGenerator<T> {
  if (first.done) return;
  let done = false;
  try {
    yield first.value;
    for (let r = await rest.next(); !r.done; r = await rest.next()) yield r.value;
    done = true;
  } finally {
    if (!done) await rest.return?.();
  }
}

async function* toAsync<T>(items: Iterable<T>): AsyncGenerator<T> {
  yield* items;
}
