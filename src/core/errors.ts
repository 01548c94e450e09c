/**
 * Typed errors of dumplings-ai.
 *
 * Every error the library throws extends {@link DumplingsError} and carries a
 * stable `code` string a caller can branch on, plus the original error as
 * `cause` (ES2022) when one exists. Messages name the thing they are about:
 * `[dumplings:sqlite] cannot load "weather-1": …`.
 *
 * @module
 */

/** Stable error codes. New codes may be added; existing ones never change meaning. */
export type DumplingsErrorCode =
  | "FORMAT_ERROR"
  | "STATE_NOT_FOUND"
  | "AGENT_NOT_FOUND"
  | "INVALID_KEY"
  | "KEY_COLLISION"
  | "CONFLICT"
  | "BACKEND_ERROR"
  | "NON_JSON_VALUE"
  | "CREDENTIAL_REFUSED"
  | "UNKNOWN_BACKEND"
  | "BACKEND_EXISTS"
  | "INVALID_STATE"
  | "INVALID_OPTION"
  | "MISSING_PEER"
  | (string & {});

/**
 * Base class of every error thrown by dumplings-ai.
 *
 * @example
 * try { await loadState("k") } catch (e) {
 *   if (e instanceof DumplingsError && e.code === "STATE_NOT_FOUND") …
 * }
 */
export class DumplingsError extends Error {
  /** Stable, machine-readable code, e.g. `"FORMAT_ERROR"`. */
  readonly code: DumplingsErrorCode;

  /**
   * @param code - stable code of the error kind
   * @param message - human-readable message naming the key/file/line involved
   * @param options - `cause`: the underlying error, if any
   */
  constructor(code: DumplingsErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.code = code;
    this.name = new.target.name;
  }
}

/**
 * A `.duas` file or string (or another stored encoding) is malformed, truncated,
 * or of an unknown format version. Stored data is never modified when this is thrown.
 */
export class FormatError extends DumplingsError {
  /** File path (or other source label) of the bad input, when known. */
  readonly file: string | undefined;
  /** 1-based line number of the offending line, when known. */
  readonly line: number | undefined;
  /** The unknown `format_version`, when that is the problem. */
  readonly version: string | undefined;

  /**
   * @param message - what is wrong (the file and line are appended automatically)
   * @param details - `file`, 1-based `line`, unknown `version`, `cause`
   */
  constructor(message: string, details: { file?: string; line?: number; version?: string; cause?: unknown } = {}) {
    const where = [details.file, details.line === undefined ? undefined : `line ${details.line}`]
      .filter((x) => x !== undefined)
      .join(":");
    super("FORMAT_ERROR", where ? `${where}: ${message}` : message, { cause: details.cause });
    this.file = details.file;
    this.line = details.line;
    this.version = details.version;
  }
}

/** No state is stored under the key. */
export class StateNotFoundError extends DumplingsError {
  readonly key: string;
  readonly backend: string | undefined;
  /**
   * @param key - the missing key
   * @param backend - name of the backend that was asked
   */
  constructor(key: string, backend?: string) {
    super(
      "STATE_NOT_FOUND",
      `[dumplings${backend ? `:${backend}` : ""}] no state stored under key ${JSON.stringify(key)}`,
    );
    this.key = key;
    this.backend = backend;
  }
}

/**
 * The agent class (or template) named in a stored state cannot be resolved.
 * The message says how to make it resolvable.
 */
export class AgentNotFoundError extends DumplingsError {
  /** The saved `module:export` class name. */
  readonly className: string;
  constructor(className: string, message: string, options?: { cause?: unknown }) {
    super("AGENT_NOT_FOUND", message, options);
    this.className = className;
  }
}

/** A storage key is not acceptable (empty, too long, path characters, control characters…). */
export class InvalidKeyError extends DumplingsError {
  readonly key: string;
  readonly reason: string;
  constructor(key: string, reason: string) {
    super("INVALID_KEY", `invalid state key ${JSON.stringify(key)}: ${reason}`);
    this.key = key;
    this.reason = reason;
  }
}

/**
 * Two keys name one stored session: the file system folds case or
 * normalises Unicode (macOS and Windows by default), so `alice.duas` opens
 * the file written under `Alice` (or `e\u0301` the one of `é`). The file
 * backend refuses to read, write or delete it under the other key; nothing
 * was read into an agent, written or removed. Use the stored key, or keys
 * that differ in more than case and Unicode normalisation (for example
 * lowercase them before use).
 */
