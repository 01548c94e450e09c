/**
 * The cold checkpoint store written once for every SQL database, over the
 * async {@link SqlDriver} contract: `SqliteColdStore` and `PostgresColdStore`
 * are this class with their driver.
 *
 * - **Compare-and-set** on a workflow's `latest_step` runs in one write
 *   transaction with the snapshot insert. The summary row is read with the
 *   driver's `forUpdate` (a row lock on PostgreSQL; SQLite's `BEGIN
 *   IMMEDIATE` already holds the file's write lock), so racing writers from
 *   any number of processes serialise and the loser gets a
 *   {@link ConflictError}; two creators of one workflow race on its primary
 *   key.
 * - **Retention** deletes in batches (`pruneBatchSize` rows per statement, one
 *   transaction per batch), so a large prune never holds long locks; the blob
 *   references of deleted snapshots go with them, and the blobs no longer
 *   referenced anywhere are deleted in the same transaction (and returned, for
 *   a separate blob store to delete).
 * - **Blobs** (`cold-blobs.ts`, component `workflow-blobs`): large
 *   `sharedMemory` values live in this database, written in the transaction
 *   of the first checkpoint that references them ({@link ColdStore.readBlob}).
 * - **Tables** are created by the driver's migration ledger (component
 *   `workflow`, see {@link workflowMigrations}, and the lease table's
 *   component `workflow-lease`, see {@link workflowLeaseMigrations}): checked
 *   once per process, DDL only when a version is missing, so opening a store
 *   never locks tables other processes are writing.
 * - **Leases** (`lease-sql.ts`): one worker at a time runs a workflow; the
 *   writes it makes carry its fencing token, checked in the write's own
 *   transaction, so a worker that lost its lease writes nothing.
 *
 * Only portable SQL (`ON CONFLICT`, `RETURNING`, row values) is used; the
 * dialects differ only in their DDL types.
 *
 * @module
 */
import { closeSync, mkdirSync, openSync, rmSync } from "node:fs";
import path from "node:path";
import { BackendError, InvalidOptionError } from "../core/errors.js";
import { checkOptions, optionKeys } from "../core/options.js";
import { wholeOption } from "../drivers/options.js";
import type { SqlDriver, SqlQuery } from "../drivers/sql.js";
import type {
  ColdPruneOptions,
  ColdStore,
  DropMonthResult,
  IdempotencyRecord,
  ListCursor,
  SnapshotMonth,
  SnapshotWrite,
  StepErrorRecord,
  StoredSnapshot,
  TableLookup,
  WorkflowFence,
  WorkflowLeaseResult,
  WorkflowMigrations,
  WorkflowRowStatus,
  WorkflowSummary,
} from "./cold.js";
import { SqlBlobTable } from "./cold-blobs.js";

import { WorkflowConflictError, WorkflowLeaseLostError } from "./errors.js";
import { SqlWorkflowLeases } from "./lease-sql.js";
import { originalSummaryFields, rowCreatedAtMs } from "./original.js";

/** The keys of {@link ColdPruneOptions}: any other is an `InvalidOptionError`. */
const DROP_OPTIONS = optionKeys<{ keepLast: number; archiveTo?: string }>({ keepLast: true, archiveTo: true });
const PRUNE_OPTIONS = optionKeys<ColdPruneOptions>({ vacuum: true, archiveDir: true });

const ORIGINAL_TABLE = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'workflow_snapshots'";

/**
 * The workflow tables of one dialect, for the driver's migration ledger.
 * Version 1 is the layout of dumplings-ai 0.1 with `IF NOT EXISTS`
 * everywhere, so a database created by 0.1 (which had no ledger) is adopted
 * by running it once.
 *
 * @param dialect - `sqlite` or `postgres` (table names carry the driver's `{s}` schema placeholder)
 * @returns the component `workflow` and its migrations
 * @example
 * const driver = new SqliteDriver("sqlite", { path: "wf.db" }, workflowMigrations("sqlite"));
 */
export function workflowMigrations(dialect: "sqlite" | "postgres"): WorkflowMigrations {
  const pg = dialect === "postgres";
  const t = (name: string) => (pg ? `{s}.${name}` : name);
  const id = pg ? "BIGSERIAL PRIMARY KEY" : "INTEGER PRIMARY KEY AUTOINCREMENT";
  const ms = pg ? "BIGINT" : "INTEGER";
  const v1 = [
    `CREATE TABLE IF NOT EXISTS ${t("workflow_snapshots")} (
      id ${id},
      workflow_id TEXT NOT NULL,
      step_index INTEGER NOT NULL,
      node_name TEXT NOT NULL,
      state_json TEXT NOT NULL,
      created_at ${ms} NOT NULL,
      UNIQUE (workflow_id, step_index))`,
    `CREATE INDEX IF NOT EXISTS workflow_snapshots_created_at ON ${t("workflow_snapshots")} (created_at)`,
    `CREATE TABLE IF NOT EXISTS ${t("workflows")} (
      workflow_id TEXT PRIMARY KEY,
      session_id TEXT NOT NULL,
      status TEXT NOT NULL,
      latest_step INTEGER NOT NULL,
      current_node TEXT NOT NULL,
      active_step INTEGER NOT NULL,
      parent_workflow_id TEXT,
      created_at ${ms} NOT NULL,
      updated_at ${ms} NOT NULL)`,
    `CREATE INDEX IF NOT EXISTS workflows_status_updated ON ${t("workflows")} (status, updated_at DESC, workflow_id DESC)`,
    `CREATE INDEX IF NOT EXISTS workflows_updated ON ${t("workflows")} (updated_at DESC, workflow_id DESC)`,
    `CREATE TABLE IF NOT EXISTS ${t("workflow_step_errors")} (
      id ${id},
      workflow_id TEXT NOT NULL,
      step_index INTEGER NOT NULL,
      node_name TEXT NOT NULL,
      error_json TEXT NOT NULL,
      created_at ${ms} NOT NULL)`,
    `CREATE INDEX IF NOT EXISTS workflow_step_errors_workflow ON ${t("workflow_step_errors")} (workflow_id, step_index)`,
    `CREATE TABLE IF NOT EXISTS ${t("workflow_idempotency")} (
      idem_key TEXT PRIMARY KEY,
      workflow_id TEXT NOT NULL,
      step_index INTEGER NOT NULL,
      name TEXT NOT NULL,
      status TEXT NOT NULL CHECK (status IN ('started', 'finished')),
      result_json TEXT,
      started_at ${ms} NOT NULL,
      finished_at ${ms})`,
    `CREATE INDEX IF NOT EXISTS workflow_idempotency_workflow ON ${t("workflow_idempotency")} (workflow_id, step_index)`,
    `CREATE TABLE IF NOT EXISTS ${t("workflow_blob_refs")} (
      workflow_id TEXT NOT NULL,
      step_index INTEGER NOT NULL,
      ref TEXT NOT NULL,
      PRIMARY KEY (workflow_id, step_index, ref))`,
    `CREATE INDEX IF NOT EXISTS workflow_blob_refs_ref ON ${t("workflow_blob_refs")} (ref)`,
  ];
  return {
    component: "workflow",
    migrations: [{ version: 1, name: "workflow tables", up: v1 }],
    // An archive of the original design (its `workflow_snapshots` table, no ledger): migrated, not refused,
    // by a read-only open (SQLite; the original design had no PostgreSQL archive).
    ...(pg ? {} : { present: (db: TableLookup) => db.prepare(ORIGINAL_TABLE).get() !== undefined }),
  };
}

