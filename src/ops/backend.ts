/**
 * Which session backend an operator tool (the `dumplings` command, the web
 * inspector it starts) talks to: the `--backend`, `--dir` and `--db` values
 * (falling back to the `DUMPLINGS_PERSISTENCE_BACKEND`, `_DIR` and `_DB`
 * environment variables, then to the library defaults) and the one SPEC
 * syntax of every command (`spec.ts`: `file:DIR`, `sqlite:PATH`,
 * `postgres://…`, `redis://…`, `memory:`, or a registered backend name).
 * Tools that only read open with `mustExist`: a store that does not exist is
 * an `InputNotFoundError` (exit 3) and nothing is created. A backend's module
 * is imported when that backend is opened (so `dumplings ls` on a file store
 * loads neither SQLite's backend nor the registry's built-ins). Reading the
 * sessions is `sessions.ts`.
 *
 * @module
 */

import { existsSync } from "node:fs";
import path from "node:path";
import type { SQLiteBackend } from "../backends/sqlite.js";
import type { StateBackend } from "../backends/types.js";
import { DEFAULT_FILES } from "../core/defaults.js";
import { UnknownBackendError } from "../core/errors.js";
import { InputNotFoundError, missingStore, UsageError } from "./errors.js";
import { parseSpec, SESSION_KINDS, type Spec } from "./spec.js";

/** Default directory of the file backend (as in the persistence layer). */
export const DEFAULT_DIR = DEFAULT_FILES.sessionsDir;
/** Default database path of the SQLite backend (as in the persistence layer). */
export const DEFAULT_DB = DEFAULT_FILES.sessionsDb;

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

function nonEmpty(value: string | undefined): string | undefined {
  return value === undefined || value === "" ? undefined : value;
}
