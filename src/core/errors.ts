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
  | "RUN_STREAM"
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

/**
 * A run's side channel no longer holds what was asked of it. Code `RUN_STREAM`; `reason` says why:
 * - `"trimmed"`: the events after the reader's cursor were trimmed (a `RedisRunStream` keeps the last
 *   `maxLength` events of a run): `after` is the cursor, `firstIndex` the first event still held;
 * - `"gone"`: the run has finished and its stream holds none of its events (expired by `ttlMs`, or deleted);
 * - `"producer-lost"`: the run is `running` but its lease expired by the journal's clock (the process running
 *   it died): no event will come until another worker takes the run over; subscribe again to follow it.
 *
 * The run's text is in its journal: `readText(stream, runId, { journal })` while the stream holds it, else
 * the recorded step outputs (`journal.readSteps(runId)`). Thrown by `readText` (trimmed) and by `subscribe`
 * (all three; `gone` and `producer-lost` need its `journal` option). A {@link FormatError}, as `readText`'s
 * refusal of a trimmed stream always was. Exported from the root entry (`import { RunStreamError } from "dumplings-ai"`).
 *
 * @example
 * try { for await (const e of stream.subscribe(runId, { journal })) show(e); }
 * catch (e) { if (e instanceof RunStreamError) showText(await readText(stream, runId, { journal }).catch(() => "")); }
 */
export class RunStreamError extends FormatError {
  readonly runId: string;
  /** Why the stream cannot answer. */
  readonly reason: "trimmed" | "gone" | "producer-lost";
  /** The reader's cursor (the last index it had; 0 from the start). */
  readonly after: number;
  /** `"trimmed"`: the first index the stream still holds. */
  readonly firstIndex: number | undefined;
  /**
   * @param runId - the run
   * @param reason - `trimmed`, `gone` or `producer-lost`
   * @param message - what the stream no longer holds (the journal hint is appended)
   * @param details - `after` (the reader's cursor, default 0), `firstIndex` (trimmed: the first index held)
   */
  constructor(
    runId: string,
    reason: RunStreamError["reason"],
    message: string,
    details: { after?: number; firstIndex?: number } = {},
  ) {
    super(
      `[dumplings:durable] the side channel of run ${JSON.stringify(runId)} ${message}; the run's text is in its journal (readText(stream, runId, { journal }) while the stream holds it, else the step outputs of journal.readSteps(runId))`,
    );
    (this as { code: string }).code = "RUN_STREAM";
    this.runId = runId;
    this.reason = reason;
    this.after = details.after ?? 0;
    this.firstIndex = details.firstIndex;
  }
}

/**
 * No state is stored under the key. A custom backend may say so by returning
 * `undefined` or by throwing its own not-found error (one with `code: "ENOENT"`,
 * or named `FileNotFoundError` as the original design's backends raise it):
 * every read path reports either as this error, the backend's own as `cause`.
 */
