/**
 * Which durable journal an operator tool (the `dumplings` command, the web
 * inspector it starts) reads: a SPEC of `spec.ts` (`sqlite:PATH`,
 * `postgres://…` or `postgres:postgres://…`, `redis://…` or `redis:redis://…`),
 * else `DUMPLINGS_DURABLE_JOURNAL`, else `sqlite:./.dumplingsAI_durable.db` (or `./.dumplings-durable.db`
 * of an earlier release while that one does not exist).
 * Only the chosen store's driver is loaded.
 *
 * @module
 */
import { existsSync } from "node:fs";
import { DEFAULT_FILES, existingDefaultFile } from "../core/defaults.js";
import { RunNotFoundError } from "../durable/errors.js";
import type { Journal } from "../durable/journal.js";
import { missingStore, UsageError } from "./errors.js";
import { oneOf, parseSpec } from "./spec.js";

/** Default journal spec. */
export const DEFAULT_JOURNAL = `sqlite:${DEFAULT_FILES.durableDb}`;

/**
 * The journal SPEC used when neither `--journal` nor `DUMPLINGS_DURABLE_JOURNAL` names one:
 * {@link DEFAULT_JOURNAL}, or the default file of an earlier release (`./.dumplings-durable.db`) while
 * that one exists and the new one does not (as a journal opened without a path finds it).
 */
export function defaultJournalSpec(): string {
  return `sqlite:${existingDefaultFile(DEFAULT_FILES.durableDb)}`;
}

/** Options common to the durable commands. */
export interface JournalCliOptions {
  /** A SPEC: `sqlite:PATH`, `postgres://…` or `redis://…` (or `postgres:postgres://…`, `redis:redis://…`). @default env DUMPLINGS_DURABLE_JOURNAL, else {@link DEFAULT_JOURNAL} */
  journal?: string;
  /** PostgreSQL schema of the journal. @default "dumplings" */
  schema?: string;
  /** Redis key prefix of the journal. @default "dumplings:durable:" */
  prefix?: string;
  /** BullMQ queue to put a released run back on. */
  queue?: string;
  json?: boolean;
}

/** The store kinds a journal can be in. */
export const JOURNAL_KINDS = ["sqlite", "postgres", "redis"] as const;

/**
 * Opens the journal a spec names (the SPEC syntax of every command, see `spec.ts`):
 * `sqlite:PATH`, `postgres://…` or `postgres:postgres://…` (`?schema=`), `redis://…` or
 * `redis:redis://…` (`?prefix=`).
 *
 * @param options - `journal` spec, `schema` (PostgreSQL), `prefix` (Redis)
 * @param open - `mustExist`: the journal must already exist (an SQLite file or a PostgreSQL schema
 *   with the journal's tables); nothing is created. What every `dumplings` command uses.
 * @returns the journal (close it when done); only the chosen store's driver is loaded
 * @throws {UsageError} for an unknown or unsuitable spec
 * @throws {InputNotFoundError} with `mustExist`, when the journal does not exist
 * @example
 * const journal = await openJournal({ journal: "sqlite:/tmp/runs.db" });
 */
export async function openJournal(
  options: JournalCliOptions = {},
  open: { mustExist?: boolean } = {},
): Promise<Journal> {
  const fromEnv = options.journal === undefined && nonEmpty(process.env.DUMPLINGS_DURABLE_JOURNAL) !== undefined;
  const text = options.journal ?? nonEmpty(process.env.DUMPLINGS_DURABLE_JOURNAL) ?? defaultJournalSpec();
  const spec = parseSpec(text, { kinds: JOURNAL_KINDS, option: fromEnv ? "DUMPLINGS_DURABLE_JOURNAL" : "--journal" });
  const create = open.mustExist === true ? { create: false } : {};
  if (spec.kind === "sqlite") {
    const { SqliteJournal } = await import("../durable/journal-sqlite.js");
    try {
      return new SqliteJournal({ path: spec.path, ...create });
    } catch (error) {
      throw missingStore(error, spec.text);
    }
  }
  if (spec.kind === "postgres") {
    const { PostgresJournal } = await import("../durable/journal-postgres.js");
    const schema = oneOf(spec.param, options.schema, "schema");
    const journal = new PostgresJournal({ url: spec.url, ...(schema ? { schema } : {}), ...create });
    if (open.mustExist === true) {
      try {
        await journal.listRuns({ limit: 1 });
      } catch (error) {
        await journal.close().catch(() => undefined);
        throw missingStore(error, spec.label);
      }
    }
    return journal;
  }
  if (spec.kind === "redis") {
    const { RedisJournal } = await import("../durable/journal-redis.js");
    const keyPrefix = oneOf(spec.param, options.prefix, "key prefix");
    return new RedisJournal({ url: spec.url, ...(keyPrefix ? { keyPrefix } : {}) });
  }
  throw new UsageError(`unknown journal ${JSON.stringify(spec.text)}`);
}

function nonEmpty(value: string | undefined): string | undefined {
  return value === undefined || value === "" ? undefined : value;
}

/**
 * `error`, or, when it is a run the default journal does not hold (`RUN_NOT_FOUND`, the journal not named
 * by `--journal` or `DUMPLINGS_DURABLE_JOURNAL`) while the default workflow store's database holds a
 * workflow of that id, the same error saying which `--journal` reaches it: a workflow run by the CLI's
 * default store lives in the store's own database, not in the default journal.
 */
export async function withRunHint(error: unknown, options: JournalCliOptions): Promise<unknown> {
  if (!(error instanceof RunNotFoundError)) return error;
  if (options.journal !== undefined || nonEmpty(process.env.DUMPLINGS_DURABLE_JOURNAL) !== undefined) return error;
  const store = DEFAULT_FILES.workflowsDb;
  if (!existsSync(store)) return error;
  try {
    const { SqliteJournal } = await import("../durable/journal-sqlite.js");
    const journal = new SqliteJournal({ path: store, create: false });
    try {
      if ((await journal.getRun(error.runId)) === undefined) return error;
    } finally {
      await journal.close();
    }
  } catch {
    return error; // the store cannot be read: the original error stands
  }
  return new RunNotFoundError(
    error.runId,
    `it is a workflow of the default workflow store: pass --journal sqlite:${store}`,
  );
}
