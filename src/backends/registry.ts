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
 * The default backend (used when a call names none) is, in this order:
 * 1. the last default set in code — {@link setDefaultBackend},
 *    `registerBackend(name, b, { setAsDefault: true })` or the persistence
 *    layer's `configure({ backend })`, whichever ran last;
 * 2. else the backend named by `DUMPLINGS_PERSISTENCE_BACKEND` (read when
 *    the package is imported, or by `loadEnvironmentConfig()`);
 * 3. else the built-in `file`.
 * A backend passed to a call (`{ backend }`) always wins over the default.
 * {@link defaultBackendName} reports the one that is used.
 *
 * @module
 */
import { DEFAULT_FILES } from "../core/defaults.js";
import { BackendExistsError, DumplingsError, UnknownBackendError } from "../core/errors.js";
import { checkOptions, optionKeys } from "../core/options.js";
import { FileBackend } from "./file/index.js";
import { MemoryBackend } from "./memory.js";
import { SQLiteBackend } from "./sqlite.js";
import type { StateBackend } from "./types.js";

/** Built-in backend names. */
export const BUILTIN_BACKENDS = ["file", "sqlite", "memory"] as const;
/** A built-in backend name. */
export type BuiltinBackendName = (typeof BUILTIN_BACKENDS)[number];

/** Default directory of the `file` backend. */
export const DEFAULT_BASE_DIR: string = DEFAULT_FILES.sessionsDir;
/** Default database path of the `sqlite` backend. */
export const DEFAULT_DB_PATH: string = DEFAULT_FILES.sessionsDb;
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

const REGISTER_OPTIONS = optionKeys<{ setAsDefault?: boolean; replace?: boolean }>({
  setAsDefault: true,
  replace: true,
});
const BUILTIN_OPTIONS = optionKeys<{ baseDir?: string; dbPath?: string }>({ baseDir: true, dbPath: true });

const NAME_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$/;

const custom = new Map<string, StateBackend>();
const builtins = new Map<BuiltinBackendName, StateBackend>();
let settings = { baseDir: DEFAULT_BASE_DIR, dbPath: DEFAULT_DB_PATH };
/** The last default set in code (a name or an instance), or undefined. */
let codeDefault: string | StateBackend | undefined;
/** The default named by `DUMPLINGS_PERSISTENCE_BACKEND`, set by the persistence layer. */
let envDefault: string | undefined;
/** The environment variable {@link setEnvironmentDefaultBackend} is given (named in an unknown-name error). */
const ENV_BACKEND_VARIABLE = "DUMPLINGS_PERSISTENCE_BACKEND";

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
 * @throws {InvalidOptionError} for an unknown option
 * @throws {InvalidBackendError} for a malformed name or a value missing a contract method
 * @example
 * registerBackend("redis", new RedisBackend({ url: process.env.REDIS_URL }), { setAsDefault: true });
 */
export function registerBackend(
  name: string,
  backend: StateBackend,
  options: { setAsDefault?: boolean; replace?: boolean } = {},
): void {
  checkOptions("registerBackend", options, REGISTER_OPTIONS);
  checkName(name);
  checkBackend(backend, name);
  const taken = custom.has(name) || isBuiltin(name);
  if (taken && !options.replace) throw new BackendExistsError(name);
  custom.set(name, backend);
  if (options.setAsDefault) codeDefault = name;
}

/**
 * Makes a backend the default one: it is used by every call that names no
 * backend, over `DUMPLINGS_PERSISTENCE_BACKEND` and over any default set
 * before (by this function, `registerBackend(…, { setAsDefault: true })` or
 * `configure({ backend })`).
 *
 * @param backend - a registered or built-in name, or a backend instance
 * @throws {UnknownBackendError} for an unknown name, listing the known names (and naming
 *   `DUMPLINGS_PERSISTENCE_BACKEND` when the default's name came from it)
 * @throws {InvalidBackendError} for a value that is neither a name nor a backend
 * @example
 * setDefaultBackend("sqlite");
 * defaultBackendName(); // "sqlite"
 */
