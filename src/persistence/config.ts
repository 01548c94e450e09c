/**
 * Persistence settings: whether auto-save is on, the backend, where the
 * built-in backends store data, the key strategy and the import allow-list.
 *
 * The environment variables of DESIGN.md are read once, when this module is
 * first imported (i.e. when the package is):
 *
 * | variable | values | default |
 * | --- | --- | --- |
 * | `DUMPLINGS_PERSISTENCE` | `on` / `off` | `off` |
 * | `DUMPLINGS_PERSISTENCE_BACKEND` | `file` / `sqlite` / any registered name | `file` |
 * | `DUMPLINGS_PERSISTENCE_DIR` | path | `./.dumplingsAI_sessions` |
 * | `DUMPLINGS_PERSISTENCE_DB` | path | `./.dumplingsAI_sessions.db` |
 * | `DUMPLINGS_PERSISTENCE_KEY` | `uuid` / `name` | `uuid` |
 *
 * `configure()` overrides them. The default backend follows one order: a
 * backend passed to a call, else the last default set in code
 * (`setDefaultBackend`, `registerBackend(…, { setAsDefault: true })`,
 * `configure({ backend })`, whichever ran last), else
 * `DUMPLINGS_PERSISTENCE_BACKEND`, else `file`. A malformed variable does not throw at
 * import time (that would break every `import` of the package with a stack
 * trace); it is remembered and thrown as an {@link InvalidConfigError}
 * naming the variable by the first call that depends on it, unless
 * `configure()` sets that setting explicitly first.
 *
 * @module
 */

import {
  configureBuiltinBackends,
  defaultBackendSetting,
  defaultBackendSource,
  getBackend,
  listBackendNames,
  setDefaultBackend,
  setEnvironmentDefaultBackend,
} from "../backends/registry.js";
import type { StateBackend } from "../backends/types.js";
import { UnknownBackendError } from "../core/errors.js";
import { type Logger, loggerProblem, setLogger } from "../core/logger.js";
import { checkOptions, optionKeys, shownValue } from "../core/options.js";
import type { ToolArgumentSecretsPolicy } from "./credentials.js";
import { InvalidConfigError } from "./errors.js";

/** How the default key of an agent is chosen: its `uuid` or its `name`. */
export type KeyStrategy = "uuid" | "name";

/** The effective persistence settings. */
export interface PersistenceSettings {
  /** Auto-save after every outermost conversation turn. */
  enabled: boolean;
  /**
   * Backend name or instance used when a call names none: the last default set in code, else
   * `DUMPLINGS_PERSISTENCE_BACKEND`, else `"file"` (what `defaultBackendName()` names).
   */
  backend: string | StateBackend | undefined;
  /** Default key of an agent never loaded or saved before. */
  keyStrategy: KeyStrategy;
  /** Extra modules (paths or package names) that class/hook resolution may import. */
  allowImports: readonly string[];
  /** What saving does with secrets inside tool-call arguments (see `ToolArgumentSecretsPolicy`). */
  toolArgumentSecrets: ToolArgumentSecretsPolicy;
}

