/**
 * Errors of the operator tools (the `dumplings` command and the web inspector
 * it starts) and the mapping from every error to one printed line and an exit
 * code (the inspector answers with the HTTP status of that code).
 *
 * Exit codes (stable, documented in the README):
 * - `0` success
 * - `1` any other failure (backend I/O, conflict, …)
 * - `2` usage error (bad option, bad argument, invalid key, unknown backend)
 * - `3` not found (no session under the key, input file missing; any code ending in `_NOT_FOUND`)
 * - `4` format error (malformed `.duas`, JSONL or JSON input, invalid state)
 * - `5` verification failed (`convert` copied a session that does not read back identical)
 * - `6` some items could not be read: a command that walks a whole store (`ls`, `convert`, `gc`, `runs`) went
 *   through every other session or run, named each unreadable one on stderr (and in `--json`), and did its work
 *   on the rest (`convert`: copied and verified them; nothing was written for an unreadable one). `5` wins over
 *   `6` when both happen.
 *
 * @module
 */
import { BackendError, DumplingsError, FormatError } from "../core/errors.js";
import { StoreNotFoundError } from "../drivers/sql.js";

/** Exit codes of the `dumplings` command. */
export const ExitCode = {
  ok: 0,
  failure: 1,
  usage: 2,
  notFound: 3,
  format: 4,
  verify: 5,
  partial: 6,
} as const;
/** One of the {@link ExitCode} values. */
export type ExitCodeValue = (typeof ExitCode)[keyof typeof ExitCode];

/** The command line itself is wrong (missing argument, conflicting options, bad duration…). */
export class UsageError extends DumplingsError {
  /** @param message - what is wrong and how to write it instead */
  constructor(message: string) {
    super("USAGE", message);
  }
}

/**
 * An input file of `dumplings import` does not exist or cannot be read, or a
 * store a command reads (`ls`, `runs`, `workflows ls`, `convert --from`, …)
 * does not exist: no such file or directory, no such schema, or no tables of
 * that kind in it. Nothing was created.
 */
export class InputNotFoundError extends DumplingsError {
  /** Path of the missing input file, or the store as given on the command line. */
  readonly file: string;
  /**
   * @param file - the path as given on the command line
   * @param options - `cause`: the file system or driver error; `store`: the missing thing is this store
   *   (a SPEC such as `sqlite:./runs.db`), not an input file
   */
  constructor(file: string, options?: { cause?: unknown; store?: string }) {
    super(
      "INPUT_NOT_FOUND",
      options?.store !== undefined
        ? `no store at ${options.store}: ${options.cause instanceof Error ? options.cause.message.replace(/^\[dumplings:\w+\] /, "").replace(/ \(opened with create: false, so nothing was created\)$/, "") : "no such file or directory"} (nothing was created; check the path or URL)`
        : `cannot read input file ${JSON.stringify(file)}: no such file`,
      options?.cause === undefined ? undefined : { cause: options.cause },
    );
    this.file = file;
  }
}

/** `dumplings import` or `convert` would overwrite a stored session and `--overwrite` was not given. Nothing was written. */
export class KeyExistsError extends DumplingsError {
  /** The (first) key that is already stored. */
  readonly key: string;
  /** Every key already stored (`convert`: all of them, not only the first). */
  readonly keys: readonly string[];
  /**
   * @param key - the stored key
   * @param file - the input file that maps to it (`import`), or the source SPEC (`convert`)
   * @param convert - for `convert`: the `target` label and every clashing key
   */
  constructor(key: string, file: string, convert?: { target: string; keys: readonly string[] }) {
    const keys = convert?.keys ?? [key];
    const shown = keys
      .slice(0, 10)
      .map((k) => JSON.stringify(k))
      .join(", ");
    super(
      "KEY_EXISTS",
      convert
        ? `${keys.length} session${keys.length === 1 ? "" : "s"} of ${file} already exist${keys.length === 1 ? "s" : ""} in ${convert.target}: ${shown}${keys.length > 10 ? ", …" : ""}; nothing was copied; pass --overwrite to replace them`
        : `session ${JSON.stringify(key)} already exists (from ${JSON.stringify(file)}); pass --overwrite to replace it or --key to choose another key`,
    );
    this.key = key;
    this.keys = keys;
  }
}

/**
 * `dumplings convert` copied sessions that did not read back identical from
 * the target backend. The copies are left in place for inspection.
 */
