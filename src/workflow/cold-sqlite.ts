/**
 * SQLite cold store for workflow checkpoints (the embedded default), through
 * `better-sqlite3`.
 *
 * WAL journal, `synchronous = FULL` (a checkpoint is durable once `write`
 * returns), `busy_timeout` so several processes can share the file, and
 * `BEGIN IMMEDIATE` transactions so the compare-and-set on a workflow's
 * latest step is serialised across processes. New files are created with
 * `auto_vacuum = INCREMENTAL`, so {@link SqliteColdStore.prune} returns
 * freed pages to the file system without a full `VACUUM`.
 *
 * @module
 */
import { mkdirSync } from "node:fs";
import path from "node:path";
import Database from "better-sqlite3";
import { BackendError, ConflictError } from "../core/errors.js";
import type {
  ColdStore,
  IdempotencyRecord,
  ListCursor,
  SnapshotWrite,
  StepErrorRecord,
  StoredSnapshot,
  WorkflowRowStatus,
  WorkflowSummary,
} from "./cold.js";

/** Options of {@link SqliteColdStore}. */
export interface SqliteColdStoreOptions {
  /** Database file path (created with its directory). Ignored when `db` is given. */
  path?: string;
  /** An open better-sqlite3 database to use (left open by `close()`). */
  db?: Database.Database;
  /** Milliseconds to wait for another process's write lock. @default 5000 */
  busyTimeoutMs?: number;
}

interface SnapshotRow {
  workflow_id: string;
  step_index: number;
  node_name: string;
  state_json: string;
  created_at: number;
}

interface SummaryRow {
  workflow_id: string;
  session_id: string;
  status: WorkflowRowStatus;
  latest_step: number;
  current_node: string;
  parent_workflow_id: string | null;
  created_at: number;
  updated_at: number;
}

const SCHEMA = `
CREATE TABLE IF NOT EXISTS workflow_snapshots (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  workflow_id TEXT NOT NULL,
  step_index INTEGER NOT NULL,
  node_name TEXT NOT NULL,
  state_json TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  UNIQUE (workflow_id, step_index)
);
CREATE INDEX IF NOT EXISTS workflow_snapshots_created_at ON workflow_snapshots (created_at);
CREATE TABLE IF NOT EXISTS workflows (
  workflow_id TEXT PRIMARY KEY,
  session_id TEXT NOT NULL,
  status TEXT NOT NULL,
  latest_step INTEGER NOT NULL,
  current_node TEXT NOT NULL,
  active_step INTEGER NOT NULL,
  parent_workflow_id TEXT,
  created_at INTEGER NOT NULL,
  updated_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS workflows_status_updated ON workflows (status, updated_at DESC, workflow_id DESC);
CREATE INDEX IF NOT EXISTS workflows_updated ON workflows (updated_at DESC, workflow_id DESC);
CREATE TABLE IF NOT EXISTS workflow_step_errors (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  workflow_id TEXT NOT NULL,
  step_index INTEGER NOT NULL,
  node_name TEXT NOT NULL,
  error_json TEXT NOT NULL,
  created_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS workflow_step_errors_workflow ON workflow_step_errors (workflow_id, step_index);
CREATE TABLE IF NOT EXISTS workflow_idempotency (
  idem_key TEXT PRIMARY KEY,
  workflow_id TEXT NOT NULL,
  step_index INTEGER NOT NULL,
  name TEXT NOT NULL,
  status TEXT NOT NULL CHECK (status IN ('started', 'finished')),
  result_json TEXT,
  started_at INTEGER NOT NULL,
  finished_at INTEGER
);
CREATE INDEX IF NOT EXISTS workflow_idempotency_workflow ON workflow_idempotency (workflow_id, step_index);
CREATE TABLE IF NOT EXISTS workflow_blob_refs (
  workflow_id TEXT NOT NULL,
  step_index INTEGER NOT NULL,
  ref TEXT NOT NULL,
  PRIMARY KEY (workflow_id, step_index, ref)
);
CREATE INDEX IF NOT EXISTS workflow_blob_refs_ref ON workflow_blob_refs (ref);
`;