/** Options of {@link configure}; omitted options keep their current value. */
export interface ConfigureOptions {
  /** Turn auto-save on or off. @default false (env `DUMPLINGS_PERSISTENCE`) */
  enabled?: boolean;
  /**
   * The default backend: a registered name (`file`, `sqlite`, `memory`, …) or a backend instance.
   * Same as `setDefaultBackend(backend)`: the last default set in code wins, over the env var.
   * @default "file" (env `DUMPLINGS_PERSISTENCE_BACKEND`)
   */
  backend?: string | StateBackend;
  /** Directory of the `file` backend. @default "./.dumplingsAI_sessions" (env `DUMPLINGS_PERSISTENCE_DIR`) */
  baseDir?: string;
  /** Database file of the `sqlite` backend. @default "./.dumplingsAI_sessions.db" (env `DUMPLINGS_PERSISTENCE_DB`) */
  dbPath?: string;
  /**
   * Default key of an agent: its `uuid` or its `name`. With `name` and auto-save on, a fresh agent
   * whose name already holds a session continues that session (it is read before the agent's first
   * turn; a session that does not continue the agent's own history leaves the agent saving under its
   * uuid, with a `SESSION_KEY_TAKEN` warning): see `continueStoredSession`.
   * @default "uuid" (env `DUMPLINGS_PERSISTENCE_KEY`)
   */
  keyStrategy?: KeyStrategy;
  /**
   * The only modules that loading may `import()` to find a saved class or
   * hook that is not registered (`registerAgentClass` /
   * `registerHookFunction`): file or directory paths (absolute or starting
   * with `.`, relative to the working directory; a directory allows every
   * file under it) and package names (a name also allows its subpaths).
   * Empty by default: a stored state then never causes an import, not even
   * of a file of the project, so a `.duas` file or database row from
   * elsewhere cannot run code. Replaces the previous list.
   * @default []
   * @example
   * configure({ allowImports: ["./src/agents", "my-agents-pkg"] });
   */
  allowImports?: string[];
  /**
   * Credential-looking values inside tool-call arguments of the history:
   * `keep` them (the history round-trips exactly), `redact` them in what is
   * stored, or `refuse` the save. @default "keep"
   */
  toolArgumentSecrets?: ToolArgumentSecretsPolicy;
  /**
   * Where the library's log lines go (a failed auto-save nobody listens to, a hot tier that went
   * down, a warning at load): `console`, a pino or winston logger, or any object with `warn` and
   * `error` (and optionally `debug`, `info`) methods taking a message and a fields object; `null`
   * restores the default. See {@link Logger}.
   * @default the console (warnings and errors, one `[dumplings]` line each)
   */
  logger?: Logger | null;
}

const CONFIGURE_OPTIONS = optionKeys<ConfigureOptions>({
  enabled: true,
  backend: true,
  baseDir: true,
  dbPath: true,
  keyStrategy: true,
  allowImports: true,
  toolArgumentSecrets: true,
  logger: true,
});

const ENV = {
  enabled: "DUMPLINGS_PERSISTENCE",
  backend: "DUMPLINGS_PERSISTENCE_BACKEND",
  baseDir: "DUMPLINGS_PERSISTENCE_DIR",
  dbPath: "DUMPLINGS_PERSISTENCE_DB",
  keyStrategy: "DUMPLINGS_PERSISTENCE_KEY",
} as const;

function defaults(): PersistenceSettings {
  return { enabled: false, backend: undefined, keyStrategy: "uuid", allowImports: [], toolArgumentSecrets: "keep" };
}

let settings: PersistenceSettings = defaults();
/** Errors of malformed env vars, by setting, thrown on first dependent use. */
const envErrors = new Map<keyof typeof ENV, InvalidConfigError>();

function parseOnOff(value: string, setting: string): boolean {
  const v = value.trim().toLowerCase();
  if (["on", "1", "true", "yes"].includes(v)) return true;
  if (["off", "0", "false", "no", ""].includes(v)) return false;
  throw new InvalidConfigError(setting, `expected "on" or "off", got ${JSON.stringify(value)}`);
}

function parseKeyStrategy(value: unknown, setting: string): KeyStrategy {
  if (value === "uuid" || value === "name") return value;
  throw new InvalidConfigError(setting, `expected "uuid" or "name", got ${JSON.stringify(value)}`);
}

function checkPath(value: unknown, setting: string): string {
  if (typeof value !== "string" || value.trim() === "" || value.includes("\0")) {
    throw new InvalidConfigError(setting, `expected a non-empty path, got ${JSON.stringify(value)}`);
  }
  return value;
}

/**
 * Re-reads the `DUMPLINGS_PERSISTENCE*` environment variables, resetting
 * every setting first (what happens once at import), the default backend set
 * in code included. Exposed for tests and long-running tools that change
 * their environment.
 *
 * @param env - the environment to read @default process.env
 */