/** Options of {@link SqlColdStore} beyond its driver. */
export interface SqlColdStoreOptions {
  /** Rows deleted per statement (and per transaction) by `prune`. @default 5000 */
  pruneBatchSize?: number;
}

/** Name of the snapshot table of a month (`YYYY-MM`), unquoted. */
const monthTableName = (month: string): string => `workflow_snapshots_${month.replace("-", "_")}`;
const MONTH_TABLE = /^workflow_snapshots_(\d{4})_(\d{2})$/;
const MONTH = /^(\d{4})-(0[1-9]|1[0-2])$/;
/** The single table of an archive written before the split by month (and of PostgreSQL). */
const UNPARTITIONED = "unpartitioned";

/**
 * The UTC month of a time, as `YYYY-MM` (the snapshot table a row created then goes to).
 *
 * @param ms - ms since the epoch
 * @returns e.g. `"2026-11"`
 * @example
 * snapshotMonth(Date.UTC(2026, 10, 30)) // "2026-11"
 */
export function snapshotMonth(ms: number): string {
  const d = new Date(ms);
  // A time past year 9999 (or past what Date holds) files under the last month a table name can carry.
  if (Number.isNaN(d.getTime()) || d.getUTCFullYear() > 9999) return "9999-12";
  return `${String(d.getUTCFullYear()).padStart(4, "0")}-${String(d.getUTCMonth() + 1).padStart(2, "0")}`;
}

/** A snapshot table: its month (or `unpartitioned`) and its name ready for SQL. */
interface SnapshotTable {
  month: string;
  table: string;
}

/**
 * `created_at` before the cutoff (`$1`, ms). A row of the original design (its state starts with
 * `{"workflow_id"`) holding float seconds (below 1e11) is compared with the cutoff in seconds
 * (`$4`); one holding date text is never pruned by age. The range on `created_at` comes first, so
 * the index still serves it.
 */
const CREATED_BEFORE = `(s.created_at < $1 AND (s.created_at >= 100000000000 OR s.state_json NOT LIKE '{"workflow_id"%' OR s.created_at < $4))`;

/** Values bound per statement built from a list (far below both databases' limits). */
const CHUNK = 500;
const SNAPSHOT_COLUMNS = "workflow_id, step_index, node_name, state_json, created_at";
const SUMMARY_COLUMNS =
  "workflow_id, session_id, status, latest_step, current_node, active_step, parent_workflow_id, created_at, updated_at";

type Row = Record<string, unknown>;
/** PostgreSQL returns BIGINT as a string; SQLite returns numbers. */
const num = (v: unknown): number => Number(v);
const text = (v: unknown): string => v as string;

const toSnapshot = (r: Row): StoredSnapshot => ({
  workflowId: text(r.workflow_id),
  stepIndex: num(r.step_index),
  nodeName: text(r.node_name),
  stateJson: text(r.state_json),
  // Float seconds or date text in rows of the original layout.
  createdAt: rowCreatedAtMs(r.created_at, text(r.state_json)),
});

const toSummary = (r: Row): WorkflowSummary => ({
  workflowId: text(r.workflow_id),
  sessionId: text(r.session_id),
  status: r.status as WorkflowRowStatus,
  latestStep: num(r.latest_step),
  currentNode: text(r.current_node),
  parentWorkflowId: (r.parent_workflow_id as string | null) ?? null,
  createdAt: num(r.created_at),
  updatedAt: num(r.updated_at),
});

const toIdempotency = (r: Row): IdempotencyRecord => ({
  key: text(r.idem_key),
  workflowId: text(r.workflow_id),
  stepIndex: num(r.step_index),
  name: text(r.name),
  status: r.status as "started" | "finished",
  resultJson: (r.result_json as string | null) ?? null,
  startedAt: num(r.started_at),
  finishedAt: r.finished_at === null || r.finished_at === undefined ? null : num(r.finished_at),
});

/** The same bytes as a Buffer (the SQLite driver binds a Buffer as a blob), not copied. */
const asBuffer = (b: Uint8Array): Buffer =>
  Buffer.isBuffer(b) ? b : Buffer.from(b.buffer, b.byteOffset, b.byteLength);

function chunks<T>(items: readonly T[], size: number): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < items.length; i += size) out.push(items.slice(i, i + size));
  return out;
}

/** `$from, $from+1, …` for `count` values. */
const placeholders = (count: number, from = 1): string =>
  Array.from({ length: count }, (_, i) => `$${from + i}`).join(", ");