export class VerifyError extends DumplingsError {
  /** Keys whose copy differs, each with the first differing path. */
  readonly mismatches: readonly { key: string; path: string }[];
  /**
   * @param mismatches - key and first differing path of each bad copy
   * @param total - number of sessions copied
   */
  constructor(mismatches: readonly { key: string; path: string }[], total: number) {
    const shown = mismatches
      .slice(0, 5)
      .map((m) => `${JSON.stringify(m.key)} at ${m.path}`)
      .join(", ");
    const more = mismatches.length > 5 ? ` and ${mismatches.length - 5} more` : "";
    super(
      "VERIFY_MISMATCH",
      `${mismatches.length} of ${total} copied sessions differ after reading them back: ${shown}${more}`,
    );
    this.mismatches = mismatches;
  }
}

/** One session a command walking a whole store could not read (or the target refused), and why. */
export interface UnreadableSession {
  /** The session's key. */
  key: string;
  /** The error's code, e.g. `FORMAT_ERROR`, `STATE_NOT_FOUND`, `BACKEND_ERROR` (a file that is a directory or a symlink). */
  code: string;
  /** The error's message, folded to one line (a `FormatError`'s names its file and line). */
  message: string;
  /** The file that could not be read, when the error names one (a `FormatError`'s `file`). */
  file?: string;
  /** The 1-based line of that file, when the error names one (a `FormatError`'s `line`). */
  line?: number;
}

/**
 * A command that walks a whole store (`ls`, `convert`, `gc`) met sessions it
 * could not read (for `convert`, also sessions the target refused): it went on
 * with every other one, and each of these is named in
 * {@link SessionsUnreadableError.sessions}. Exit code 6 ({@link ExitCode.partial}).
 */
export class SessionsUnreadableError extends DumplingsError {
  /** Every session that could not be read, in key order. */
  readonly sessions: readonly UnreadableSession[];
  /**
   * @param sessions - the unreadable sessions (at least one)
   * @param total - number of sessions the store lists
   * @param store - the store's label, e.g. `file:./sessions`
   * @param problem - what happened to them, e.g. `cannot be read` or `were not converted`
   * @param outcome - what the command did about them and the others, e.g. `the 3 others were copied`
   */
  constructor(sessions: readonly UnreadableSession[], total: number, store: string, problem: string, outcome: string) {
    const shown = sessions
      .slice(0, 5)
      .map((s) => `${JSON.stringify(s.key)} (${s.code})`)
      .join(", ");
    const more = sessions.length > 5 ? ` and ${sessions.length - 5} more` : "";
    super(
      "SESSIONS_UNREADABLE",
      `${sessions.length} of ${total} session${total === 1 ? "" : "s"} of ${store} ${problem}: ${shown}${more}; ${outcome}`,
    );
    this.sessions = sessions;
  }
}

/** File-system errors that concern one file only (the session's), not the store. */
const ONE_FILE_ERRNOS = new Set(["EACCES", "EPERM", "EISDIR", "ENOTDIR", "ELOOP", "ENAMETOOLONG"]);

/**
 * Whether an error met while reading one item of a store (a session, a
 * durable run) concerns that item only, so that a command walking the whole
 * store reports it and goes on with the others: its data is malformed
 * (`FORMAT_ERROR`, `INVALID_STATE`, …), it vanished meanwhile
 * (`STATE_NOT_FOUND`), or its own file cannot be opened (a `BackendError`
 * about that key caused by `EACCES`, `EISDIR`, `ELOOP`, …). Any other error —
 * the server is down, a timeout, a driver failure — would fail every item
 * after it too, and stops the walk.
 *
 * @param error - what reading (or writing) one item threw
 * @returns true when the walk should record it and go on
 */
export function isItemFault(error: unknown): boolean {
  if (error instanceof BackendError) {
    const errno = (error.cause as NodeJS.ErrnoException | undefined)?.code;
    return error.key !== undefined && typeof errno === "string" && ONE_FILE_ERRNOS.has(errno);
  }
  return error instanceof DumplingsError;
}

/**
 * The report of one session that could not be read, as `ls`, `convert` and `gc` print it.
 *
 * @param key - the session's key
 * @param error - what reading it threw
 * @returns key, code and one-line message; `file` and `line` when the error names them
 */
export function unreadableSession(key: string, error: unknown): UnreadableSession {
  const { code, message } = errorParts(error);
  const out: UnreadableSession = { key, code: code ?? "ERROR", message };
  if (error instanceof FormatError) {
    if (error.file !== undefined) out.file = error.file;
    if (error.line !== undefined) out.line = error.line;
  }
  return out;
}

/**
 * The stderr line of one session a walk could not read: `dumplings: cannot read session "k": <message> (<CODE>)`.
 *
 * @param session - the report of {@link unreadableSession}
 * @param what - what was being done, e.g. `read` or `convert`
 * @returns the line, without a trailing newline
 */
export function unreadableLine(session: UnreadableSession, what = "read"): string {
  return `dumplings: cannot ${what} session ${JSON.stringify(session.key)}: ${session.message} (${session.code})`;
}