const toSnapshot = (r: SnapshotRow): StoredSnapshot => ({
  workflowId: r.workflow_id,
  stepIndex: r.step_index,
  nodeName: r.node_name,
  stateJson: r.state_json,
  createdAt: r.created_at,
});

const toSummary = (r: SummaryRow): WorkflowSummary => ({
  workflowId: r.workflow_id,
  sessionId: r.session_id,
  status: r.status,
  latestStep: r.latest_step,
  currentNode: r.current_node,
  parentWorkflowId: r.parent_workflow_id,
  createdAt: r.created_at,
  updatedAt: r.updated_at,
});

/**
 * Cold checkpoint store in an SQLite file.
 *
 * @example
 * const cold = new SqliteColdStore({ path: "./.dumplingsAI_workflows/checkpoints.db" });
 * const store = await CheckpointStore.open({ cold });
 */
export class SqliteColdStore implements ColdStore {
  readonly name = "sqlite";
  /** The underlying database (for advanced use and tests). */
  readonly db: Database.Database;
  private readonly owned: boolean;
  private ready = false;

  /**
   * @param options - `path` of the database file or an injected `db`
   * @throws {BackendError} when the file cannot be opened
   */
  constructor(options: SqliteColdStoreOptions) {
    try {
      if (options.db) {
        this.db = options.db;
        this.owned = false;
      } else {
        if (!options.path) throw new Error("either path or db is required");
        if (options.path !== ":memory:") mkdirSync(path.dirname(path.resolve(options.path)), { recursive: true });
        this.db = new Database(options.path);
        this.owned = true;
      }
      this.db.pragma(`busy_timeout = ${options.busyTimeoutMs ?? 5000}`);
    } catch (e) {
      throw new BackendError("sqlite", `cannot open workflow database ${options.path ?? "(injected)"}`, { cause: e });
    }
  }

  private guard<T>(what: string, key: string | undefined, fn: () => T): T {
    try {
      return fn();
    } catch (e) {
      if (e instanceof ConflictError || e instanceof BackendError) throw e;
      throw new BackendError("sqlite", what, { key, cause: e });
    }
  }

  /** {@inheritDoc ColdStore.init} */
  async init(): Promise<void> {
    if (this.ready) return;
    this.guard("cannot create workflow tables", undefined, () => {
      const fresh = !this.db.prepare("SELECT 1 FROM sqlite_master WHERE name = 'workflow_snapshots'").get();
      if (fresh && this.db.pragma("auto_vacuum", { simple: true }) === 0) {
        // Takes effect only before the first table exists; a VACUUM converts an empty database.
        this.db.pragma("auto_vacuum = INCREMENTAL");
        this.db.exec("VACUUM");
      }
      this.db.pragma("journal_mode = WAL");
      this.db.pragma("synchronous = FULL");
      this.db.exec(SCHEMA);
    });
    this.ready = true;
  }

