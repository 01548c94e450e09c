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

import { closeSync, mkdirSync, openSync, rmSync } from "node:fs";
import path from "node:path";
import { BackendError, InvalidOptionError } from "../../core/errors.js";
import { checkOptions, optionKeys } from "../../core/options.js";
import { SqliteJournal, type SqliteJournalOptions } from "../journal-sqlite.js";
import type { ColdOrphanOptions, ColdPruneOptions, DropMonthResult, SnapshotMonth } from "./contract.js";
import { JournalColdStore } from "./journal-store.js";
import { workflowJournalMigrations } from "./migrate.js";

const MONTH = /^(\d{4})-(0[1-9]|1[0-2])$/;
const DROP_OPTIONS = optionKeys<{ keepLast: number; archiveTo?: string } & ColdOrphanOptions>({
  keepLast: true,
  archiveTo: true,
  orphanRefs: true,
});
const PRUNE_OPTIONS = optionKeys<ColdPruneOptions & ColdOrphanOptions>({
  vacuum: true,
  archiveDir: true,
  orphanRefs: true,
});

/**
 * The UTC month (`YYYY-MM`) of a time in epoch ms; a time past year 9999 (or past what `Date`
 * holds) files under `9999-12`.
 */
export function snapshotMonth(ms: number): string {
  const d = new Date(ms);
  if (Number.isNaN(d.getTime()) || d.getUTCFullYear() > 9999) return "9999-12";
  return `${String(d.getUTCFullYear()).padStart(4, "0")}-${String(d.getUTCMonth() + 1).padStart(2, "0")}`;
}

/** The first ms of a month and of the month after it. */
function monthBounds(month: string): { from: number; to: number } {
  const [y, m] = month.split("-").map(Number) as [number, number];
  return { from: Date.UTC(y, m - 1, 1), to: month === "9999-12" ? Number.MAX_SAFE_INTEGER : Date.UTC(y, m, 1) };
}

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
 * workflows live in (`path`, `database`, `busyTimeoutMs` default 5000,
 * `synchronous` default `"FULL"`, `create`, `tablePrefix` default
 * `"durable_"`).
 */
export interface SqliteColdStoreOptions extends SqliteJournalOptions {
  /**
   * The database file (created with its directory), or `":memory:"`. No default: give `path` or an
   * open `database` (else an `InvalidOptionError`). The CLI's workflow store is
   * `./.dumplingsAI_workflows/workflows.db`.
   */
  path?: string;
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
      throw new InvalidOptionError(
        "sqlite",
        "pruneBatchSize",
        `must be a positive integer, got ${String(pruneBatchSize)}`,
      );
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

  /** Checkpoints by UTC month (the `workflow_snapshots` view: one row per workflow and step index). */
  async months(): Promise<SnapshotMonth[]> {
    await this.init();
    const byMonth = new Map<string, SnapshotMonth>();
    const rows = this.db.prepare("SELECT created_at AS t FROM workflow_snapshots").all() as { t: number }[];
    for (const { t } of rows) {
      const month = snapshotMonth(Number(t));
      const m = byMonth.get(month) ?? { month, snapshots: 0, oldestAt: null, newestAt: null };
      m.snapshots++;
      m.oldestAt = m.oldestAt === null ? Number(t) : Math.min(m.oldestAt, Number(t));
      m.newestAt = m.newestAt === null ? Number(t) : Math.max(m.newestAt, Number(t));
      byMonth.set(month, m);
    }
    return [...byMonth.values()].sort((a, b) => (a.month < b.month ? -1 : 1));
  }

  /**
   * Drops one past month of checkpoints: copies them to `archiveTo` first when given (a new file
   * holding the original design's single `workflow_snapshots` table), then deletes the month's
   * records (the journal's `pruneRuns` over the month's window) but each workflow's newest
   * `keepLast` checkpoints, which stay so every workflow stays resumable. `deletedBlobs` counts the
   * journal's blobs deleted with their last reference; with `orphanRefs` (blobs kept outside the
   * journal), `orphanRefs` names the references the dropped checkpoints held that no checkpoint left
   * holds.
   *
   * @throws {InvalidOptionError} for a malformed, current, future or absent month, `keepLast` < 1,
   *   or an existing `archiveTo` file (nothing dropped)
   * @throws {BackendError} when the archive cannot be written (nothing dropped)
   */
  async dropMonth(
    month: string,
    options: { keepLast: number; archiveTo?: string } & ColdOrphanOptions,
  ): Promise<DropMonthResult> {
    checkOptions(`${this.name} dropMonth`, options, DROP_OPTIONS);
    const { keepLast } = options;
    if (!Number.isInteger(keepLast) || keepLast < 1) {
      throw new InvalidOptionError(this.name, "keepLast", `expected an integer >= 1, got ${keepLast}`);
    }
    if (typeof month !== "string" || !MONTH.test(month)) {
      throw new InvalidOptionError(this.name, "month", `expected YYYY-MM, got ${JSON.stringify(month)}`);
    }
    const current = snapshotMonth(await this.journal.now());
    if (month >= current) {
      throw new InvalidOptionError(
        this.name,
        "month",
        `${month} is not over yet (the current month is ${current}); only past months can be dropped`,
      );
    }
    const months = await this.months();
    if (!months.some((m) => m.month === month)) {
      throw new InvalidOptionError(
        this.name,
        "month",
        `no snapshots of ${month} in this store; it holds ${months.length ? months.map((m) => m.month).join(", ") : "no months"}`,
      );
    }
    const { from, to } = monthBounds(month);
    const count = () =>
      Number(
        (
          this.db
            .prepare("SELECT COUNT(*) AS n FROM workflow_snapshots WHERE created_at >= ? AND created_at < ?")
            .get(from, to) as { n: number }
        ).n,
      );
    const archiveTo = options.archiveTo === undefined ? null : path.resolve(options.archiveTo);
    if (archiveTo !== null) this.archive(from, to, archiveTo, `cannot drop snapshot month ${month}`);
    const before = count();
    let refs: Set<string> | undefined;
    let deletedBlobs: number;
    try {
      refs = options.orphanRefs === true ? await this.checkpointRefs() : undefined;
      ({ deletedBlobs } = await this.journal.pruneRuns({ finishedFrom: from, finishedBefore: to, keepLast }));
    } catch (e) {
      // A month that was not dropped leaves no archive behind, so running it again can write one.
      if (archiveTo !== null) rmSync(archiveTo, { force: true });
      throw e;
    }
    const kept = count();
    return {
      month,
      deletedSnapshots: before - kept,
      carriedForward: kept,
      archivedTo: archiveTo,
      orphanRefs: refs === undefined ? [] : await this.unreferenced(refs),
      deletedBlobs,
    };
  }

