/**
 * Every storage default, in one place: the PostgreSQL URL, SQLite's
 * durability and busy timeout, and the default file names. Sessions,
 * workflow checkpoints, durable journals, the LangGraph store and the CLI all
 * read these (through the drivers), so one setting has one default
 * everywhere; the README's Connections section documents each once.
 *
 * @module
 */
import { existsSync } from "node:fs";
import path from "node:path";

/**
 * PostgreSQL URL when a component gets neither `url` nor `pool` and
 * `DATABASE_URL` is unset: the local server's `postgres` database (the one
 * every server has), as the user `PGUSER` names, else `USER` (the pg driver's rule; a URL
 * without a user where neither is set is refused at construction).
 */
export const DEFAULT_POSTGRES_URL = "postgres://127.0.0.1:5432/postgres";

/**
 * The PostgreSQL URL a component uses when given none.
 *
 * @param env - the environment @default process.env
 * @returns `DATABASE_URL` when set, else {@link DEFAULT_POSTGRES_URL}
 * @example
 * defaultPostgresUrl({}) // "postgres://127.0.0.1:5432/postgres"
 */
export function defaultPostgresUrl(env: NodeJS.ProcessEnv = process.env): string {
  return env.DATABASE_URL ?? DEFAULT_POSTGRES_URL;
}

/**
 * SQLite `PRAGMA synchronous` of every component: `FULL` fsyncs the WAL at
 * each commit, so a write that returned survives a power loss as well as a
 * process crash (`NORMAL`, on request, survives only the crash).
 */
export const SQLITE_SYNCHRONOUS = "FULL" as const;

/** How long an SQLite write waits for another connection's write lock, in ms, in every component. */
export const SQLITE_BUSY_TIMEOUT_MS = 5000;

/**
 * Default files, one family (`./.dumplingsAI_*`, the original design's).
 * Relative paths resolve against the working directory.
 */
export const DEFAULT_FILES = {
  /** The `file` session backend's directory (env `DUMPLINGS_PERSISTENCE_DIR`). */
  sessionsDir: "./.dumplingsAI_sessions",
  /** The `sqlite` session backend's database (env `DUMPLINGS_PERSISTENCE_DB`). */
  sessionsDb: "./.dumplingsAI_sessions.db",
  /** The CLI's workflow store (env `DUMPLINGS_WORKFLOW_STORE`). */
  workflowsDb: "./.dumplingsAI_workflows/workflows.db",
  /** `SqliteJournal` without `path`, and the CLI's journal (env `DUMPLINGS_DURABLE_JOURNAL`). */
  durableDb: "./.dumplingsAI_durable.db",
  /** The LangGraph SQLite store without `path`. */
  langgraphDb: "./.dumplingsAI_langgraph.db",
} as const;

/** Default file names of earlier releases, by the default that replaced them. */
const LEGACY_DEFAULT_FILES: ReadonlyMap<string, readonly string[]> = new Map([
  [DEFAULT_FILES.durableDb, ["./.dumplings-durable.db"]],
  [DEFAULT_FILES.langgraphDb, ["./.dumplings-langgraph.db"]],
]);

/**
 * The file to open for a path: a path naming a default file (see
 * {@link DEFAULT_FILES}) that does not exist yet, while the same store's file
 * of an earlier release (`./.dumplings-durable.db`, `./.dumplings-langgraph.db`)
 * does, is that older file, so a default store written before the rename is
 * still found (and written) where it is. Any other path is returned as given.
 *
 * @param file - the path a component was given or defaults to
 * @param cwd - the directory relative paths resolve against @default process.cwd()
 * @returns the path to open
 * @example
 * existingDefaultFile("./.dumplingsAI_durable.db") // "./.dumplings-durable.db" when only that one exists
 */
export function existingDefaultFile(file: string, cwd: string = process.cwd()): string {
  if (file === ":memory:" || file === "") return file;
  const wanted = path.resolve(cwd, file);
  for (const [current, legacy] of LEGACY_DEFAULT_FILES) {
    if (path.resolve(cwd, current) !== wanted) continue;
    if (existsSync(wanted)) return file;
    const old = legacy.find((l) => existsSync(path.resolve(cwd, l)));
    return old === undefined ? file : path.resolve(cwd, old);
  }
  return file;
}