export class StateNotFoundError extends DumplingsError {
  readonly key: string;
  readonly backend: string | undefined;
  /**
   * @param key - the missing key
   * @param backend - name of the backend that was asked
   * @param options - `cause`: the backend's own not-found error, when it threw one
   */
  constructor(key: string, backend?: string, options?: { cause?: unknown }) {
    super(
      "STATE_NOT_FOUND",
      `[dumplings${backend ? `:${backend}` : ""}] no state stored under key ${JSON.stringify(key)}`,
      options?.cause === undefined ? undefined : { cause: options.cause },
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
 * connection is made; nothing is stored. Two are found on connecting, by the
 * first call (nothing read or written): a Redis database number the server
 * refuses (option `url`), and a Redis that may evict keys under a store that
 * is the source of truth (option `allowEviction`, README "Redis as the source
 * of truth").
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

/*
 * One error per concept for the two engines (issue 22): the workflow graph
 * runner (`dumplings-ai/workflow`) and durable runs (`dumplings-ai/durable`)
 * throw the same classes. A workflow `W` is the run `W`, so `runId` and
 * `workflowId` hold the same id. The options object says which engine threw:
 * `{ workflowId }` words the message as the workflow runner always has and
 * keeps its old `name` (`"WorkflowLeaseHeldError"`, …) until 0.3, so logs and
 * stored error records read as before; `{ runId }` is the durable engine's.
 */

/** Where a lease error happened: a durable run (`runId`) or a workflow of the graph runner (`workflowId`). */
type LeaseSubject = { runId: string; workflowId?: never } | { workflowId: string; runId?: never };

/**
 * Another live holder has the lease of the run (or workflow): it is running
 * or resuming it now and its lease has not expired. Nothing was run or written
 * here. Retry after `expiresAt`, or pass `leaseWaitMs` (to `runDurable` or the
 * workflow runner) to wait for the lease. Code `LEASE_HELD`.
 *
 * The one class of both engines: `WorkflowLeaseHeldError` (deprecated) is this
 * class, so `instanceof` either name holds for an error of either engine.
 *
 * @example
 * try { await runner.runOrResume("order-7") } catch (e) {
 *   if (e instanceof LeaseHeldError) retryLater(e.expiresAt, e.owner);
 * }
 */
export class LeaseHeldError extends DumplingsError {
  /** The run's id (a workflow's id is its run id: the same as {@link LeaseHeldError.workflowId}). */
  readonly runId: string;
  /** The workflow's id: the same as {@link LeaseHeldError.runId}. */
  readonly workflowId: string;
  /** The holder: its lease owner id (the workflow runner's default is `<hostname>:<pid>:<random>`). */
  readonly owner: string;
  /** When the holder's lease expires unless renewed, ms since the epoch (the store's clock). */
  readonly expiresAt: number;
  /** The holder's fencing token, when the store reports it (the workflow runner's does; a journal's does not). */
  readonly fencingToken: number | undefined;

  /**
   * @param details - `runId` (durable run) or `workflowId` (workflow runner), the holder's `owner`, its lease's
   *   `expiresAt` (epoch ms, store clock) and, when known, its `fencingToken`
   */
  constructor(details: LeaseSubject & { owner: string; expiresAt: number; fencingToken?: number | undefined });
  /**
   * The durable engine's positional form, kept for custom journals and callers of 0.1.
   *
   * @param runId - the run
   * @param owner - the holder
   * @param expiresAt - its lease's expiry, epoch ms (store clock)
   */
  constructor(runId: string, owner: string, expiresAt: number);
  constructor(
    first: string | (LeaseSubject & { owner: string; expiresAt: number; fencingToken?: number | undefined }),
    owner?: string,
    expiresAt?: number,
  ) {
    const d =
      typeof first === "string" ? { runId: first, owner: owner as string, expiresAt: expiresAt as number } : first;
    const until = new Date(d.expiresAt).toISOString();
    const token = d.fencingToken === undefined ? "" : `, fencing token ${d.fencingToken}`;
    super(
      "LEASE_HELD",
      d.workflowId !== undefined
        ? `[dumplings:workflow] workflow ${JSON.stringify(d.workflowId)} is held by ${JSON.stringify(d.owner)} (lease until ${until}${token}): another worker is running it, so nothing was run here; retry after the lease ends (a holder that died leaves it to expire), or pass leaseWaitMs to wait for it`
        : `[dumplings:durable] run "${d.runId}" is held by "${d.owner}" until ${until}${d.fencingToken === undefined ? "" : ` (fencing token ${d.fencingToken})`}`,
    );
    if (d.workflowId !== undefined) this.name = "WorkflowLeaseHeldError";
    this.runId = (d.runId ?? d.workflowId) as string;
    this.workflowId = this.runId;
    this.owner = d.owner;
    this.expiresAt = d.expiresAt;
    this.fencingToken = d.fencingToken;
  }
}

/** The lease as stored when a fenced write was refused (the workflow runner's cold store reports it). */
interface StoredLease {
  /** The lease's current fencing token (`null`: no lease was ever taken). */
  token: number | null;
  /** The current holder (`null`: nobody holds the lease now). */
  owner: string | null;
  /** The lease's expiry, epoch ms, store clock (`null`: none). */
  expiresAt: number | null;
}

/**
 * A write carried a fencing token that is no longer the lease of the run (or
 * workflow): this worker's lease was taken over by another (it paused or lost
 * its connection past the lease's expiry), released, or has expired. The write
 * was refused and nothing was written (no step, no checkpoint, no side-effect
 * start): a paused zombie worker cannot corrupt a run. Code `STALE_FENCING_TOKEN`.
 *
 * The one class of both engines: `WorkflowLeaseLostError` (deprecated) is this
 * class, so `instanceof` either name holds for an error of either engine.
 */
export class StaleFencingTokenError extends DumplingsError {
  /** The run's id (a workflow's id is its run id: the same as {@link StaleFencingTokenError.workflowId}). */
  readonly runId: string;
  /** The workflow's id: the same as {@link StaleFencingTokenError.runId}. */
  readonly workflowId: string;
  /** The token this worker wrote with. */
  readonly fencingToken: number;
  /** The token this worker wrote with: the same as {@link StaleFencingTokenError.fencingToken}. */
  readonly token: number;
  /**
   * The lease's current token (`null`: no lease was ever taken on the workflow; `-1`: the durable run's lease
   * was lost and its current token not read).
   */
  readonly currentToken: number | null;
  /** The current holder, when the store reports it (`null`: nobody holds the lease now; `undefined`: not reported). */
  readonly owner: string | null | undefined;
  /** The current lease's expiry, epoch ms (store clock), when the store reports it. */
  readonly expiresAt: number | null | undefined;

  /**
   * @param details - `runId` (durable run) or `workflowId` (workflow runner); the `fencingToken` written with;
   *   the stored `lease` (workflow runner) or the run's `currentToken` (journal); `what`: the refused write,
   *   e.g. `checkpoint 4 refused`
   */
  constructor(
    details: LeaseSubject & { fencingToken: number; what?: string } & (
        | { lease: StoredLease; currentToken?: never }
        | { currentToken: number; lease?: never }
      ),
  );
  /**
   * The durable engine's positional form, kept for custom journals and callers of 0.1.
   *
   * @param runId - the run
   * @param token - the token the write carried
   * @param currentToken - the run's current token
   */
  constructor(runId: string, token: number, currentToken: number);
  constructor(
    first:
      | string
      | (LeaseSubject & { fencingToken: number; what?: string } & (
            | { lease: StoredLease; currentToken?: never }
            | { currentToken: number; lease?: never }
          )),
    token?: number,
    currentToken?: number,
  ) {
    const d =
      typeof first === "string"
        ? { runId: first, fencingToken: token as number, currentToken: currentToken as number }
        : first;
    const lease: StoredLease = d.lease ?? { token: d.currentToken as number, owner: null, expiresAt: null };
    let message: string;
    if (d.workflowId !== undefined) {
      const why =
        lease.token === null
          ? "the workflow has no lease (none was taken)"
          : lease.token !== d.fencingToken
            ? `another worker took the workflow over (${lease.owner === null ? "lease since released" : `held by ${JSON.stringify(lease.owner)}`}, fencing token ${lease.token})`
            : lease.owner === null
              ? "the lease was released"
              : `the lease expired at ${new Date(lease.expiresAt ?? 0).toISOString()} (renew it before writing)`;
      message = `[dumplings:workflow] workflow ${JSON.stringify(d.workflowId)}: ${d.what ?? "write refused"}: this worker's lease (fencing token ${d.fencingToken}) is no longer current: ${why}; nothing was written`;
    } else {
      const holder = d.lease?.owner ? `; held by ${JSON.stringify(d.lease.owner)}` : "";
      message = `[dumplings:durable] ${d.what ? `run "${d.runId}": ${d.what}: ` : `write to run "${d.runId}" refused: `}fencing token ${d.fencingToken} is stale (current token is ${lease.token ?? "none"}${holder}); another worker holds the run`;
    }
    super("STALE_FENCING_TOKEN", message);
    if (d.workflowId !== undefined) this.name = "WorkflowLeaseLostError";
    this.runId = (d.runId ?? d.workflowId) as string;
    this.workflowId = this.runId;
    this.fencingToken = d.fencingToken;
    this.token = d.fencingToken;
    this.currentToken = lease.token;
    this.owner = d.lease === undefined ? undefined : d.lease.owner;
    this.expiresAt = d.lease === undefined ? undefined : d.lease.expiresAt;
  }
}

/** One side of a {@link ReplayMismatchError}: a step's (or guarded call's) name and, for a durable step, its input hash. */
interface ReplayedStep {
  /** The step's name (durable: `llm`, `tool:x`, `signal:x`, …; workflow runner: the guarded call's name or interrupt id). */
  name: string;
  /** sha256 (hex) of the step's input; the workflow runner records none (`""`). */
  inputHash: string;
}

/**
 * Replay diverged from what was recorded. A durable run: at position `seq` the
 * program asks for another step (another name or kind) than the one its journal
 * holds; the journal is untouched and `runDurable` records the run `blocked`
 * with this error as the reason (resume it with the old program, guard the
 * change with `patched(id)`, or have an operator reset it); a changed step
 * *input* at a recorded position is not a mismatch (a `step_drift` event). A
 * workflow: a node's n-th guarded call (`ctx.sideEffect`) or interrupt has
 * another name than when it was recorded under `key`, so replaying recorded
 * results would hand the wrong result to the wrong call. Code `REPLAY_MISMATCH`.
 *
 * The one class of both engines: `NondeterminismError` (deprecated) is this class.
 */
export class ReplayMismatchError extends DumplingsError {
  /** The run's id (a workflow's id is its run id); `""` when a workflow's guarded call was run without one. */
  readonly runId: string;
  /** The workflow's id: the same as {@link ReplayMismatchError.runId}. */
  readonly workflowId: string;
  /** Durable: the 0-based position of the step in the run's journal; workflow runner: `undefined`. */
  readonly seq: number | undefined;
  /** Workflow runner: the idempotency key (or interrupt id) the call was recorded under; durable: `undefined`. */
  readonly key: string | undefined;
  /** What was recorded at that position (or under that key). */
  readonly recorded: ReplayedStep;
  /** What the program asked for now. */
  readonly requested: ReplayedStep;

  /**
   * @param details - `runId` and journal position `seq` (durable run), or `workflowId` (may be `""`) and the
   *   idempotency `key` (workflow runner); the `recorded` step and the `requested` one
   */
  constructor(
    details: (
      | { runId: string; seq: number; workflowId?: never }
      | { workflowId: string; key: string; runId?: never }
    ) & {
      recorded: ReplayedStep;
      requested: ReplayedStep;
    },
  );
  /**
   * The durable engine's positional form, kept for callers of 0.1.
   *
   * @param runId - the run
   * @param seq - the step's position
   * @param recorded - what the journal holds there
   * @param requested - what the program asked for
   */
  constructor(runId: string, seq: number, recorded: ReplayedStep, requested: ReplayedStep);
  constructor(
    first:
      | string
      | (({ runId: string; seq: number; workflowId?: never } | { workflowId: string; key: string; runId?: never }) & {
          recorded: ReplayedStep;
          requested: ReplayedStep;
        }),
    seq?: number,
    recorded?: ReplayedStep,
    requested?: ReplayedStep,
  ) {
    const d =
      typeof first === "string"
        ? {
            runId: first,
            seq: seq as number,
            recorded: recorded as ReplayedStep,
            requested: requested as ReplayedStep,
            key: undefined,
            workflowId: undefined,
          }
        : { seq: undefined, key: undefined, ...first };
    const was = d.recorded;
    const now = d.requested;
    super(
      "REPLAY_MISMATCH",
      d.workflowId !== undefined
        ? `[dumplings:workflow] ${d.workflowId ? `workflow ${JSON.stringify(d.workflowId)}: ` : ""}side effect ${JSON.stringify(d.key)} was recorded as ${JSON.stringify(was.name)} but is now called as ${JSON.stringify(now.name)}; guarded calls must happen in the same order on every run of a node`
        : `[dumplings:durable] replay of run "${d.runId}" diverged at step #${d.seq}: ${
            was.name !== now.name
              ? `the journal holds step "${was.name}" but the program asked for step "${now.name}"`
              : `step "${now.name}" was recorded with input hash ${was.inputHash.slice(0, 12)}… but is now called with input hash ${now.inputHash.slice(0, 12)}…`
          }`,
    );
    if (d.workflowId !== undefined) this.name = "NondeterminismError";
    this.runId = (d.runId ?? d.workflowId) as string;
    this.workflowId = this.runId;
    this.seq = d.seq;
    this.key = d.key;
    this.recorded = was;
    this.requested = now;
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