/**
 * A cold checkpoint store over any {@link SqlDriver} whose migrations include
 * {@link workflowMigrations}, {@link workflowLeaseMigrations} and `workflowBlobMigrations` (`cold-blobs.ts`) of its
 * dialect. Use `SqliteColdStore` or `PostgresColdStore`, which build the
 * driver from connection options.
 *
 * @example
 * const driver = new PostgresDriver("postgres", { url }, [
 *   workflowMigrations("postgres"), workflowLeaseMigrations("postgres"), workflowBlobMigrations("postgres"),
 * ]);
 * const store = await CheckpointStore.open({ cold: new SqlColdStore(driver) });
 */
export class SqlColdStore<D extends SqlDriver = SqlDriver> implements ColdStore {
  /** `sqlite` or `postgres`, used in error messages. */
  readonly name: "sqlite" | "postgres";
  /** {@inheritDoc ColdStore.location} (set by `SqliteColdStore` and `PostgresColdStore`) */
  readonly location: string | undefined;
  /** The driver the store runs on (closed by {@link close}). */
  protected readonly driver: D;
  private readonly batch: number;
  /** Whether snapshots are split into one table per month (SQLite). */
  private readonly monthly: boolean;
  private readonly snapshots: string;
  private readonly workflows: string;
  private readonly stepErrors: string;
  private readonly idempotency: string;
  private readonly blobRefs: string;
  /** The blob table's statements (large values kept in this database, `cold-blobs.ts`). */
  private readonly blobTable: SqlBlobTable;
  /** The lease table's statements. */
  private readonly leases: SqlWorkflowLeases;
  /** SQLite: whether the file's text encoding is UTF-8 (undefined until asked). */
  private utf8: boolean | undefined;

  /**
   * @param driver - an SQL driver set up with {@link workflowMigrations}; the store owns it (closed on a bad option)
   * @param options - `pruneBatchSize`
   * @throws {InvalidOptionError} when `pruneBatchSize` is not a positive integer
   */
  constructor(driver: D, options: SqlColdStoreOptions = {}) {
    let batch: number;
    try {
      batch = wholeOption(driver.name, "pruneBatchSize", options.pruneBatchSize, 5000);
    } catch (e) {
      void driver.close().catch(() => undefined);
      throw e;
    }
    this.driver = driver;
    this.name = driver.name;
    this.batch = batch;
    // SQLite splits its archive by month (a table per month, dropped whole); PostgreSQL keeps one table.
    this.monthly = driver.name === "sqlite";
    this.snapshots = driver.table("workflow_snapshots");
    this.workflows = driver.table("workflows");
    this.stepErrors = driver.table("workflow_step_errors");
    this.idempotency = driver.table("workflow_idempotency");
    this.blobRefs = driver.table("workflow_blob_refs");
    this.blobTable = new SqlBlobTable(driver);
    this.leases = new SqlWorkflowLeases(driver);
  }

  /** {@inheritDoc ColdStore.init} (the driver's migrations: no DDL on a schema that has them all) */
  init(): Promise<void> {
    return this.driver.ready();
  }

  /** {@inheritDoc ColdStore.write} */
  async write(row: SnapshotWrite, expectedLatest: number | null | undefined, fencingToken?: number): Promise<void> {
    const id = row.workflowId;
    const summary = [
      id,
      row.sessionId,
      row.status,
      row.stepIndex,
      row.currentNode,
      row.activeStep,
      row.parentWorkflowId,
      row.createdAt,
    ];
    const insertSummary = `INSERT INTO ${this.workflows} AS w (${SUMMARY_COLUMNS}) VALUES (${placeholders(8)}, $8)`;
    await this.driver.transaction(`cannot write checkpoint ${row.stepIndex} of workflow "${id}"`, id, async (query) => {
      if (fencingToken !== undefined) {
        // First, and locked until commit: a takeover waits for this write, or this write sees it and is refused.
        await this.leases.fence(query, id, fencingToken, `checkpoint ${row.stepIndex} refused`, false);
      }
      let actual: number | null | undefined;
      if (expectedLatest !== undefined) {
        actual = await this.latestStep(query, id, this.driver.forUpdate);
        if (actual === null && expectedLatest === null) {
          // Two creators race: the primary key decides, the loser's insert does nothing.
          const ins = await query(`${insertSummary} ON CONFLICT (workflow_id) DO NOTHING`, summary);
          if (ins.rowCount !== 1) {
            throw new WorkflowConflictError(id, null, await this.latestStep(query, id), this.name);
          }
        } else if (actual !== expectedLatest) {
          throw new WorkflowConflictError(id, expectedLatest, actual, this.name);
        }
      }
      const target = await this.snapshotTarget(query, row.createdAt);
      if (this.monthly) {
        // A step written again (not past the latest) may live in another month: one row per step.
        actual ??= await this.latestStep(query, id);
        if (actual !== null && row.stepIndex <= actual) {
          for (const t of await this.snapshotTables(query)) {
            if (t.table === target) continue;
            await query(`DELETE FROM ${t.table} WHERE workflow_id = $1 AND step_index = $2`, [id, row.stepIndex]);
          }
        }
      }
      // SQLite (a UTF-8 file) takes the state's bytes as they are (CAST to TEXT: the same text, not re-encoded);
      // elsewhere the text.
      const bytes = row.stateBytes !== undefined && (await this.utf8File(query));
      await query(
        `INSERT INTO ${target} (${SNAPSHOT_COLUMNS}) VALUES ($1, $2, $3, ${bytes ? "CAST($4 AS TEXT)" : "$4"}, $5)
         ON CONFLICT (workflow_id, step_index) DO UPDATE SET
           node_name = excluded.node_name, state_json = excluded.state_json, created_at = excluded.created_at`,
        [id, row.stepIndex, row.nodeName, bytes ? asBuffer(row.stateBytes!) : row.stateJson, row.createdAt],
      );
      await query(
        `${insertSummary} ON CONFLICT (workflow_id) DO UPDATE SET
           session_id = excluded.session_id, status = excluded.status, latest_step = excluded.latest_step,
           current_node = excluded.current_node, active_step = excluded.active_step, updated_at = excluded.updated_at
         WHERE excluded.latest_step >= w.latest_step`,
        summary,
      );
      const before = await query(
        `DELETE FROM ${this.blobRefs} WHERE workflow_id = $1 AND step_index = $2 RETURNING ref`,
        [id, row.stepIndex],
      );
      for (const refs of chunks([...new Set(row.blobRefs)], CHUNK)) {
        const values = refs.map((_, i) => `($1, $2, $${i + 3})`).join(", ");
        await query(
          `INSERT INTO ${this.blobRefs} (workflow_id, step_index, ref) VALUES ${values} ON CONFLICT DO NOTHING`,
          [id, row.stepIndex, ...refs],
        );
      }
      // The large values this snapshot references, in this transaction: only those not held yet are written.
      if (row.blobs !== undefined && row.blobs.size > 0) await this.blobTable.store(query, row.blobs);
      // A step written again may have let go of a blob (nothing else holds it: deleted with it).
      const released = before.rows.map((r) => text(r.ref)).filter((ref) => !row.blobRefs.includes(ref));
      if (released.length > 0) await this.blobTable.dropOrphans(query, released);
    });
  }