  /**
   * {@inheritDoc JournalColdStore.prune}; with `archiveDir`, the months that ended before the
   * cutoff are first dropped whole ({@link SqliteColdStore.dropMonth}), each copied to
   * `<archiveDir>/workflow_snapshots_YYYY_MM.db`; `deletedBlobs` and `orphanRefs` then include those
   * of the months dropped (the checkpoints are read once before the months and once after the prune).
   */
  override async prune(
    cutoff: number,
    keepLast: number,
    options: ColdPruneOptions & ColdOrphanOptions = {},
  ): Promise<{
    deletedSnapshots: number;
    orphanRefs: string[];
    droppedMonths: DropMonthResult[];
    deletedBlobs: number;
  }> {
    checkOptions(`${this.name} prune`, options, PRUNE_OPTIONS);
    const { archiveDir, orphanRefs: want, ...rest } = options;
    if (archiveDir === undefined) return { ...(await super.prune(cutoff, keepLast, options)), droppedMonths: [] };
    const droppedMonths: DropMonthResult[] = [];
    let deletedSnapshots = 0;
    let deletedBlobs = 0;
    const refs = want === true ? await this.checkpointRefs() : undefined;
    const lastWhole = [snapshotMonth(cutoff), snapshotMonth(await this.journal.now())].sort()[0] as string;
    for (const m of await this.months()) {
      if (m.month >= lastWhole) continue;
      const archiveTo = path.join(archiveDir, `workflow_snapshots_${m.month.replace("-", "_")}.db`);
      const dropped = await this.dropMonth(m.month, { keepLast, archiveTo });
      droppedMonths.push(dropped);
      deletedSnapshots += dropped.deletedSnapshots;
      deletedBlobs += dropped.deletedBlobs ?? 0;
    }
    const out = await super.prune(cutoff, keepLast, rest);
    return {
      deletedSnapshots: deletedSnapshots + out.deletedSnapshots,
      orphanRefs: refs === undefined ? [] : await this.unreferenced(refs),
      droppedMonths,
      deletedBlobs: deletedBlobs + out.deletedBlobs,
    };
  }

  /** Copies the checkpoints created in `[from, to)` to a new SQLite file (never an existing one). */
  private archive(from: number, to: number, file: string, what: string): number {
    try {
      mkdirSync(path.dirname(file), { recursive: true });
      // Created here, exclusively (an empty file is an empty database): an existing one is never overwritten.
      closeSync(openSync(file, "wx"));
    } catch (cause) {
      if ((cause as NodeJS.ErrnoException).code === "EEXIST") {
        throw new InvalidOptionError(
          this.name,
          "archiveTo",
          `${file} exists; it is never overwritten (nothing was dropped)`,
        );
      }
      throw new BackendError(this.name, `${what}: cannot create ${file}`, { cause });
    }
    let copied = false;
    try {
      this.db.prepare("ATTACH DATABASE ? AS dumplings_archive").run(file);
      try {
        this.db.exec(`CREATE TABLE dumplings_archive.workflow_snapshots (
           id INTEGER PRIMARY KEY,
           workflow_id TEXT NOT NULL,
           step_index INTEGER NOT NULL,
           node_name TEXT NOT NULL,
           state_json TEXT NOT NULL,
           created_at INTEGER NOT NULL,
           UNIQUE (workflow_id, step_index))`);
        const r = this.db
          .prepare(
            `INSERT INTO dumplings_archive.workflow_snapshots (workflow_id, step_index, node_name, state_json, created_at)
             SELECT workflow_id, step_index, node_name, state_json, created_at FROM main.workflow_snapshots
             WHERE created_at >= ? AND created_at < ? ORDER BY workflow_id, step_index`,
          )
          .run(from, to);
        copied = true;
        return r.changes;
      } finally {
        this.db.exec("DETACH DATABASE dumplings_archive");
      }
    } catch (cause) {
      throw new BackendError(this.name, `${what}: cannot copy it to ${file}`, { cause });
    } finally {
      if (!copied) rmSync(file, { force: true });
    }
  }
}