  /** {@inheritDoc ColdStore.write} */
  async write(row: SnapshotWrite, expectedLatest: number | null | undefined): Promise<void> {
    const db = this.db;
    const tx = db.transaction(() => {
      if (expectedLatest !== undefined) {
        const cur = db.prepare("SELECT latest_step FROM workflows WHERE workflow_id = ?").get(row.workflowId) as
          | { latest_step: number }
          | undefined;
        const actual = cur ? cur.latest_step : null;
        if (actual !== expectedLatest) throw new ConflictError(row.workflowId, expectedLatest, actual, "sqlite");
      }
      db.prepare(
        `INSERT INTO workflow_snapshots (workflow_id, step_index, node_name, state_json, created_at)
         VALUES (?, ?, ?, ?, ?)
         ON CONFLICT (workflow_id, step_index) DO UPDATE SET
           node_name = excluded.node_name, state_json = excluded.state_json, created_at = excluded.created_at`,
      ).run(row.workflowId, row.stepIndex, row.nodeName, row.stateJson, row.createdAt);
      db.prepare(
        `INSERT INTO workflows (workflow_id, session_id, status, latest_step, current_node, active_step, parent_workflow_id, created_at, updated_at)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
         ON CONFLICT (workflow_id) DO UPDATE SET
           session_id = excluded.session_id, status = excluded.status, latest_step = excluded.latest_step,
           current_node = excluded.current_node, active_step = excluded.active_step, updated_at = excluded.updated_at
         WHERE excluded.latest_step >= workflows.latest_step`,
      ).run(
        row.workflowId,
        row.sessionId,
        row.status,
        row.stepIndex,
        row.currentNode,
        row.activeStep,
        row.parentWorkflowId,
        row.createdAt,
        row.createdAt,
      );
      db.prepare("DELETE FROM workflow_blob_refs WHERE workflow_id = ? AND step_index = ?").run(
        row.workflowId,
        row.stepIndex,
      );
      const ins = db.prepare(
        "INSERT OR IGNORE INTO workflow_blob_refs (workflow_id, step_index, ref) VALUES (?, ?, ?)",
      );
      for (const ref of row.blobRefs) ins.run(row.workflowId, row.stepIndex, ref);
    });
    this.guard(`cannot write checkpoint ${row.stepIndex} of workflow "${row.workflowId}"`, row.workflowId, () =>
      tx.immediate(),
    );
  }

  /** {@inheritDoc ColdStore.read} */
  async read(workflowId: string, stepIndex: number): Promise<StoredSnapshot | undefined> {
    const r = this.guard(`cannot read step ${stepIndex} of workflow "${workflowId}"`, workflowId, () =>
      this.db
        .prepare(
          "SELECT workflow_id, step_index, node_name, state_json, created_at FROM workflow_snapshots WHERE workflow_id = ? AND step_index = ?",
        )
        .get(workflowId, stepIndex),
    ) as SnapshotRow | undefined;
    return r && toSnapshot(r);
  }

  /** {@inheritDoc ColdStore.latest} */
  async latest(workflowId: string): Promise<StoredSnapshot | undefined> {
    const r = this.guard(`cannot read latest checkpoint of workflow "${workflowId}"`, workflowId, () =>
      this.db
        .prepare(
          "SELECT workflow_id, step_index, node_name, state_json, created_at FROM workflow_snapshots WHERE workflow_id = ? ORDER BY step_index DESC LIMIT 1",
        )
        .get(workflowId),
    ) as SnapshotRow | undefined;
    return r && toSnapshot(r);
  }

  /** {@inheritDoc ColdStore.summary} */
  async summary(workflowId: string): Promise<WorkflowSummary | undefined> {
    const r = this.guard(`cannot read workflow "${workflowId}"`, workflowId, () =>
      this.db.prepare("SELECT * FROM workflows WHERE workflow_id = ?").get(workflowId),
    ) as SummaryRow | undefined;
    return r && toSummary(r);
  }

  /** {@inheritDoc ColdStore.history} */
  async history(workflowId: string): Promise<StoredSnapshot[]> {
    const rows = this.guard(`cannot read history of workflow "${workflowId}"`, workflowId, () =>
      this.db
        .prepare(
          "SELECT workflow_id, step_index, node_name, state_json, created_at FROM workflow_snapshots WHERE workflow_id = ? ORDER BY step_index",
        )
        .all(workflowId),
    ) as SnapshotRow[];
    return rows.map(toSnapshot);
  }

  private listSql(status: boolean, after: boolean): string {
    const where: string[] = [];
    if (status) where.push("status = @status");
    if (after) where.push("(updated_at < @u OR (updated_at = @u AND workflow_id < @id))");
    return `SELECT * FROM workflows ${where.length ? `WHERE ${where.join(" AND ")}` : ""}
      ORDER BY updated_at DESC, workflow_id DESC LIMIT @limit`;
  }

  /** {@inheritDoc ColdStore.list} */
  async list(query: { status?: WorkflowRowStatus; limit: number; after?: ListCursor }): Promise<WorkflowSummary[]> {
    const rows = this.guard("cannot list workflows", undefined, () =>
      this.db.prepare(this.listSql(query.status !== undefined, query.after !== undefined)).all({
        status: query.status,
        u: query.after?.updatedAt,
        id: query.after?.workflowId,
        limit: query.limit,
      }),
    ) as SummaryRow[];
    return rows.map(toSummary);
  }