  /**
   * Whether this is an SQLite file whose text encoding is UTF-8 (a new file's; asked once), where a
   * blob of UTF-8 bytes CAST to TEXT is that text exactly.
   */
  private async utf8File(query: SqlQuery): Promise<boolean> {
    if (this.name !== "sqlite") return false;
    if (this.utf8 === undefined) {
      const r = await query("PRAGMA encoding");
      this.utf8 = String(r.rows[0]?.encoding ?? "").toUpperCase() === "UTF-8";
    }
    return this.utf8;
  }

  /** {@inheritDoc ColdStore.read} */
  async read(workflowId: string, stepIndex: number): Promise<StoredSnapshot | undefined> {
    const what = `cannot read step ${stepIndex} of workflow "${workflowId}"`;
    const r = await this.readMonths(
      what,
      workflowId,
      (tables) => this.acrossMonths(tables, "workflow_id = $1 AND step_index = $2"),
      [workflowId, stepIndex],
    );
    return r.rows[0] && toSnapshot(r.rows[0]);
  }

  /** {@inheritDoc ColdStore.latest} (in whichever month it lives) */
  async latest(workflowId: string): Promise<StoredSnapshot | undefined> {
    const what = `cannot read latest checkpoint of workflow "${workflowId}"`;
    const r = await this.readMonths(
      what,
      workflowId,
      (tables) => `${this.acrossMonths(tables, "workflow_id = $1")} ORDER BY step_index DESC LIMIT 1`,
      [workflowId],
    );
    return r.rows[0] && toSnapshot(r.rows[0]);
  }

  /** {@inheritDoc ColdStore.summary} */
  async summary(workflowId: string): Promise<WorkflowSummary | undefined> {
    const r = await this.driver.query(
      `cannot read workflow "${workflowId}"`,
      workflowId,
      `SELECT ${SUMMARY_COLUMNS} FROM ${this.workflows} WHERE workflow_id = $1`,
      [workflowId],
    );
    if (r.rows[0]) return toSummary(r.rows[0]);
    // A workflow written in the original layout has snapshots but no summary row: derive it (nothing is written).
    return this.originalSummary(
      (sql, values) => this.driver.query(`cannot read workflow "${workflowId}"`, workflowId, sql, values),
      workflowId,
    );
  }

  /** {@inheritDoc ColdStore.history} */
  async history(workflowId: string): Promise<StoredSnapshot[]> {
    const what = `cannot read history of workflow "${workflowId}"`;
    const r = await this.readMonths(
      what,
      workflowId,
      (tables) => `${this.acrossMonths(tables, "workflow_id = $1")} ORDER BY step_index`,
      [workflowId],
    );
    return r.rows.map(toSnapshot);
  }

  /** {@inheritDoc ColdStore.list} */
  async list(query: { status?: WorkflowRowStatus; limit: number; after?: ListCursor }): Promise<WorkflowSummary[]> {
    const [sql, values] = this.listQuery(query);
    const r = await this.driver.query("cannot list workflows", undefined, sql, values);
    return r.rows.map(toSummary);
  }

  /** {@inheritDoc ColdStore.explainList} */
  explainList(status?: WorkflowRowStatus): Promise<string> {
    const [sql, values] = this.listQuery({ status, limit: 10, after: { updatedAt: 0, workflowId: "" } });
    return this.driver.explain(sql, values);
  }

  /** {@inheritDoc ColdStore.deleteWorkflow} */
  deleteWorkflow(workflowId: string): Promise<{ existed: boolean; orphanRefs: string[] }> {
    return this.driver.transaction(`cannot delete workflow "${workflowId}"`, workflowId, async (query) => {
      const byId = (table: string) => query(`DELETE FROM ${table} WHERE workflow_id = $1`, [workflowId]);
      const refs = await query(`DELETE FROM ${this.blobRefs} WHERE workflow_id = $1 RETURNING ref`, [workflowId]);
      let snapshots = 0;
      for (const t of await this.snapshotTables(query)) snapshots += (await byId(t.table)).rowCount ?? 0;
      const summaries = await byId(this.workflows);
      await byId(this.stepErrors);
      await byId(this.idempotency);
      await this.leases.endOnDelete(query, workflowId);
      return {
        existed: snapshots + (summaries.rowCount ?? 0) > 0,
        orphanRefs: await this.blobTable.dropOrphans(
          query,
          refs.rows.map((r) => text(r.ref)),
        ),
      };
    });
  }