export class KeyCollisionError extends DumplingsError {
  /** The key asked for. */
  readonly key: string;
  /** The key the file was written under (its `[META] key`). */
  readonly storedKey: string;
  /** The file both keys name. */
  readonly file: string;
  constructor(key: string, storedKey: string, file: string) {
    // Two spellings of one text (NFC "é" and NFD "e\u0301") print alike: show their code points then.
    const show = (k: string) =>
      key.toLowerCase() === storedKey.toLowerCase()
        ? JSON.stringify(k)
        : `${JSON.stringify(k)} (${[...k].map((c) => `U+${(c.codePointAt(0) as number).toString(16).toUpperCase().padStart(4, "0")}`).join(" ")})`;
    super(
      "KEY_COLLISION",
      `[dumplings:file] key ${show(key)} names the file of key ${show(storedKey)} (${file}): this file system does not tell the two names apart (case or Unicode normalisation); nothing was read, written or deleted. Use ${JSON.stringify(storedKey)}, or keys that differ in more than case and normalisation`,
    );
    this.key = key;
    this.storedKey = storedKey;
    this.file = file;
  }
}

/**
 * A compare-and-set write lost a race: the stored revision is not the one the
 * writer expected. Nothing was written.
 */
export class ConflictError extends DumplingsError {
  readonly key: string;
  /** The revision the writer expected (`null`: expected no stored state). */
  readonly expectedRevision: number | null;
  /** The revision actually stored (`null`: nothing stored, e.g. deleted). */
  readonly actualRevision: number | null;
  constructor(key: string, expectedRevision: number | null, actualRevision: number | null, backend?: string) {
    const show = (r: number | null) => (r === null ? "none" : String(r));
    super(
      "CONFLICT",
      `[dumplings${backend ? `:${backend}` : ""}] conflict on key ${JSON.stringify(key)}: expected revision ${show(expectedRevision)}, stored revision is ${show(actualRevision)}${
        expectedRevision === null && actualRevision !== null
          ? " (the key already holds a session this writer never loaded: load it first, or save with { force: true } to replace it)"
          : ""
      }`,
    );
    this.key = key;
    this.expectedRevision = expectedRevision;
    this.actualRevision = actualRevision;
  }
}

/** A storage driver failed (I/O error, server down, timeout…). `cause` holds the driver's error. */
export class BackendError extends DumplingsError {
  readonly backend: string;
  readonly key: string | undefined;
  /**
   * @param backend - backend name, e.g. `"sqlite"`
   * @param message - what was being done, e.g. `cannot load "k"`
   * @param options - `key` involved and the driver's `cause`
   */
  constructor(backend: string, message: string, options: { key?: string; cause?: unknown } = {}) {
    const causeText =
      options.cause instanceof Error ? `: ${options.cause.message}` : options.cause ? `: ${String(options.cause)}` : "";
    super("BACKEND_ERROR", `[dumplings:${backend}] ${message}${causeText}`, { cause: options.cause });
    this.backend = backend;
    this.key = options.key;
  }
}

/**
 * A value that JSON cannot carry (BigInt, function, symbol, `undefined` in an
 * array, NaN/Infinity, a cycle, a Date/Map/class instance…) was found where only
 * JSON is allowed. `path` points at it, e.g. `history[3].content[0].text`.
 */
export class NonJsonValueError extends DumplingsError {
  /** Path of the offending value, e.g. `history[3].tool_calls[0].function`. */
  readonly path: string;
  /** Index of the history message holding the value, when it is in a history. */
  readonly messageIndex: number | undefined;
  constructor(path: string, what: string, messageIndex?: number) {
    super("NON_JSON_VALUE", `value at ${path} cannot be stored as JSON: ${what}`);
    this.path = path;
    this.messageIndex = messageIndex;
  }
}

/** A config field holds what looks like a secret (API key, bearer token…). Only env-var names may be stored. */
export class CredentialError extends DumplingsError {
  readonly field: string;
  constructor(field: string, reason: string) {
    super(
      "CREDENTIAL_REFUSED",
      `refusing to store ${field}: ${reason}; store the NAME of an environment variable in apiKeyEnv instead`,
    );
    this.field = field;
  }
}

