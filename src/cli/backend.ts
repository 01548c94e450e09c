/**
 * Which backend a CLI command talks to: the shared `--backend`, `--dir` and
 * `--db` options (falling back to the `DUMPLINGS_PERSISTENCE_BACKEND`,
 * `_DIR` and `_DB` environment variables, then to the library defaults), the
 * `SPEC` syntax of `convert` (`file:./dir`, `sqlite:./x.db`, `memory:`, or a
 * registered backend name), and reads through the public storage contract
 * only (`load`, `listKeys`, `delete`, and `iterHistory` when offered).
 *
 * @module
 */
import { existsSync } from "node:fs";
import path from "node:path";
import type { Command } from "commander";
import { FileBackend } from "../backends/file.js";
import { validateKey } from "../backends/keys.js";
import { MemoryBackend } from "../backends/memory.js";
import { configureBuiltinBackends, getBackend } from "../backends/registry.js";
import { SQLiteBackend } from "../backends/sqlite.js";
import type { StateBackend } from "../backends/types.js";
import { StateNotFoundError } from "../core/errors.js";
import type { Message } from "../core/messages.js";
import type { AgentState } from "../core/state.js";
import { redactUrl } from "../drivers/options.js";
import { InputNotFoundError, UsageError } from "./errors.js";

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
    .option(
      "--backend <name>",
      "file, sqlite, a registered name, or a SPEC such as sqlite:./x.db or redis:redis://host:6379 (env DUMPLINGS_PERSISTENCE_BACKEND)",
    )
    .option("--dir <path>", "directory of the file backend (env DUMPLINGS_PERSISTENCE_DIR)")
    .option("--db <path>", "database file of the SQLite backend (env DUMPLINGS_PERSISTENCE_DB)");
}

/**
 * Opens the backend selected by the options and environment, synchronously.
 * `--backend` takes a registered name (`file`, `sqlite`, `memory`, or one a
 * module loaded with `node --import` registered) or a local SPEC (`file:`,
 * `sqlite:`, `memory:`); {@link openBackendAsync} also opens server SPECs.
 *
 * @param options - `--backend`, `--dir`, `--db` values
 * @param env - environment to read @default process.env
 * @returns the backend and its label
 * @throws {UnknownBackendError} when the name is not registered (lists the known names)
 */
export function openBackend(options: BackendOptions, env: NodeJS.ProcessEnv = process.env): OpenedBackend {
  const name = options.backend ?? nonEmpty(env.DUMPLINGS_PERSISTENCE_BACKEND) ?? "file";
  if (name.includes(":")) return openLocalSpec(name);
  const baseDir = options.dir ?? nonEmpty(env.DUMPLINGS_PERSISTENCE_DIR) ?? DEFAULT_DIR;
  const dbPath = options.db ?? nonEmpty(env.DUMPLINGS_PERSISTENCE_DB) ?? DEFAULT_DB;
  configureBuiltinBackends({ baseDir, dbPath });
  const backend = getBackend(name);
  const label = name === "file" ? `file:${baseDir}` : name === "sqlite" ? `sqlite:${dbPath}` : name;
  return { backend, label };
}

/**
 * Opens the backend selected by the options and environment, server SPECs
 * (`redis:`, `postgres:`) included. What every built-in storage command uses.
 *
 * @param options - `--backend`, `--dir`, `--db` values
 * @param env - environment to read @default process.env
 * @param open - `mustExist`: a `file:`/`sqlite:` SPEC must name an existing path (commands that only read)
 * @returns the backend and its label
 * @throws {UnknownBackendError} / {UsageError} / {InputNotFoundError} as {@link openBackend} and {@link openSpec}
 */
export async function openBackendAsync(
  options: BackendOptions,
  env: NodeJS.ProcessEnv = process.env,
  open: { mustExist?: boolean } = {},
): Promise<OpenedBackend> {
  const name = options.backend ?? nonEmpty(env.DUMPLINGS_PERSISTENCE_BACKEND);
  if (name?.includes(":")) return openSpec(name, open);
  return openBackend(options, env);
}

/**
 * Opens a backend from a SPEC, as `convert --from/--to` and `--backend` take them.
 *
 * - `file:<dir>` — a {@link FileBackend} on that directory;
 * - `sqlite:<db file>` — an {@link SQLiteBackend} on that database;
 * - `redis:<redis URL>` — a `RedisBackend` (`?prefix=…` sets the key prefix, default `duas:`);
 * - `postgres:<postgres URL>` — a `PostgresBackend` (`?schema=…` sets the schema, default `dumplings`);
 * - `memory:` — an empty in-process store (useful only as a scratch target);
 * - a bare name — the registered backend of that name.
 *
 * The Redis and PostgreSQL drivers are loaded only when such a SPEC is used.
 *
 * @param spec - the SPEC text
 * @param open - `mustExist`: a `file:`/`sqlite:` path must exist, so a mistyped source is an error
 *   rather than a new empty store created on the spot (`convert --from`, `ls`, `show`, …)
 * @returns a new backend instance (or the registered one) and its label
 * @throws {UsageError} for an unknown kind or a missing path/URL
 * @throws {InputNotFoundError} when `mustExist` and the path does not exist (nothing is created)
 * @throws {UnknownBackendError} for a bare name that is not registered
 * @example
 * await openSpec("sqlite:./sessions.db")
 * await openSpec("redis:redis://127.0.0.1:6379/0?prefix=agents:")
 */