  /** {@inheritDoc ColdStore.prune} */
  async prune(
    cutoff: number,
    keepLast: number,
    options: ColdPruneOptions = {},
  ): Promise<{ deletedSnapshots: number; orphanRefs: string[]; droppedMonths: DropMonthResult[] }> {
    checkOptions(`${this.name} prune`, options, PRUNE_OPTIONS);
    const vacuum = options.vacuum ?? "incremental";
    if (vacuum !== "incremental" && vacuum !== "full") {
      throw new InvalidOptionError(
        this.name,
        "vacuum",
        `expected "incremental" or "full", got ${JSON.stringify(vacuum)}`,
      );
    }
    if (options.archiveDir !== undefined && !this.monthly) {
      throw new InvalidOptionError(
        this.name,
        "archiveDir",
        "this store keeps one snapshot table (no months to archive)",
      );
    }
    let deletedSnapshots = 0;
    const orphanRefs = new Set<string>();
    const droppedMonths: DropMonthResult[] = [];
    // Months that ended before the cutoff (and before the current month) go whole: no row-by-row deletes.
    const lastWhole = [snapshotMonth(cutoff), snapshotMonth(Date.now())].sort()[0]!;
    for (const t of await this.snapshotTables(undefined, "cannot prune workflow snapshots")) {
      if (t.month === UNPARTITIONED || t.month >= lastWhole) continue;
      const archiveTo =
        options.archiveDir === undefined ? undefined : path.join(options.archiveDir, `${monthTableName(t.month)}.db`);
      const dropped = await this.dropMonth(t.month, { keepLast, archiveTo });
      droppedMonths.push(dropped);
      deletedSnapshots += dropped.deletedSnapshots;
      for (const ref of dropped.orphanRefs) orphanRefs.add(ref);
    }
    for (const t of await this.snapshotTables(undefined, "cannot prune workflow snapshots")) {
      deletedSnapshots += await this.pruneTable(t.table, cutoff, keepLast, orphanRefs);
    }
    // Blobs no snapshot references at all (a step written again with another value, a blob put alone).
    for (;;) {
      const swept = await this.driver.transaction("cannot delete unreferenced blobs", undefined, (query) =>
        this.blobTable.sweep(query, this.batch),
      );
      for (const ref of swept) orphanRefs.add(ref);
      if (swept.length < this.batch) break;
    }
    // Side-effect records of node runs that have finished (before the active step) are never replayed again.
    for (;;) {
      const r = await this.driver.query(
        "cannot prune side-effect records",
        undefined,
        `DELETE FROM ${this.idempotency} WHERE idem_key IN (
           SELECT i.idem_key FROM ${this.idempotency} i JOIN ${this.workflows} w ON w.workflow_id = i.workflow_id
           WHERE i.started_at < $1 AND i.step_index < w.active_step LIMIT $2)`,
        [cutoff, this.batch],
      );
      if ((r.rowCount ?? 0) < this.batch) break;
    }
    // Free leases of workflows deleted before the cutoff; the highest token pruned becomes the floor new
    // lease rows start above (fencing tokens of an id never go back).
    await this.leases.prune(this.workflows, cutoff, this.batch);
    await this.afterPrune(vacuum);
    return { deletedSnapshots, orphanRefs: [...orphanRefs], droppedMonths };
  }

  /** {@inheritDoc ColdStore.months} */
  async months(): Promise<SnapshotMonth[]> {
    const what = "cannot list the snapshot months";
    const out: SnapshotMonth[] = [];
    for (const t of await this.snapshotTables(undefined, what)) {
      const r = await this.driver.query(
        what,
        undefined,
        `SELECT COUNT(*) AS n, MIN(created_at) AS oldest, MAX(created_at) AS newest FROM ${t.table}`,
      );
      const row = r.rows[0] ?? {};
      out.push({
        month: t.month,
        snapshots: num(row.n ?? 0),
        oldestAt: row.oldest === null || row.oldest === undefined ? null : num(row.oldest),
        newestAt: row.newest === null || row.newest === undefined ? null : num(row.newest),
      });
    }
    return out;
  }

  /** {@inheritDoc ColdStore.dropMonth} */
  async dropMonth(month: string, options: { keepLast: number; archiveTo?: string }): Promise<DropMonthResult> {
    checkOptions(`${this.name} dropMonth`, options, DROP_OPTIONS);
    const what = `cannot drop snapshot month ${month}`;
    const keepLast = options.keepLast;
    if (!Number.isInteger(keepLast) || keepLast < 1) {
      throw new InvalidOptionError(this.name, "keepLast", `expected an integer >= 1, got ${keepLast}`);
    }
    if (!this.monthly)
      throw new InvalidOptionError(this.name, "month", "this store keeps one snapshot table (no months)");
    if (typeof month !== "string" || !MONTH.test(month)) {
      throw new InvalidOptionError(this.name, "month", `expected YYYY-MM, got ${JSON.stringify(month)}`);
    }
    const current = snapshotMonth(Date.now());
    if (month >= current) {
      throw new InvalidOptionError(
        this.name,
        "month",
        `${month} is not over yet (the current month is ${current}); only past months can be dropped`,
      );
    }
    const tables = await this.snapshotTables(undefined, what);
    const t = tables.find((x) => x.month === month);
    if (t === undefined) {
      const held = tables.filter((x) => x.month !== UNPARTITIONED).map((x) => x.month);
      throw new InvalidOptionError(
        this.name,
        "month",
        `no snapshots of ${month} in this store; it holds ${held.length ? held.join(", ") : "no months"}`,
      );
    }
    let archived = -1;
    const archiveTo = options.archiveTo === undefined ? null : path.resolve(options.archiveTo);
    if (archiveTo !== null) archived = await this.archiveTable(t.table, archiveTo, what);
    const drop = this.driver.transaction(what, undefined, async (query) => {
      const total = num((await query(`SELECT COUNT(*) AS n FROM ${t.table}`)).rows[0]?.n ?? 0);
      if (archived >= 0 && total !== archived) {
        throw new BackendError(
          this.name,
          `${what}: it changed while it was copied to ${archiveTo} (${archived} rows copied, ${total} now); nothing was dropped, run it again`,
        );
      }
      // Each workflow's newest steps stay resumable: carried to the current month.
      const target = await this.snapshotTarget(query, Date.now());
      const carried = await query(
        `INSERT INTO ${target} (${SNAPSHOT_COLUMNS})
         SELECT s.workflow_id, s.step_index, s.node_name, s.state_json, s.created_at
         FROM ${t.table} s JOIN ${this.workflows} w ON w.workflow_id = s.workflow_id
         WHERE s.step_index > w.latest_step - $1
         ON CONFLICT (workflow_id, step_index) DO NOTHING`,
        [keepLast],
      );
      const refs = await query(
        `DELETE FROM ${this.blobRefs} WHERE (workflow_id, step_index) IN (
           SELECT s.workflow_id, s.step_index FROM ${t.table} s LEFT JOIN ${this.workflows} w ON w.workflow_id = s.workflow_id
           WHERE w.workflow_id IS NULL OR s.step_index <= w.latest_step - $1)
         RETURNING ref`,
        [keepLast],
      );
      const orphanRefs = await this.blobTable.dropOrphans(
        query,
        refs.rows.map((r) => text(r.ref)),
      );
      await query(`DROP TABLE ${t.table}`);
      const carriedForward = carried.rowCount ?? 0;
      return { month, deletedSnapshots: total - carriedForward, carriedForward, archivedTo: archiveTo, orphanRefs };
    });
    // A month that was not dropped leaves no archive behind, so running it again can write one.
    return drop.catch((e: unknown) => {
      if (archiveTo !== null) rmSync(archiveTo, { force: true });
      throw e;
    });
  }