/**
 * A backend name is not registered. The message lists the known names and, when the name came from an
 * environment variable (`DUMPLINGS_PERSISTENCE_BACKEND`), names the variable.
 */
export class UnknownBackendError extends DumplingsError {
  readonly backendName: string;
  readonly known: readonly string[];
  /** The environment variable the name was read from, when it was not given in code. */
  readonly variable: string | undefined;
  /**
   * @param name - the unknown name
   * @param known - the registered and built-in names
   * @param options - `variable`: the environment variable that held the name
   */
  constructor(name: string, known: readonly string[], options: { variable?: string | undefined } = {}) {
    const from = options.variable === undefined ? "" : ` (the value of the environment variable ${options.variable})`;
    super("UNKNOWN_BACKEND", `unknown backend ${JSON.stringify(name)}${from}; known backends: ${known.join(", ")}`);
    this.backendName = name;
    this.known = known;
    this.variable = options.variable;
  }
}

/** A backend name is already registered and `{ replace: true }` was not given. */
export class BackendExistsError extends DumplingsError {
  readonly backendName: string;
  constructor(name: string) {
    super(
      "BACKEND_EXISTS",
      `a backend named ${JSON.stringify(name)} is already registered; pass { replace: true } to replace it`,
    );
    this.backendName = name;
  }
}

/** A state object does not match its schema. `path` names the offending field. */
export class InvalidStateError extends DumplingsError {
  readonly path: string;
  constructor(path: string, message: string, options?: { cause?: unknown }) {
    super("INVALID_STATE", `invalid state at ${path || "(root)"}: ${message}`, options);
    this.path = path;
  }
}

/**
 * A store or driver option is not acceptable: a schema name PostgreSQL cannot
 * hold, a malformed connection URL, a timeout that is not a positive number of
 * ms, a table prefix SQLite cannot hold. Thrown by the constructor, before any
 * connection is made; nothing is stored.
 *
 * Code: `INVALID_OPTION`.
 *
 * @example
 * try { new PostgresBackend({ schema: "my-schema" }) }
 * catch (e) { if (e instanceof InvalidOptionError) console.error(e.option) } // "schema"
 */
export class InvalidOptionError extends DumplingsError {
  /** The option at fault, e.g. `schema`, `url`, `connectTimeoutMs`. */
  readonly option: string;
  /** The component whose option it is, e.g. `postgres`, `sqlite`, `redis`. */
  readonly component: string;
  /**
   * @param component - e.g. `postgres`
   * @param option - the option name
   * @param message - what is wrong and what is accepted
   */
  constructor(component: string, option: string, message: string, options?: { cause?: unknown }) {
    super("INVALID_OPTION", `[dumplings:${component}] option ${option}: ${message}`, options);
    this.component = component;
    this.option = option;
  }
}

/**
 * A feature needs a package that dumplings-ai declares as an optional peer
 * dependency (a database driver, the inspector's web server), and it is not
 * installed. Nothing was opened or written. The message names the package and
 * the command that installs the range this release is tested with.
 *
 * Code: `MISSING_PEER`.
 *
 * @example
 * try { new SQLiteBackend({ path: "agents.db" }) } catch (e) {
 *   if (e instanceof MissingPeerError) console.error(e.install) // npm i better-sqlite3@^12.11.1
 * }
 */
export class MissingPeerError extends DumplingsError {
  /** The package to install, e.g. `better-sqlite3`. */
  readonly package: string;
  /** The version range this release is tested with (its `peerDependencies` entry), e.g. `^12.11.1`. */
  readonly range: string;
  /** The command that installs it, e.g. `npm i better-sqlite3@^12.11.1`. */
  readonly install: string;
  /**
   * @param component - what needs it, e.g. `sqlite`, `redis`, `ui`
   * @param pkg - the package name
   * @param range - the tested version range
   * @param options - `cause`: the resolution error
   */
  constructor(component: string, pkg: string, range: string, options?: { cause?: unknown }) {
    const install = `npm i ${pkg}@${range}`;
    super(
      "MISSING_PEER",
      `[dumplings:${component}] needs the package ${pkg}, which is not installed (an optional peer dependency of dumplings-ai): run \`${install}\``,
      options,
    );
    this.package = pkg;
    this.range = range;
    this.install = install;
  }
}
