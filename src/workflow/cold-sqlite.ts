/**
 * SQLite cold store for workflow checkpoints (the embedded default): the SQL
 * cold store ({@link SqlColdStore}) on the SQLite driver.
 *
 * WAL journal, `synchronous = FULL` by default (a checkpoint is durable once
 * `write` returns), `busy_timeout` so several processes can share the file,
 * and `BEGIN IMMEDIATE` transactions so the compare-and-set on a workflow's
 * latest step is serialised across processes. New files are created with
 * `auto_vacuum = INCREMENTAL`, so {@link SqliteColdStore.prune} returns freed
 * pages to the file system without a full `VACUUM`; `prune(…, { vacuum:
 * "full" })` also rewrites the whole file (`VACUUM`). better-sqlite3 is loaded
 * when the first store is created.
 *
 * **Split by month.** Snapshot rows go to one table per UTC month of their
 * `created_at` (`workflow_snapshots_2026_11`), created on the first write of
 * the month. Reads (`read`, `latest`, `history`) look in every month and in
 * the single `workflow_snapshots` table of files written before the split,
 * which are read as they are (nothing is migrated); a step written again
 * keeps one row. A past month is dropped whole (`DROP TABLE`, no row-by-row
 * deletes): by `prune` once the month ends before its cutoff, or by
 * {@link SqliteColdStore.dropMonth}; it can first be copied to its own file
 * (`archiveDir` / `archiveTo`, a single-table SQLite file), and each
 * workflow's newest `keepLast` checkpoints in it are carried into the
 * current month, so a resume still finds every workflow's latest snapshot.
 *
 * @module
 */

import path from "node:path";
import { InvalidOptionError } from "../core/errors.js";
import { checkOptions, optionKeys } from "../core/options.js";
import { type SqliteConnectionOptions, SqliteDriver } from "../drivers/sqlite.js";
import { workflowBlobMigrations } from "./cold-blobs.js";
import { SqlColdStore, type SqlColdStoreOptions, workflowMigrations } from "./cold-sql.js";
import { workflowLeaseMigrations } from "./lease-sql.js";

/** The keys of {@link SqliteColdStoreOptions}: any other is an `InvalidOptionError`. */
const COLD_SQLITE_OPTIONS = optionKeys<SqliteColdStoreOptions>({
  path: true,
  database: true,
  busyTimeoutMs: true,
  synchronous: true,
  create: true,
  db: true,
  pruneBatchSize: true,
});

/**
 * Options of {@link SqliteColdStore}: the SQLite driver's connection options
 * (`path`, `database`, `busyTimeoutMs` default 5000, `synchronous` default
 * `"FULL"` here) and `pruneBatchSize`.
 */
export interface SqliteColdStoreOptions extends SqliteConnectionOptions, SqlColdStoreOptions {
  /** @deprecated Use `database`. An open better-sqlite3 database, left open by `close()`. */
  db?: SqliteConnectionOptions["database"];
}

/**
 * Cold checkpoint store in an SQLite file.
 *
 * @example
 * const cold = new SqliteColdStore({ path: "./.dumplingsAI_workflows/checkpoints.db" });
 * const store = await CheckpointStore.open({ cold });
 */
export class SqliteColdStore extends SqlColdStore<SqliteDriver> {
  /** The underlying database (for advanced use and tests). */
  readonly db: SqliteDriver["db"];
  /** The database file's absolute path (`":memory:"` for an in-memory database). */
  override readonly location: string;

  /**
   * Opens the file (creating it and its directory) and its workflow tables.
   *
   * @param options - `path` of the database file or an injected `database` (alias `db`); `busyTimeoutMs`, `synchronous`, `pruneBatchSize`
   * @throws {InvalidOptionError} on a bad option, or neither `path` nor `database`
   * @throws {BackendError} when the file cannot be opened
   */
  constructor(options: SqliteColdStoreOptions) {
    checkOptions("sqlite", options, COLD_SQLITE_OPTIONS);
    const { db, pruneBatchSize, ...connection } = options ?? {};
    if (db !== undefined && connection.database !== undefined && db !== connection.database) {
      throw new InvalidOptionError("sqlite", "database", "database and its old name db are both given and differ");
    }
    const database = connection.database ?? db;
    const driver = new SqliteDriver(
      "sqlite",
      { ...connection, database },
      [workflowMigrations("sqlite"), workflowLeaseMigrations("sqlite"), workflowBlobMigrations("sqlite")],
      {
        synchronous: "FULL",
        // Lets prune return freed pages to the file system (the driver sets it on a new file only).
        incrementalVacuum: true,
      },
    );
    super(driver, { pruneBatchSize });
    this.db = driver.db;
    // The file's absolute path (an injected database's too), so messages and the blobs beside it never depend on the cwd.
    const file = driver.db.memory ? ":memory:" : driver.db.name;
    this.location = file === ":memory:" || file === "" ? ":memory:" : path.resolve(file);
  }

  /**
   * Returns the pages a prune freed to the file system (`PRAGMA incremental_vacuum`), or
   * rewrites the whole file with `full` (`VACUUM`: it needs free disk about the file's size
   * and holds the write lock while it runs).
   */
  protected override async afterPrune(vacuum: "incremental" | "full" = "incremental"): Promise<void> {
    if (vacuum === "full") {
      await this.driver.query("cannot vacuum the database", undefined, "VACUUM");
      // In WAL mode the rewritten pages sit in the WAL: copy them back so the file itself shrinks.
      await this.driver.query("cannot vacuum the database", undefined, "PRAGMA wal_checkpoint(TRUNCATE)");
    } else await this.driver.query("cannot run incremental vacuum", undefined, "PRAGMA incremental_vacuum");
  }
}