  /** Row-by-row retention in one snapshot table, in batches; returns the rows deleted. */
  private async pruneTable(table: string, cutoff: number, keepLast: number, orphanRefs: Set<string>): Promise<number> {
    let deletedSnapshots = 0;
    for (;;) {
      const n = await this.driver.transaction("cannot prune workflow snapshots", undefined, async (query) => {
        const del = await query(
          `DELETE FROM ${table} WHERE id IN (
             SELECT s.id FROM ${table} s JOIN ${this.workflows} w ON w.workflow_id = s.workflow_id
             WHERE ${CREATED_BEFORE} AND s.step_index <= w.latest_step - $2 LIMIT $3)
           RETURNING workflow_id, step_index`,
          [cutoff, keepLast, this.batch, Math.floor(cutoff / 1000)],
        );
        const refs: string[] = [];
        for (const rows of chunks(del.rows, CHUNK)) {
          const pairs = rows.map((_, i) => `($${2 * i + 1}, $${2 * i + 2})`).join(", ");
          const r = await query(
            `DELETE FROM ${this.blobRefs} WHERE (workflow_id, step_index) IN (${pairs}) RETURNING ref`,
            rows.flatMap((x) => [x.workflow_id, num(x.step_index)]),
          );
          for (const x of r.rows) refs.push(text(x.ref));
        }
        for (const ref of await this.blobTable.dropOrphans(query, refs)) orphanRefs.add(ref);
        return del.rows.length;
      });
      deletedSnapshots += n;
      if (n < this.batch) break;
    }
    return deletedSnapshots;
  }

  /** {@inheritDoc ColdStore.recordError} */
  async recordError(record: StepErrorRecord, fencingToken?: number): Promise<void> {
    const id = record.workflowId;
    await this.driver.transaction(`cannot record the error of workflow "${id}"`, id, async (query) => {
      if (fencingToken !== undefined) {
        await this.leases.fence(query, id, fencingToken, `error record of step ${record.stepIndex} refused`, false);
      }
      await query(
        `INSERT INTO ${this.stepErrors} (workflow_id, step_index, node_name, error_json, created_at)
         VALUES (${placeholders(5)})`,
        [id, record.stepIndex, record.nodeName, JSON.stringify(record.error), record.createdAt],
      );
      await query(
        `UPDATE ${this.workflows} SET status = 'failed', updated_at = $1 WHERE workflow_id = $2 AND latest_step = $3`,
        [record.createdAt, id, record.stepIndex],
      );
    });
  }

  /** {@inheritDoc ColdStore.errors} */
  async errors(workflowId: string): Promise<StepErrorRecord[]> {
    const r = await this.driver.query(
      `cannot read errors of workflow "${workflowId}"`,
      workflowId,
      `SELECT workflow_id, step_index, node_name, error_json, created_at FROM ${this.stepErrors}
       WHERE workflow_id = $1 ORDER BY id`,
      [workflowId],
    );
    return r.rows.map((x) => ({
      workflowId: text(x.workflow_id),
      stepIndex: num(x.step_index),
      nodeName: text(x.node_name),
      error: JSON.parse(text(x.error_json)),
      createdAt: num(x.created_at),
    }));
  }

  /** {@inheritDoc ColdStore.readBlob} */
  readBlob(ref: string): Promise<Uint8Array | undefined> {
    return this.blobTable.read(ref);
  }

  /** {@inheritDoc ColdStore.writeBlob} */
  async writeBlob(ref: string, bytes: Uint8Array): Promise<void> {
    await this.driver.transaction(`cannot write blob ${ref}`, ref, (query) =>
      this.blobTable.store(query, new Map([[ref, bytes]])),
    );
  }

  /** {@inheritDoc ColdStore.deleteBlob} */
  deleteBlob(ref: string): Promise<boolean> {
    return this.driver.transaction(`cannot delete blob ${ref}`, ref, async (query) => {
      const held = await query(`SELECT 1 FROM ${this.blobTable.table} WHERE ref = $1`, [ref]);
      if (held.rows.length === 0) return false;
      return (await this.blobTable.dropOrphans(query, [ref])).length === 1;
    });
  }