export function setDefaultBackend(backend: string | StateBackend): void {
  if (typeof backend === "string") {
    if (!custom.has(backend) && !isBuiltin(backend)) throw new UnknownBackendError(backend, listBackendNames());
  } else {
    checkBackend(backend, "(instance)");
  }
  codeDefault = backend;
}

/**
 * Sets the default named by `DUMPLINGS_PERSISTENCE_BACKEND` (the persistence
 * layer reads the variable); it applies when no default was set in code.
 * The name is checked on use: a backend may be registered after import.
 *
 * @param name - the variable's value, or undefined when it is not set
 * @param options - `clearCodeDefault`: also forget the default set in code (a full re-read of the environment)
 * @internal
 */
export function setEnvironmentDefaultBackend(
  name: string | undefined,
  options: { clearCodeDefault?: boolean } = {},
): void {
  envDefault = name;
  if (options.clearCodeDefault) codeDefault = undefined;
}

/**
 * Where the default backend comes from: `code` (set by {@link setDefaultBackend},
 * `registerBackend` with `setAsDefault`, or `configure({ backend })`),
 * `environment` (`DUMPLINGS_PERSISTENCE_BACKEND`) or `builtin` (`file`).
 *
 * @returns the source of {@link defaultBackendName}'s answer
 * @internal
 * @example
 * if (defaultBackendSource() === "environment") console.log("from DUMPLINGS_PERSISTENCE_BACKEND");
 */
export function defaultBackendSource(): "code" | "environment" | "builtin" {
  if (codeDefault !== undefined) return "code";
  return envDefault !== undefined ? "environment" : "builtin";
}

/**
 * The default backend as set: the name or instance set in code, else the env var's name, else `"file"`.
 * @internal
 */
export function defaultBackendSetting(): string | StateBackend {
  return codeDefault ?? envDefault ?? DEFAULT_BACKEND;
}

/**
 * Resolves a backend.
 *
 * @param nameOrInstance - a registered or built-in name, a backend instance (returned as is),
 *   or `undefined` for the default backend
 * @returns the backend
 * @throws {UnknownBackendError} for an unknown name, listing the known names (and naming
 *   `DUMPLINGS_PERSISTENCE_BACKEND` when the default's name came from it)
 * @throws {InvalidBackendError} for a value that is neither a name nor a backend
 * @example
 * const backend = getBackend("sqlite");
 * await backend.save("k", state);
 */
export function getBackend(nameOrInstance?: string | StateBackend): StateBackend {
  const target = nameOrInstance ?? defaultBackendSetting();
  if (typeof target !== "string") return checkBackend(target, "(instance)");
  const name = target;
  const registered = custom.get(name);
  if (registered) return registered;
  if (!isBuiltin(name)) {
    const fromEnv = nameOrInstance === undefined && defaultBackendSource() === "environment";
    throw new UnknownBackendError(name, listBackendNames(), fromEnv ? { variable: ENV_BACKEND_VARIABLE } : {});
  }
  let instance = builtins.get(name);
  if (!instance) {
    instance = createBuiltin(name);
    builtins.set(name, instance);
  }
  return instance;
}

/**
 * The name of the backend a call that names none uses (see the module
 * documentation for the order: default set in code, then
 * `DUMPLINGS_PERSISTENCE_BACKEND`, then `file`).
 *
 * @returns e.g. `"file"`, the name last set with {@link setDefaultBackend} or
 *   `configure({ backend })`, or, for an instance set as the default, its `name` (`"custom"` when it has none)
 * @example
 * setDefaultBackend("memory");
 * defaultBackendName(); // "memory"
 */
export function defaultBackendName(): string {
  const d = defaultBackendSetting();
  return typeof d === "string" ? d : (d.name ?? "custom");
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
  checkOptions("configureBuiltinBackends", options, BUILTIN_OPTIONS);
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
 * Forgets every registered backend and the default set in code, closes the
 * built-in instances, and restores the default settings: the default backend is
 * then `DUMPLINGS_PERSISTENCE_BACKEND`'s, else `file`. Meant for tests: exported from
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
  codeDefault = undefined;
}
