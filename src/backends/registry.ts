/**
 * The backend registry: backends by name, the default backend, and the three
 * built-in names `file`, `sqlite` and `memory`.
 *
 * Built-in backends are created lazily, on first use, from the settings given
 * to {@link configureBuiltinBackends} (the persistence layer's `configure` and
 * the `DUMPLINGS_PERSISTENCE_DIR` / `DUMPLINGS_PERSISTENCE_DB` env vars end up
 * there). Changing a setting drops — and closes — the cached instance, so the
 * next use opens the new location. A registered backend of a built-in name
 * (with `{ replace: true }`) takes precedence over the built-in one.
 *
 * Names are kept in `Map`s (never plain objects), so a name such as
 * `__proto__` is just a name.
 *
 * @module
 */
import { BackendExistsError, DumplingsError, UnknownBackendError } from "../core/errors.js";
import { FileBackend } from "./file.js";
import { MemoryBackend } from "./memory.js";
import { SQLiteBackend } from "./sqlite.js";
import type { StateBackend } from "./types.js";

/** Built-in backend names. */
export const BUILTIN_BACKENDS = ["file", "sqlite", "memory"] as const;
/** A built-in backend name. */
export type BuiltinBackendName = (typeof BUILTIN_BACKENDS)[number];

/** Default directory of the `file` backend. */
export const DEFAULT_BASE_DIR = "./.dumplingsAI_sessions";
/** Default database path of the `sqlite` backend. */
export const DEFAULT_DB_PATH = "./.dumplingsAI_sessions.db";
/** Default backend name. */
export const DEFAULT_BACKEND = "file";

/** A backend name is malformed, or a value given as a backend does not implement the contract. */
export class InvalidBackendError extends DumplingsError {
  /** The offending name (or a description of the value). */
  readonly backendName: string;
  constructor(name: string, reason: string) {
    super("INVALID_BACKEND", `invalid backend ${JSON.stringify(name)}: ${reason}`);
    this.backendName = name;
  }
}

const NAME_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$/;

const custom = new Map<string, StateBackend>();
const builtins = new Map<BuiltinBackendName, StateBackend>();
let settings = { baseDir: DEFAULT_BASE_DIR, dbPath: DEFAULT_DB_PATH };
let defaultName: string = DEFAULT_BACKEND;

function isBuiltin(name: string): name is BuiltinBackendName {
  return (BUILTIN_BACKENDS as readonly string[]).includes(name);
}

function checkName(name: unknown): string {
  if (typeof name !== "string" || !NAME_PATTERN.test(name)) {
    throw new InvalidBackendError(
      String(name),
      "a backend name is 1-64 characters of letters, digits, '.', '_', ':' or '-', starting with a letter or digit",
    );
  }
  return name;
}

function checkBackend(backend: unknown, label: string): StateBackend {
  const b = backend as Partial<StateBackend> | null;
  const missing = (["save", "load", "delete", "listKeys"] as const).filter(
    (m) => typeof (b as Record<string, unknown> | null)?.[m] !== "function",
  );
  if (b === null || typeof b !== "object" || missing.length > 0) {
    throw new InvalidBackendError(
      label,
      `a backend must implement save, load, delete and listKeys (missing: ${missing.join(", ") || "all"})`,
    );
  }
  return b as StateBackend;
}

/** Closes a dropped built-in instance; a failure is reported as a process warning, never thrown. */
function closeQuietly(name: string, backend: StateBackend | undefined): void {
  if (!backend?.close) return;
  const warn = (e: unknown) =>
    process.emitWarning(`[dumplings:${name}] closing the previous built-in backend failed: ${String(e)}`);
  try {
    const r = backend.close();
    if (r && typeof (r as Promise<void>).then === "function") (r as Promise<void>).catch(warn);
  } catch (e) {
    warn(e);
  }
}

function createBuiltin(name: BuiltinBackendName): StateBackend {
  switch (name) {
    case "file":
      return new FileBackend({ baseDir: settings.baseDir });
    case "sqlite":
      return new SQLiteBackend({ dbPath: settings.dbPath });
    case "memory":
      return new MemoryBackend();
  }
}

/**
 * Registers a backend under a name.
 *
 * @param name - 1-64 characters: letters, digits, `.`, `_`, `:`, `-` (e.g. `"redis"`, `"my-store"`)
 * @param backend - any object implementing the four-method {@link StateBackend} contract
 * @param options - `setAsDefault`: make it the default backend (@default false);
 *   `replace`: allow replacing a registered or built-in name (@default false)
 * @throws {BackendExistsError} when the name is taken (built-in names included) and `replace` is not set
 * @throws {InvalidBackendError} for a malformed name or a value missing a contract method
 * @example
 * registerBackend("redis", new RedisBackend({ url: process.env.REDIS_URL }), { setAsDefault: true });
 */