  /** {@inheritDoc ColdStore.idempotencyBegin} */
  async idempotencyBegin(
    key: string,
    info: { workflowId: string; stepIndex: number; name: string; now: number; fencingToken?: number },
  ): Promise<IdempotencyRecord | undefined> {
    const insert = `INSERT INTO ${this.idempotency} (idem_key, workflow_id, step_index, name, status, started_at)
         VALUES ($1, $2, $3, $4, 'started', $5) ON CONFLICT (idem_key) DO NOTHING`;
    const values = [key, info.workflowId, info.stepIndex, info.name, info.now];
    const select = `SELECT * FROM ${this.idempotency} WHERE idem_key = $1`;
    const token = info.fencingToken;
    if (token !== undefined) {
      // Fenced: the start is recorded (or the existing record read) only under a live, current lease.
      const what = `cannot record the start of side effect "${key}"`;
      return this.driver.transaction(what, key, async (query) => {
        await this.leases.fence(query, info.workflowId, token, `start of side effect "${key}" refused`, true);
        if ((await query(insert, values)).rowCount === 1) return undefined;
        const r = await query(select, [key]);
        if (!r.rows[0])
          throw new BackendError(this.name, `side effect "${key}" vanished while being recorded`, { key });
        return toIdempotency(r.rows[0]);
      });
    }
    // A record abandoned between our insert and our read: try the insert again.
    for (let attempt = 0; attempt < 3; attempt++) {
      const ins = await this.driver.query(`cannot record the start of side effect "${key}"`, key, insert, values);
      if (ins.rowCount === 1) return undefined;
      const r = await this.driver.query(`cannot read side effect "${key}"`, key, select, [key]);
      if (r.rows[0]) return toIdempotency(r.rows[0]);
    }
    throw new BackendError(this.name, `side effect "${key}" keeps vanishing while being recorded`, { key });
  }

  /** {@inheritDoc ColdStore.idempotencyFinish} */
  async idempotencyFinish(key: string, resultJson: string, now: number): Promise<void> {
    await this.driver.query(
      `cannot record the result of side effect "${key}"`,
      key,
      `UPDATE ${this.idempotency} SET status = 'finished', result_json = $1, finished_at = $2 WHERE idem_key = $3`,
      [resultJson, now, key],
    );
  }

  /** {@inheritDoc ColdStore.idempotencyAbandon} */
  async idempotencyAbandon(key: string, fence?: WorkflowFence): Promise<void> {
    const what = `cannot clear side effect "${key}"`;
    const del = `DELETE FROM ${this.idempotency} WHERE idem_key = $1 AND status = 'started'`;
    if (!fence) {
      await this.driver.query(what, key, del, [key]);
      return;
    }
    await this.driver.transaction(what, key, async (query) => {
      try {
        await this.leases.fence(query, fence.workflowId, fence.fencingToken, "abandon", false);
      } catch (e) {
        if (e instanceof WorkflowLeaseLostError) return; // no longer this worker's: the new holder reconciles it
        throw e;
      }
      await query(del, [key]);
    });
  }

  /** {@inheritDoc ColdStore.acquireLease} */
  acquireLease(workflowId: string, owner: string, ttlMs: number): Promise<WorkflowLeaseResult> {
    return this.leases.acquire(workflowId, owner, ttlMs);
  }

  /** {@inheritDoc ColdStore.renewLease} */
  renewLease(workflowId: string, fencingToken: number, ttlMs: number): Promise<number> {
    return this.leases.renew(workflowId, fencingToken, ttlMs);
  }

  /** {@inheritDoc ColdStore.releaseLease} */
  releaseLease(workflowId: string, fencingToken: number): Promise<void> {
    return this.leases.release(workflowId, fencingToken);
  }

  /** {@inheritDoc ColdStore.close} */
  close(): Promise<void> {
    return this.driver.close();
  }

  /**
   * Runs after every {@link prune}, once the deletes are committed: a
   * dialect's clean-up (SQLite returns freed pages to the file system).
   * By default, `full` runs `VACUUM (FULL)` on each workflow table (PostgreSQL)
   * and `incremental` does nothing.
   *
   * @param vacuum - what the caller asked for
   */
  protected async afterPrune(vacuum: "incremental" | "full" = "incremental"): Promise<void> {
    if (vacuum !== "full") return;
    const tables = [
      this.snapshots,
      this.workflows,
      this.stepErrors,
      this.idempotency,
      this.blobRefs,
      this.blobTable.table,
    ];
    for (const table of tables) {
      await this.driver.query(`cannot vacuum ${table}`, undefined, `VACUUM (FULL) ${table}`);
    }
  }

  // ---- internals ----

  /**
   * The snapshot tables to read: PostgreSQL's one table; on SQLite the single table of an
   * archive written before the split by month, then every month's table, oldest first.
   */
  private async snapshotTables(query?: SqlQuery, what = "cannot list the snapshot months"): Promise<SnapshotTable[]> {
    const single = { month: UNPARTITIONED, table: this.snapshots };
    if (!this.monthly) return [single];
    const run: SqlQuery = query ?? ((sql, values) => this.driver.query(what, undefined, sql, values));
    const r = await run(
      `SELECT name FROM sqlite_master WHERE type = 'table'
         AND (name = 'workflow_snapshots' OR name GLOB 'workflow_snapshots_[0-9][0-9][0-9][0-9]_[0-9][0-9]')`,
    );
    const months: SnapshotTable[] = [];
    let hasSingle = false;
    for (const row of r.rows) {
      const name = text(row.name);
      const m = MONTH_TABLE.exec(name);
      if (m) months.push({ month: `${m[1]}-${m[2]}`, table: this.driver.table(name) });
      else hasSingle = true;
    }
    months.sort((a, b) => (a.month < b.month ? -1 : a.month > b.month ? 1 : 0));
    return hasSingle ? [single, ...months] : months;
  }

  /** The table a row created at `createdAt` goes to (on SQLite, its month's table, created when missing). */
  private async snapshotTarget(query: SqlQuery, createdAt: number): Promise<string> {
    if (!this.monthly) return this.snapshots;
    const name = monthTableName(snapshotMonth(createdAt));
    const table = this.driver.table(name);
    await query(
      `CREATE TABLE IF NOT EXISTS ${table} (
         id INTEGER PRIMARY KEY,
         workflow_id TEXT NOT NULL,
         step_index INTEGER NOT NULL,
         node_name TEXT NOT NULL,
         state_json TEXT NOT NULL,
         created_at INTEGER NOT NULL,
         UNIQUE (workflow_id, step_index))`,
    );
    await query(`CREATE INDEX IF NOT EXISTS ${this.driver.table(`${name}_created_at`)} ON ${table} (created_at)`);
    return table;
  }