/**
 * `dumplings runs` met runs whose journal records cannot be read (an edited or
 * corrupted journal): every run is still listed, these with their error.
 * Exit code 6 ({@link ExitCode.partial}).
 */
export class RunsUnreadableError extends DumplingsError {
  /** The unreadable runs: id, code and message. */
  readonly runs: readonly { runId: string; code: string; message: string }[];
  /**
   * @param runs - the unreadable runs (at least one)
   * @param total - number of runs listed
   */
  constructor(runs: readonly { runId: string; code: string; message: string }[], total: number) {
    const shown = runs
      .slice(0, 5)
      .map((r) => `${JSON.stringify(r.runId)} (${r.code})`)
      .join(", ");
    const more = runs.length > 5 ? ` and ${runs.length - 5} more` : "";
    super(
      "RUNS_UNREADABLE",
      `the journal records of ${runs.length} of ${total} run${total === 1 ? "" : "s"} cannot be read: ${shown}${more}; every run is still listed`,
    );
    this.runs = runs;
  }
}

/**
 * A store that was opened with `create: false` and does not exist, as the CLI reports it
 * ({@link InputNotFoundError}, exit 3); any other error as it is.
 *
 * @param error - what opening or first reading the store threw
 * @param label - the store as the user named it (password hidden)
 * @returns the error to throw
 */
export function missingStore(error: unknown, label: string): unknown {
  if (error instanceof StoreNotFoundError) return new InputNotFoundError(label, { store: label, cause: error });
  return error;
}

const byCode = new Map<string, ExitCodeValue>([
  ["USAGE", ExitCode.usage],
  ["INVALID_KEY", ExitCode.usage],
  ["KEY_COLLISION", ExitCode.usage],
  ["UNKNOWN_BACKEND", ExitCode.usage],
  ["INVALID_BACKEND", ExitCode.usage],
  ["CREDENTIAL_REFUSED", ExitCode.usage],
  ["INVALID_CONFIG", ExitCode.usage],
  ["RUN_STATE", ExitCode.usage],
  ["APPROVAL_NOT_PENDING", ExitCode.usage],
  // a decision or signal already recorded (the first one stands): the run no longer waits on it
  ["SIGNAL_CONFLICT", ExitCode.usage],
  ["INVALID_OPTION", ExitCode.usage],
  ["STATE_NOT_FOUND", ExitCode.notFound],
  ["INPUT_NOT_FOUND", ExitCode.notFound],
  ["FORMAT_ERROR", ExitCode.format],
  ["INVALID_STATE", ExitCode.format],
  ["NON_JSON_VALUE", ExitCode.format],
  ["VERIFY_MISMATCH", ExitCode.verify],
  ["SESSIONS_UNREADABLE", ExitCode.partial],
  ["RUNS_UNREADABLE", ExitCode.partial],
]);

/**
 * The exit code for an error.
 *
 * @param error - anything thrown by a command
 * @returns the {@link ExitCode} of its class (`3` for any `*_NOT_FOUND` code, `1` for anything unknown)
 */
export function exitCodeFor(error: unknown): ExitCodeValue {
  if (error instanceof DumplingsError) {
    const known = byCode.get(error.code);
    if (known !== undefined) return known;
    return error.code.endsWith("_NOT_FOUND") ? ExitCode.notFound : ExitCode.failure;
  }
  return ExitCode.failure;
}

/**
 * The one line printed for an error: `dumplings: <message> (<CODE>)`.
 * Newlines inside the message are folded so the output stays one line.
 *
 * @param error - anything thrown by a command
 * @returns the line, without a trailing newline
 * @example
 * errorLine(new StateNotFoundError("k", "file"))
 * // 'dumplings: [dumplings:file] no state stored under key "k" (STATE_NOT_FOUND)'
 */
export function errorLine(error: unknown): string {
  const { message, code } = errorParts(error);
  return `dumplings: ${message}${code ? ` (${code})` : ""}`;
}

/**
 * The code and one-line message of an error, as {@link errorLine} prints them (and `--json` errors carry them).
 *
 * @param error - anything thrown by a command
 * @returns `code`: the `DumplingsError` code, a Node system code or the error's name; `message`: folded to one line
 */
export function errorParts(error: unknown): { code: string | undefined; message: string } {
  let message: string;
  let code: string | undefined;
  if (error instanceof DumplingsError) {
    message = error.message;
    code = error.code;
  } else if (error instanceof Error) {
    message = error.message;
    const sysCode = (error as NodeJS.ErrnoException).code;
    code = typeof sysCode === "string" ? sysCode : error.name;
  } else {
    message = String(error);
  }
  return { code, message: message.replace(/\s*\r?\n\s*/g, " ").trim() };
}