export function loadEnvironmentConfig(env: NodeJS.ProcessEnv = process.env): void {
  envErrors.clear();
  settings = defaults();
  setEnvironmentDefaultBackend(undefined, { clearCodeDefault: true });
  const attempt = (setting: keyof typeof ENV, apply: (raw: string) => void) => {
    const raw = env[ENV[setting]];
    if (raw === undefined) return;
    try {
      apply(raw);
    } catch (e) {
      if (e instanceof InvalidConfigError) envErrors.set(setting, e);
      else throw e;
    }
  };
  attempt("enabled", (raw) => {
    settings.enabled = parseOnOff(raw, ENV.enabled);
  });
  attempt("keyStrategy", (raw) => {
    settings.keyStrategy = parseKeyStrategy(raw.trim(), ENV.keyStrategy);
  });
  attempt("backend", (raw) => {
    const name = raw.trim();
    if (name === "") throw new InvalidConfigError(ENV.backend, "expected a backend name, got an empty string");
    // Checked against the registry on first use: a custom backend may be registered after import.
    setEnvironmentDefaultBackend(name);
  });
  const dirs: { baseDir?: string; dbPath?: string } = {};
  attempt("baseDir", (raw) => {
    dirs.baseDir = checkPath(raw, ENV.baseDir);
  });
  attempt("dbPath", (raw) => {
    dirs.dbPath = checkPath(raw, ENV.dbPath);
  });
  if (dirs.baseDir !== undefined || dirs.dbPath !== undefined) configureBuiltinBackends(dirs);
}

/**
 * Changes persistence settings. Omitted options keep their value; an
 * explicit option also clears a malformed env var of the same setting.
 *
 * @param options - see {@link ConfigureOptions}
 * @throws {InvalidConfigError} for a malformed option (nothing is changed)
 * @throws {InvalidOptionError} for an option `configure` does not know, e.g. the original design's
 *   `base_dir` ("did you mean baseDir?"; nothing is changed)
 * @throws {UnknownBackendError} for a backend name that is not registered, listing the known names
 * @example
 * configure({ enabled: true, backend: "sqlite", dbPath: "./agents.db", keyStrategy: "name" });
 */
export function configure(options: ConfigureOptions): void {
  if (options === null || typeof options !== "object") {
    throw new InvalidConfigError("configure", "expected an options object");
  }
  checkOptions("configure", options, CONFIGURE_OPTIONS);
  const next: PersistenceSettings = { ...settings };
  const cleared: (keyof typeof ENV)[] = [];
  if (options.enabled !== undefined) {
    if (typeof options.enabled !== "boolean") {
      throw new InvalidConfigError("enabled", `expected a boolean, got ${shownValue(options.enabled)}`);
    }
    next.enabled = options.enabled;
    cleared.push("enabled");
  }
  if (options.keyStrategy !== undefined) {
    next.keyStrategy = parseKeyStrategy(options.keyStrategy, "keyStrategy");
    cleared.push("keyStrategy");
  }
  if (options.allowImports !== undefined) {
    if (!Array.isArray(options.allowImports) || options.allowImports.some((x) => typeof x !== "string" || x === "")) {
      throw new InvalidConfigError("allowImports", "expected an array of non-empty module paths or package names");
    }
    next.allowImports = Object.freeze([...options.allowImports]);
  }
  if (options.toolArgumentSecrets !== undefined) {
    if (!["keep", "redact", "refuse"].includes(options.toolArgumentSecrets)) {
      throw new InvalidConfigError(
        "toolArgumentSecrets",
        `expected "keep", "redact" or "refuse", got ${JSON.stringify(options.toolArgumentSecrets)}`,
      );
    }
    next.toolArgumentSecrets = options.toolArgumentSecrets;
  }
  if (options.logger !== undefined && options.logger !== null) {
    const problem = loggerProblem(options.logger);
    if (problem !== undefined) throw new InvalidConfigError("logger", problem);
  }
  if (options.logger !== undefined && options.logger !== null) {
    const problem = loggerProblem(options.logger);
    if (problem !== undefined) throw new InvalidConfigError("logger", problem);
  }
  const dirs: { baseDir?: string; dbPath?: string } = {};
  if (options.baseDir !== undefined) dirs.baseDir = checkPath(options.baseDir, "baseDir");
  if (options.dbPath !== undefined) dirs.dbPath = checkPath(options.dbPath, "dbPath");
  if (options.backend !== undefined) {
    if (typeof options.backend === "string") {
      getBackendChecked(options.backend); // throws UnknownBackendError listing the known names
    } else {
      getBackend(options.backend); // checks the contract
    }
    cleared.push("backend");
  }
  // Everything validated: apply.
  if (dirs.baseDir !== undefined) cleared.push("baseDir");
  if (dirs.dbPath !== undefined) cleared.push("dbPath");
  if (dirs.baseDir !== undefined || dirs.dbPath !== undefined) configureBuiltinBackends(dirs);
  if (options.backend !== undefined) setDefaultBackend(options.backend);
  if (options.logger !== undefined) setLogger(options.logger ?? undefined);
  settings = next;
  for (const c of cleared) envErrors.delete(c);
}