  /** {@inheritDoc ColdStore.explainList} */
  async explainList(status?: WorkflowRowStatus): Promise<string> {
    const rows = this.db
      .prepare(`EXPLAIN QUERY PLAN ${this.listSql(status !== undefined, true)}`)
      .all({ status, u: 0, id: "", limit: 10 }) as { detail: string }[];
    return rows.map((r) => r.detail).join("\n");
  }

  private orphans(refs: string[]): string[] {
    const still = this.db.prepare("SELECT 1 FROM workflow_blob_refs WHERE ref = ? LIMIT 1");
    return [...new Set(refs)].filter((ref) => !still.get(ref));
  }

  /** {@inheritDoc ColdStore.deleteWorkflow} */
  async deleteWorkflow(workflowId: string): Promise<{ existed: boolean; orphanRefs: string[] }> {
    const db = this.db;
    const tx = db.transaction(() => {
      const refs = (
        db.prepare("SELECT DISTINCT ref FROM workflow_blob_refs WHERE workflow_id = ?").all(workflowId) as {
          ref: string;
        }[]
      ).map((r) => r.ref);
      const a = db.prepare("DELETE FROM workflow_snapshots WHERE workflow_id = ?").run(workflowId).changes;
      const b = db.prepare("DELETE FROM workflows WHERE workflow_id = ?").run(workflowId).changes;
      db.prepare("DELETE FROM workflow_step_errors WHERE workflow_id = ?").run(workflowId);
      db.prepare("DELETE FROM workflow_idempotency WHERE workflow_id = ?").run(workflowId);
      db.prepare("DELETE FROM workflow_blob_refs WHERE workflow_id = ?").run(workflowId);
      return { existed: a + b > 0, orphanRefs: this.orphans(refs) };
    });
    return this.guard(`cannot delete workflow "${workflowId}"`, workflowId, () => tx.immediate());
  }

  /** {@inheritDoc ColdStore.prune} */
  async prune(cutoff: number, keepLast: number): Promise<{ deletedSnapshots: number; orphanRefs: string[] }> {
    const db = this.db;
    const tx = db.transaction(() => {
      const doomed = `FROM workflow_snapshots s WHERE s.created_at < @cutoff AND s.step_index <=
        (SELECT w.latest_step FROM workflows w WHERE w.workflow_id = s.workflow_id) - @keep`;
      const refs = (
        db
          .prepare(
            `SELECT DISTINCT r.ref FROM workflow_blob_refs r JOIN workflow_snapshots s
             ON s.workflow_id = r.workflow_id AND s.step_index = r.step_index
             WHERE s.created_at < @cutoff AND s.step_index <=
               (SELECT w.latest_step FROM workflows w WHERE w.workflow_id = s.workflow_id) - @keep`,
          )
          .all({ cutoff, keep: keepLast }) as { ref: string }[]
      ).map((r) => r.ref);
      const deleted = db
        .prepare(`DELETE FROM workflow_snapshots WHERE id IN (SELECT s.id ${doomed})`)
        .run({ cutoff, keep: keepLast }).changes;
      db.exec(`DELETE FROM workflow_blob_refs WHERE NOT EXISTS (SELECT 1 FROM workflow_snapshots s
        WHERE s.workflow_id = workflow_blob_refs.workflow_id AND s.step_index = workflow_blob_refs.step_index)`);
      // Side-effect records of node runs that have finished (before the active step) are never replayed again.
      db.prepare(
        `DELETE FROM workflow_idempotency WHERE started_at < @cutoff AND step_index <
          (SELECT w.active_step FROM workflows w WHERE w.workflow_id = workflow_idempotency.workflow_id)`,
      ).run({ cutoff });
      return { deletedSnapshots: deleted, orphanRefs: this.orphans(refs) };
    });
    const result = this.guard("cannot prune workflow snapshots", undefined, () => tx.immediate());
    this.guard("cannot run incremental vacuum", undefined, () => this.db.pragma("incremental_vacuum"));
    return result;
  }