export async function openSpec(spec: string, open: { mustExist?: boolean } = {}): Promise<OpenedBackend> {
  const colon = spec.indexOf(":");
  const kind = colon < 0 ? "" : spec.slice(0, colon);
  const where = spec.slice(colon + 1);
  const need = (example: string) => {
    if (where === "") throw new UsageError(`backend spec ${JSON.stringify(spec)} needs a location, e.g. ${example}`);
  };
  switch (kind) {
    case "redis": {
      need("redis:redis://127.0.0.1:6379");
      const url = parseUrl(spec, where);
      const keyPrefix = takeParam(url, "prefix");
      const { RedisBackend } = await import("../backends/redis.js");
      return { backend: new RedisBackend({ url: url.href, keyPrefix }), label: redact(spec, url, kind) };
    }
    case "postgres":
    case "postgresql": {
      need("postgres:postgres://user@127.0.0.1:5432/db");
      const url = parseUrl(spec, where);
      const schema = takeParam(url, "schema");
      const { PostgresBackend } = await import("../backends/postgres.js");
      return { backend: new PostgresBackend({ connectionString: url.href, schema }), label: redact(spec, url, kind) };
    }
    default:
      return openLocalSpec(spec, open.mustExist === true);
  }
}

/** Opens a bare registered name or a `file:`, `sqlite:` or `memory:` SPEC (see {@link openSpec}). */
function openLocalSpec(spec: string, mustExist = false): OpenedBackend {
  const colon = spec.indexOf(":");
  if (colon < 0) return { backend: getBackend(spec), label: spec };
  const kind = spec.slice(0, colon);
  const where = spec.slice(colon + 1);
  const need = (example: string) => {
    if (where === "") throw new UsageError(`backend spec ${JSON.stringify(spec)} needs a location, e.g. ${example}`);
  };
  if (mustExist && (kind === "file" || kind === "sqlite") && where !== "" && !existsSync(path.resolve(where))) {
    throw new InputNotFoundError(where);
  }
  switch (kind) {
    case "file":
      need("file:./sessions");
      return { backend: new FileBackend({ baseDir: path.resolve(where) }), label: spec };
    case "sqlite":
      need("sqlite:./sessions.db");
      return { backend: new SQLiteBackend({ dbPath: path.resolve(where) }), label: spec };
    case "memory":
      if (where !== "") break;
      return { backend: new MemoryBackend(), label: "memory:" };
  }
  throw new UsageError(
    `unknown backend spec ${JSON.stringify(spec)}: write file:<dir>, sqlite:<db file>, redis:<url>, postgres:<url>, memory: or a registered backend name`,
  );
}

function parseUrl(spec: string, text: string): URL {
  try {
    return new URL(text);
  } catch (e) {
    throw new UsageError(
      `backend spec ${JSON.stringify(spec)}: ${JSON.stringify(text)} is not a URL (${(e as Error).message})`,
    );
  }
}

function takeParam(url: URL, name: string): string | undefined {
  const value = url.searchParams.get(name) ?? undefined;
  url.searchParams.delete(name);
  return value;
}

/** A label for messages that never shows a password from the URL. */
function redact(spec: string, url: URL, kind: string): string {
  return url.password === "" ? spec : `${kind}:${redactUrl(url.href)}`;
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
  const state = await backend.load(key);
  if (state === undefined) throw new StateNotFoundError(key, label ?? backend.name);
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
    const found = await backend.readHeader(key);
    if (found === undefined) throw new StateNotFoundError(key, label ?? backend.name);
    return found.header;
  }
  const { history, ...header } = await loadRaw(backend, key, label);
  return { ...header, meta: { ...header.meta, messageCount: history.length } };
}

/** A stored session opened for reading: its header and its history as a stream. */
export interface SessionView {
  /** `meta`, `config` and `state` of the stored session. */
  header: Omit<AgentState, "history">;
  /** The history, in order; iterate it once. */
  history: AsyncIterable<Message>;
  /** True when the history is streamed from the backend (bounded memory), false when it was loaded whole. */
  streamed: boolean;
}

/**
 * Opens a stored session for reading through the storage contract. When the
 * backend offers both `readHeader` and `iterHistory`, only the header is read
 * now and the history is streamed (memory bounded regardless of its size);
 * otherwise the whole state is loaded.
 *
 * @param backend - the backend
 * @param key - the session key (validated first)
 * @param label - backend label for the not-found message
 * @returns the header and a one-shot history stream
 * @throws {InvalidKeyError} for a bad key
 * @throws {StateNotFoundError} when nothing is stored under the key
 */
export async function openSession(backend: StateBackend, key: string, label?: string): Promise<SessionView> {
  validateKey(key);
  if (typeof backend.readHeader === "function" && typeof backend.iterHistory === "function") {
    const found = await backend.readHeader(key);
    if (found === undefined) throw new StateNotFoundError(key, label ?? backend.name);
    return { header: found.header, history: backend.iterHistory(key), streamed: true };
  }
  const state = await loadRaw(backend, key, label);
  const { history, ...header } = state;
  return { header, history: toAsync(history), streamed: false };
}

async function* toAsync<T>(items: Iterable<T>): AsyncGenerator<T> {
  yield* items;
}