/** Checks a backend name without opening it (opening a built-in would create its files). */
function getBackendChecked(name: string): void {
  const known = listBackendNames();
  if (!known.includes(name)) throw new UnknownBackendError(name, known);
}

/** An env-backed setting, for {@link currentSettings}. */
export type EnvSetting = keyof typeof ENV;

/**
 * The settings, throwing only the env-var errors of the settings a caller depends on.
 * @internal
 */
export function currentSettings(...depends: EnvSetting[]): Readonly<PersistenceSettings> {
  throwEnvError(...depends);
  return settings;
}

/** The env-var errors a use of the default backend depends on: the backend variable's only when no default was set in code. */
function throwDefaultBackendErrors(): void {
  if (defaultBackendSource() !== "code") throwEnvError("backend");
}

function throwEnvError(...which: (keyof typeof ENV)[]): void {
  for (const w of which) {
    const e = envErrors.get(w);
    if (e) throw e;
  }
}

/**
 * The effective settings.
 *
 * @returns a snapshot of {@link PersistenceSettings}
 * @throws {InvalidConfigError} when a `DUMPLINGS_PERSISTENCE*` env var was malformed and not overridden
 */
export function persistenceSettings(): Readonly<PersistenceSettings> {
  throwEnvError("enabled", "keyStrategy", "baseDir", "dbPath");
  throwDefaultBackendErrors();
  return { ...settings, backend: defaultBackendSetting() };
}

/**
 * Whether auto-save is on (env `DUMPLINGS_PERSISTENCE=on` or `configure({ enabled: true })`).
 *
 * @returns true when the conversation loop should save after every outermost turn
 * @throws {InvalidConfigError} when `DUMPLINGS_PERSISTENCE` holds something other than on/off
 * @example
 * if (isEnabled()) await autoSave(agent);
 */
export function isEnabled(): boolean {
  throwEnvError("enabled");
  return settings.enabled;
}

/**
 * Turns auto-save off (same as `configure({ enabled: false })`). Explicit
 * `saveState` / `autoSave` calls keep working.
 *
 * @example
 * disable();
 */
export function disable(): void {
  configure({ enabled: false });
}

/**
 * The backend a call uses: the one given, else the default (the last set in code, else
 * `DUMPLINGS_PERSISTENCE_BACKEND`'s, else `file`; see the module documentation).
 *
 * @param backend - a name, an instance, or undefined
 * @returns the backend instance
 * @throws {UnknownBackendError} for an unknown name, listing the known names
 * @throws {InvalidConfigError} when a backend/dir env var was malformed and not overridden
 * @example
 * const backend = resolveBackend("sqlite");
 */
export function resolveBackend(backend?: string | StateBackend): StateBackend {
  if (backend !== undefined) return getBackend(backend);
  throwEnvError("baseDir", "dbPath");
  throwDefaultBackendErrors();
  return getBackend();
}

/**
 * A display name for a backend, for messages: its `name`, else the name it was given by.
 * @internal
 */
export function backendLabel(backend: StateBackend, given?: string | StateBackend): string {
  return backend.name ?? (typeof given === "string" ? given : "custom");
}

loadEnvironmentConfig();