  /** {@inheritDoc ColdStore.recordError} */
  async recordError(record: StepErrorRecord): Promise<void> {
    const db = this.db;
    const tx = db.transaction(() => {
      db.prepare(
        "INSERT INTO workflow_step_errors (workflow_id, step_index, node_name, error_json, created_at) VALUES (?, ?, ?, ?, ?)",
      ).run(record.workflowId, record.stepIndex, record.nodeName, JSON.stringify(record.error), record.createdAt);
      db.prepare(
        "UPDATE workflows SET status = 'failed', updated_at = ? WHERE workflow_id = ? AND latest_step = ?",
      ).run(record.createdAt, record.workflowId, record.stepIndex);
    });
    this.guard(`cannot record the error of workflow "${record.workflowId}"`, record.workflowId, () => tx.immediate());
  }

  /** {@inheritDoc ColdStore.errors} */
  async errors(workflowId: string): Promise<StepErrorRecord[]> {
    const rows = this.guard(`cannot read errors of workflow "${workflowId}"`, workflowId, () =>
      this.db
        .prepare(
          "SELECT workflow_id, step_index, node_name, error_json, created_at FROM workflow_step_errors WHERE workflow_id = ? ORDER BY id",
        )
        .all(workflowId),
    ) as { workflow_id: string; step_index: number; node_name: string; error_json: string; created_at: number }[];
    return rows.map((r) => ({
      workflowId: r.workflow_id,
      stepIndex: r.step_index,
      nodeName: r.node_name,
      error: JSON.parse(r.error_json),
      createdAt: r.created_at,
    }));
  }

  /** {@inheritDoc ColdStore.idempotencyBegin} */
  async idempotencyBegin(
    key: string,
    info: { workflowId: string; stepIndex: number; name: string; now: number },
  ): Promise<IdempotencyRecord | undefined> {
    const db = this.db;
    const tx = db.transaction(() => {
      const inserted = db
        .prepare(
          `INSERT INTO workflow_idempotency (idem_key, workflow_id, step_index, name, status, started_at)
           VALUES (?, ?, ?, ?, 'started', ?) ON CONFLICT (idem_key) DO NOTHING`,
        )
        .run(key, info.workflowId, info.stepIndex, info.name, info.now).changes;
      if (inserted === 1) return undefined;
      const r = db.prepare("SELECT * FROM workflow_idempotency WHERE idem_key = ?").get(key) as {
        idem_key: string;
        workflow_id: string;
        step_index: number;
        name: string;
        status: "started" | "finished";
        result_json: string | null;
        started_at: number;
        finished_at: number | null;
      };
      return {
        key: r.idem_key,
        workflowId: r.workflow_id,
        stepIndex: r.step_index,
        name: r.name,
        status: r.status,
        resultJson: r.result_json,
        startedAt: r.started_at,
        finishedAt: r.finished_at,
      };
    });
    return this.guard(`cannot record the start of side effect "${key}"`, key, () => tx.immediate());
  }

  /** {@inheritDoc ColdStore.idempotencyFinish} */
  async idempotencyFinish(key: string, resultJson: string, now: number): Promise<void> {
    this.guard(`cannot record the result of side effect "${key}"`, key, () =>
      this.db
        .prepare(
          "UPDATE workflow_idempotency SET status = 'finished', result_json = ?, finished_at = ? WHERE idem_key = ?",
        )
        .run(resultJson, now, key),
    );
  }

  /** {@inheritDoc ColdStore.idempotencyAbandon} */
  async idempotencyAbandon(key: string): Promise<void> {
    this.guard(`cannot clear side effect "${key}"`, key, () =>
      this.db.prepare("DELETE FROM workflow_idempotency WHERE idem_key = ? AND status = 'started'").run(key),
    );
  }

  /** {@inheritDoc ColdStore.close} */
  async close(): Promise<void> {
    if (this.owned && this.db.open) this.db.close();
  }
}