  /**
   * Runs a read over the snapshot tables listed just before. A month another process drops
   * in between ("no such table") is a reason to list them again, once.
   */
  private async readMonths(
    what: string,
    key: string,
    sql: (tables: readonly SnapshotTable[]) => string,
    values: unknown[],
  ) {
    for (let attempt = 0; ; attempt++) {
      const tables = await this.snapshotTables(undefined, what);
      try {
        return await this.driver.query(what, key, sql(tables), values);
      } catch (e) {
        const dropped = /no such table/i.test(String((e as { cause?: unknown }).cause ?? e));
        if (attempt > 0 || !this.monthly || !dropped) throw e;
      }
    }
  }

  /** One query over every snapshot table (`UNION ALL`); `where` may use the same `$n` in each. */
  private acrossMonths(tables: readonly SnapshotTable[], where: string): string {
    if (tables.length === 0) return `SELECT ${SNAPSHOT_COLUMNS} FROM ${this.snapshots} WHERE ${where}`;
    return tables.map((t) => `SELECT ${SNAPSHOT_COLUMNS} FROM ${t.table} WHERE ${where}`).join(" UNION ALL ");
  }

  /**
   * Copies a snapshot table whole into a new SQLite file (table `workflow_snapshots`, the
   * single-table layout any SQLite tool reads); returns the rows copied.
   * @throws {InvalidOptionError} when the file exists (it is never overwritten)
   */
  private async archiveTable(table: string, file: string, what: string): Promise<number> {
    const q = (sql: string, values?: unknown[]) => this.driver.query(what, undefined, sql, values);
    try {
      mkdirSync(path.dirname(file), { recursive: true });
      // Created here, exclusively (an empty file is an empty database): an existing one is never
      // overwritten, and the store's connection may attach it even when opened without the right to create.
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
      await q("ATTACH DATABASE $1 AS dumplings_archive", [file]);
    } catch (e) {
      rmSync(file, { force: true });
      throw e;
    }
    try {
      await q(
        `CREATE TABLE dumplings_archive.workflow_snapshots (
           id INTEGER PRIMARY KEY,
           workflow_id TEXT NOT NULL,
           step_index INTEGER NOT NULL,
           node_name TEXT NOT NULL,
           state_json TEXT NOT NULL,
           created_at INTEGER NOT NULL,
           UNIQUE (workflow_id, step_index))`,
      );
      const r = await q(
        `INSERT INTO dumplings_archive.workflow_snapshots (${SNAPSHOT_COLUMNS}) SELECT ${SNAPSHOT_COLUMNS} FROM main.${table}`,
      );
      copied = true;
      return r.rowCount ?? 0;
    } finally {
      await q("DETACH DATABASE dumplings_archive");
      if (!copied) rmSync(file, { force: true }); // a partial archive never stays behind
    }
  }

  private async latestStep(query: SqlQuery, workflowId: string, lock = ""): Promise<number | null> {
    const select = `SELECT latest_step FROM ${this.workflows} WHERE workflow_id = $1${lock}`;
    const r = await query(select, [workflowId]);
    if (r.rows[0]) return num(r.rows[0].latest_step);
    // Only in a write: a workflow written in the original layout is adopted by giving it its summary row (its
    // snapshot rows are left as they are), then compared like any other; the re-read under the lock sees a
    // concurrent adopter's row.
    const s = await this.originalSummary(query, workflowId);
    if (!s) return null;
    await query(
      `INSERT INTO ${this.workflows} (${SUMMARY_COLUMNS}) VALUES (${placeholders(9)}) ON CONFLICT (workflow_id) DO NOTHING`,
      [s.workflowId, s.sessionId, s.status, s.latestStep, s.currentNode, s.latestStep, null, s.createdAt, s.updatedAt],
    );
    const again = await query(select, [workflowId]);
    return again.rows[0] ? num(again.rows[0].latest_step) : null;
  }

  /**
   * The summary of a workflow written in the original layout (no summary row; its snapshots in the
   * single `workflow_snapshots` table, `state_json` snake_case), from its first and newest rows.
   */
  private async originalSummary(query: SqlQuery, workflowId: string): Promise<WorkflowSummary | undefined> {
    const row = (order: "ASC" | "DESC") =>
      query(
        `SELECT ${SNAPSHOT_COLUMNS} FROM ${this.snapshots} WHERE workflow_id = $1 ORDER BY step_index ${order} LIMIT 1`,
        [workflowId],
      );
    const newest = (await row("DESC")).rows[0];
    if (!newest) return undefined;
    const fields = originalSummaryFields(text(newest.state_json));
    if (!fields) return undefined;
    const first = (await row("ASC")).rows[0] ?? newest;
    const latest = toSnapshot(newest);
    return {
      workflowId,
      sessionId: fields.sessionId,
      status: fields.finished ? "finished" : "running",
      latestStep: latest.stepIndex,
      currentNode: fields.currentNode,
      parentWorkflowId: null,
      createdAt: toSnapshot(first).createdAt,
      updatedAt: latest.createdAt,
    };
  }

  private listQuery(query: { status?: WorkflowRowStatus; limit: number; after?: ListCursor }): [string, unknown[]] {
    const where: string[] = [];
    const values: unknown[] = [];
    if (query.status !== undefined) {
      values.push(query.status);
      where.push(`status = $${values.length}`);
    }
    if (query.after) {
      values.push(query.after.updatedAt, query.after.workflowId);
      where.push(`(updated_at, workflow_id) < ($${values.length - 1}, $${values.length})`);
    }
    values.push(query.limit);
    return [
      `SELECT ${SUMMARY_COLUMNS} FROM ${this.workflows} ${where.length ? `WHERE ${where.join(" AND ")}` : ""}
       ORDER BY updated_at DESC, workflow_id DESC LIMIT $${values.length}`,
      values,
    ];
  }
}
