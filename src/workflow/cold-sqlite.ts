/**
 * SQLite cold store for workflow checkpoints (the embedded default): the
 * workflow store over a {@link SqliteJournal} (docs/one-engine.md). A
 * workflow is a durable run of the file's journal, its checkpoints are
 * snapshot steps, its lease is the run's lease: graphs and durable runs share
 * one set of tables, one lease and one fencing token, and `dumplings signal`
 * answers a workflow's `interrupt()` as it answers a run's `waitForSignal`.
 *
 * WAL journal, `synchronous = FULL` (a checkpoint is durable once `write`
 * returns), a `busy_timeout` so several processes share the file, and
 * `BEGIN IMMEDIATE` transactions, as every journal write. better-sqlite3 is
 * loaded when the first store is created.
 *
 * **A file written by an earlier release** (the original design's
 * `workflow_snapshots` table, dumplings-ai 0.1's `workflows`,
 * `workflow_step_errors`, `workflow_idempotency`, `workflow_blobs`,
 * `workflow_leases` tables and the monthly `workflow_snapshots_YYYY_MM`
 * tables) is moved into the journal once, when the store opens it, inside
 * the ledger's transaction (component `workflow`, version 2): a crash leaves
 * the file as it was. `workflow_snapshots` is then a view over the
 * checkpoint steps, so the original design's query
 * `SELECT state_json FROM workflow_snapshots WHERE workflow_id = ? ORDER BY step_index DESC LIMIT 1`
 * still returns a workflow's newest checkpoint.
 *
 * **Months.** The journal keeps one table of steps; `months()` counts the
 * checkpoints by UTC month, and `dropMonth` / `prune({ archiveDir })` copy a
 * past month's checkpoints to a file of their own (the original design's
 * single `workflow_snapshots` table) before deleting them.
 *
 * @module
 */

import path from "node:path";
import { InvalidOptionError } from "../core/errors.js";
import { checkOptions, optionKeys } from "../core/options.js";
import { SqliteJournal, type SqliteJournalOptions } from "../durable/journal-sqlite.js";
import { workflowJournalMigrations } from "./journal-migrate.js";
import { JournalColdStore } from "./journal-store.js";

/** The keys of {@link SqliteColdStoreOptions}: any other is an `InvalidOptionError`. */
const COLD_SQLITE_OPTIONS = optionKeys<SqliteColdStoreOptions>({
  path: true,
  database: true,
  busyTimeoutMs: true,
  synchronous: true,
  create: true,
  db: true,
  pruneBatchSize: true,
  tablePrefix: true,
});

/**
 * Options of {@link SqliteColdStore}: those of the {@link SqliteJournal} the
 * workflows live in (`path`, `database`, `busyTimeoutMs` default 10000,
 * `synchronous` default `"FULL"`, `create`, `tablePrefix` default
 * `"durable_"`).
 */
export interface SqliteColdStoreOptions extends SqliteJournalOptions {
  /** @deprecated Use `database`. An open better-sqlite3 database, left open by `close()`. */
  db?: SqliteJournalOptions["database"];
  /**
   * @deprecated Ignored: a prune deletes at most 1,000 records per transaction (the journal's
   * `pruneRuns`). Still checked: a positive integer.
   */
  pruneBatchSize?: number;
}

/**
 * Cold checkpoint store in an SQLite file: the workflows are runs of the
 * file's durable journal.
 *
 * @example
 * const cold = new SqliteColdStore({ path: "./.dumplingsAI_workflows/checkpoints.db" });
 * const store = await CheckpointStore.open({ cold });
 */
export class SqliteColdStore extends JournalColdStore {
  /** The underlying database (for advanced use and tests). */
  readonly db: SqliteJournal["db"];
  /** The database file's absolute path (`":memory:"` for an in-memory database). */
  declare readonly location: string;

  /**
   * Opens the file (creating it and its directory) and its journal; moves the workflow tables of
   * an earlier release into the journal once.
   *
   * @param options - `path` of the database file or an injected `database` (alias `db`); `busyTimeoutMs`, `synchronous`, `create`, `tablePrefix`
   * @throws {InvalidOptionError} on a bad option, or neither `path` nor `database`
   * @throws {BackendError} when the file cannot be opened or migrated
   * @throws {FormatError} when the file's ledger is newer than this build knows
   */
  constructor(options: SqliteColdStoreOptions) {
    checkOptions("sqlite", options, COLD_SQLITE_OPTIONS);
    const { db, pruneBatchSize, ...connection } = options ?? {};
    if (db !== undefined && connection.database !== undefined && db !== connection.database) {
      throw new InvalidOptionError("sqlite", "database", "database and its old name db are both given and differ");
    }
    if (pruneBatchSize !== undefined && (!Number.isSafeInteger(pruneBatchSize) || pruneBatchSize < 1)) {
      throw new InvalidOptionError("sqlite", "pruneBatchSize", `must be a positive integer, got ${String(pruneBatchSize)}`);
    }
    const database = connection.database ?? db;
    if (connection.path === undefined && database === undefined) {
      throw new InvalidOptionError("sqlite", "path", "give the database file's path (or an open database)");
    }
    const prefix = connection.tablePrefix ?? "durable_";
    const journal = new SqliteJournal({ ...connection, ...(database === undefined ? {} : { database }) }, [
      workflowJournalMigrations(prefix),
    ]);
    // The file's absolute path (an injected database's too), so messages never depend on the cwd.
    const file = journal.db.memory ? ":memory:" : journal.db.name;
    super({ journal, location: file === ":memory:" || file === "" ? ":memory:" : path.resolve(file) });
    this.db = journal.db;
  }
}