export function registerBackend(
  name: string,
  backend: StateBackend,
  options: { setAsDefault?: boolean; replace?: boolean } = {},
): void {
  checkName(name);
  checkBackend(backend, name);
  const taken = custom.has(name) || isBuiltin(name);
  if (taken && !options.replace) throw new BackendExistsError(name);
  custom.set(name, backend);
  if (options.setAsDefault) defaultName = name;
}

/**
 * Makes a registered (or built-in) backend the default one.
 *
 * @param name - a registered or built-in name
 * @throws {UnknownBackendError} listing the known names
 * @example
 * setDefaultBackend("sqlite");
 */
export function setDefaultBackend(name: string): void {
  if (!custom.has(name) && !isBuiltin(name)) throw new UnknownBackendError(name, listBackendNames());
  defaultName = name;
}

/**
 * Resolves a backend.
 *
 * @param nameOrInstance - a registered or built-in name, a backend instance (returned as is),
 *   or `undefined` for the default backend
 * @returns the backend
 * @throws {UnknownBackendError} for an unknown name, listing the known names
 * @throws {InvalidBackendError} for a value that is neither a name nor a backend
 * @example
 * const backend = getBackend("sqlite");
 * await backend.save("k", state);
 */
export function getBackend(nameOrInstance?: string | StateBackend): StateBackend {
  if (nameOrInstance !== undefined && typeof nameOrInstance !== "string") {
    return checkBackend(nameOrInstance, "(instance)");
  }
  const name = nameOrInstance ?? defaultName;
  const registered = custom.get(name);
  if (registered) return registered;
  if (!isBuiltin(name)) throw new UnknownBackendError(name, listBackendNames());
  let instance = builtins.get(name);
  if (!instance) {
    instance = createBuiltin(name);
    builtins.set(name, instance);
  }
  return instance;
}

/**
 * The default backend's name.
 *
 * @returns e.g. `"file"` (the default) or the name last set with {@link setDefaultBackend}
 */
export function defaultBackendName(): string {
  return defaultName;
}

/**
 * Every known backend name: built-ins and registered ones.
 *
 * @returns names sorted alphabetically
 */
export function listBackendNames(): string[] {
  return [...new Set<string>([...BUILTIN_BACKENDS, ...custom.keys()])].sort();
}

/**
 * Sets where the built-in backends store their data. A changed setting drops and
 * closes the cached instance; the next {@link getBackend} opens the new location.
 *
 * @param options - `baseDir` of the `file` backend (@default "./.dumplingsAI_sessions"),
 *   `dbPath` of the `sqlite` backend (@default "./.dumplingsAI_sessions.db"); omitted settings are kept
 * @example
 * configureBuiltinBackends({ dbPath: "/var/lib/agents/sessions.db" });
 */
export function configureBuiltinBackends(options: { baseDir?: string; dbPath?: string }): void {
  if (options.baseDir !== undefined && options.baseDir !== settings.baseDir) {
    settings = { ...settings, baseDir: options.baseDir };
    closeQuietly("file", builtins.get("file"));
    builtins.delete("file");
  }
  if (options.dbPath !== undefined && options.dbPath !== settings.dbPath) {
    settings = { ...settings, dbPath: options.dbPath };
    closeQuietly("sqlite", builtins.get("sqlite"));
    builtins.delete("sqlite");
  }
}

/**
 * The current built-in settings.
 *
 * @returns `{ baseDir, dbPath }`
 */
export function builtinBackendSettings(): { baseDir: string; dbPath: string } {
  return { ...settings };
}

/**
 * Forgets every registered backend, closes the built-in instances, and restores the
 * default settings and the default backend (`file`). Meant for tests: exported from
 * `dumplings-ai/testing`, not from the main entry.
 *
 * @example
 * import { resetBackendRegistry } from "dumplings-ai/testing";
 * afterEach(() => resetBackendRegistry());
 */
export function resetBackendRegistry(): void {
  for (const [name, backend] of builtins) closeQuietly(name, backend);
  builtins.clear();
  custom.clear();
  settings = { baseDir: DEFAULT_BASE_DIR, dbPath: DEFAULT_DB_PATH };
  defaultName = DEFAULT_BACKEND;
}
