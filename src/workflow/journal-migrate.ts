/**
 * The one-time move of a workflow archive written by an earlier release into
 * the durable journal of the same SQLite file (docs/one-engine.md, part 3):
 * component `workflow` of the file's migration ledger, version 2.
 *
 * It reads every layout earlier releases wrote — the original design's single
 * `workflow_snapshots` table (snake_case states, float-second or text times),
 * dumplings-ai 0.1's tables (`workflows`, `workflow_step_errors`,
 * `workflow_idempotency`, `workflow_blob_refs`, `workflow_blobs`,
 * `workflow_leases`, `workflow_lease_floor`) and the month tables
 * `workflow_snapshots_YYYY_MM` — and writes, per workflow `W`, run `W`
 * (`workflow` = `graph`, its status, its fencing token at least the highest
 * token its lease ever had, so no token goes back) with its checkpoints
 * (`checkpoint:<k>:<N>`), side-effect records (`effect:<s>:<i>:<name>`,
 * `started` ones stay started: the next holder reconciles them) and node
 * failures (`error:<k>:<N>`). Then the old tables are dropped and
 * `workflow_snapshots` becomes a view over the checkpoint steps, so the
 * original design's query keeps returning a workflow's newest checkpoint.
 *
 * A run of the same id already in the journal (a durable run) is left alone
 * and the workflow's rows are not copied over it.
 *
 * The migration runs inside the ledger's transaction: a crash leaves the file
 * as it was, and the next open runs it again.
 *
 * @module
 */

import type { JsonValue } from "../core/json.js";
import { hashInput } from "../durable/journal.js";
import {
  CHECKPOINT_STEP,
  DEFAULT_GRAPH_WORKFLOW,
  EFFECT_STEP,
  ERROR_STEP,
  effectRunId,
  interruptSignalOf,
  journalRef,
} from "./journal-store.js";
import { rowCreatedAtMs } from "./original.js";

/** The part of a better-sqlite3 database the migration uses (no driver import). */
export interface MigrationDatabase {
  prepare(sql: string): {
    all(...values: unknown[]): unknown[];
    get(...values: unknown[]): unknown;
    run(...values: unknown[]): unknown;
  };
  exec(sql: string): unknown;
}

/** One versioned migration in the shape the SQLite driver's ledger takes. */
interface Migration {
  version: number;
  name: string;
  up: (db: MigrationDatabase) => void;
}

type Row = Record<string, unknown>;
const MONTH_TABLE = /^workflow_snapshots_\d{4}_\d{2}$/;
const OLD_TABLES = [
  "workflow_blobs",
  "workflows",
  "workflow_step_errors",
  "workflow_idempotency",
  "workflow_blob_refs",
  "workflow_leases",
  "workflow_lease_floor",
];
const NULL_HASH = hashInput(null);

/**
 * SQL of the `workflow_snapshots` view over the journal's checkpoint steps (the original design's
 * columns): one row per workflow and step index, the newest record of it (a checkpoint written again
 * at one index is a second record), so the original design's
 * `ORDER BY step_index DESC LIMIT 1` names one row.
 */
export function snapshotViewSql(stepsTable: string): string {
  const rest = `substr(name, ${CHECKPOINT_STEP.length + 1})`;
  return `CREATE VIEW IF NOT EXISTS workflow_snapshots AS
    SELECT id, workflow_id, step_index, node_name, state_json, created_at FROM (
      SELECT seq AS id, run_id AS workflow_id,
        CAST(substr(${rest}, 1, instr(${rest}, ':') - 1) AS INTEGER) AS step_index,
        substr(${rest}, instr(${rest}, ':') + 1) AS node_name,
        output_json AS state_json, started_at AS created_at,
        ROW_NUMBER() OVER (PARTITION BY run_id, substr(${rest}, 1, instr(${rest}, ':') - 1) ORDER BY seq DESC) AS newest
      FROM ${stepsTable} WHERE name GLOB '${CHECKPOINT_STEP}*' AND status = 'completed')
    WHERE newest = 1`;
}

const RUN_STATUS: Record<string, string> = {
  running: "running",
  waiting: "waiting",
  finished: "completed",
  failed: "failed",
};

/**
 * Whether a file holds workflow tables of an earlier release (then an open that must not create
 * a store still opens it, and migrates it).
 */
export function hasOldWorkflowTables(db: { prepare(sql: string): { get(): unknown } }): boolean {
  return (
    db
      .prepare(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND (name IN ('workflow_snapshots', 'workflows') OR name GLOB 'workflow_snapshots_[0-9]*')",
      )
      .get() !== undefined
  );
}

/**
 * The `workflow` component of an SQLite file's ledger, run after the journal's own migrations:
 * version 1 (the tables of 0.1) creates nothing any more; version 2 moves whatever an earlier
 * release wrote into the journal and leaves the `workflow_snapshots` view.
 *
 * @param prefix - the journal's table prefix (`durable_`)
 * @returns the component, in the shape of the SQLite driver's migrations
 */
export function workflowJournalMigrations(prefix: string): {
  component: string;
  migrations: Migration[];
  present(db: { prepare(sql: string): { get(): unknown } }): boolean;
} {
  return {
    component: "workflow",
    migrations: [
      { version: 1, name: "workflow tables", up: () => undefined },
      { version: 2, name: "workflow tables moved into the journal", up: (db) => migrate(db, prefix) },
      {
        version: 3,
        name: "workflow_snapshots view: one row per step index",
        up: (db) => {
          db.exec("DROP VIEW IF EXISTS workflow_snapshots");
          db.exec(snapshotViewSql(`"${prefix}steps"`));
        },
      },
    ],
    present: hasOldWorkflowTables,
  };
}

function tableNames(db: MigrationDatabase): string[] {
  return (db.prepare("SELECT name FROM sqlite_master WHERE type = 'table'").all() as { name: string }[]).map(
    (r) => r.name,
  );
}

/** Moves every workflow of the old tables into the journal, drops them, creates the view. */
function migrate(db: MigrationDatabase, prefix: string): void {
  const runs = `"${prefix}runs"`;
  const steps = `"${prefix}steps"`;
  const tables = new Set(tableNames(db));
  const has = (t: string) => tables.has(t);
  const snapshotTables = [
    ...(has("workflow_snapshots") ? ["workflow_snapshots"] : []),
    ...[...tables].filter((t) => MONTH_TABLE.test(t)).sort(),
  ];
  const all = (sql: string, ...values: unknown[]) => db.prepare(sql).all(...values) as Row[];

  // Every workflow id any old table names.
  const ids = new Set<string>();
  for (const t of snapshotTables)
    for (const r of all(`SELECT DISTINCT workflow_id FROM "${t}"`)) ids.add(String(r.workflow_id));
  if (has("workflows")) for (const r of all("SELECT workflow_id FROM workflows")) ids.add(String(r.workflow_id));
  if (has("workflow_leases"))
    for (const r of all("SELECT workflow_id FROM workflow_leases")) ids.add(String(r.workflow_id));
  const floor = has("workflow_lease_floor")
    ? Number((db.prepare("SELECT MAX(fencing_token) AS t FROM workflow_lease_floor").get() as Row | undefined)?.t ?? 0)
    : 0;

  const insertRun = db.prepare(
    `INSERT INTO ${runs} (run_id, workflow, status, input_json, error_json, waiting_for, fencing_token, created_at, updated_at)
     VALUES (?, ?, ?, 'null', ?, ?, ?, ?, ?)`,
  );
  const insertStep = db.prepare(
    `INSERT INTO ${steps} (run_id, seq, name, input_hash, status, output_json, error_json, attempt, started_at, finished_at, fencing_token)
     VALUES (?, ?, ?, ?, ?, ?, NULL, 1, ?, ?, ?)`,
  );
  const runExists = db.prepare(`SELECT 1 FROM ${runs} WHERE run_id = ?`);
  // Blobs the old table held: copied once, referenced by the checkpoints that name them.
  const oldBlobs = has("workflow_blobs");
  const copyBlob = oldBlobs
    ? db.prepare(
        `INSERT INTO "${prefix}blobs" (ref, bytes, size, created_at)
         SELECT substr(ref, 8), bytes, size, created_at FROM workflow_blobs WHERE ref = ?
         ON CONFLICT (ref) DO NOTHING`,
      )
    : undefined;
  const blobHeld = db.prepare(`SELECT 1 FROM "${prefix}blobs" WHERE ref = ?`);
  const insertRef = db.prepare(
    `INSERT INTO "${prefix}blob_refs" (run_id, seq, ref) VALUES (?, ?, ?) ON CONFLICT DO NOTHING`,
  );
  const nextSeqOf = db.prepare(`SELECT COALESCE(MAX(seq) + 1, 0) AS n FROM ${steps} WHERE run_id = ?`);
  // Times of this package's own tables: integer ms (only snapshot rows may hold the original's seconds or text).
  const time = (v: unknown): number => {
    const ms = Number(v);
    return Number.isFinite(ms) ? ms : 0;
  };

  for (const id of ids) {
    if (runExists.get(id) !== undefined) continue; // a durable run of that id: not overwritten
    // Checkpoints, one per step index (a later table's row of an index wins: it was written later).
    const byStep = new Map<number, Row>();
    for (const t of snapshotTables) {
      for (const r of all(
        `SELECT step_index, node_name, state_json, created_at FROM "${t}" WHERE workflow_id = ? ORDER BY step_index, id`,
        id,
      ))
        byStep.set(Number(r.step_index), r);
    }
    const checkpoints = [...byStep.entries()].sort((a, b) => a[0] - b[0]);
    const summary = has("workflows")
      ? (db.prepare("SELECT * FROM workflows WHERE workflow_id = ?").get(id) as Row | undefined)
      : undefined;
    const lease = has("workflow_leases")
      ? (db.prepare("SELECT fencing_token FROM workflow_leases WHERE workflow_id = ?").get(id) as Row | undefined)
      : undefined;
    const token = Math.max(floor, Number(lease?.fencing_token ?? 0));
    const errors = has("workflow_step_errors")
      ? all(
          "SELECT step_index, node_name, error_json, created_at FROM workflow_step_errors WHERE workflow_id = ? ORDER BY id",
          id,
        )
      : [];
    const newest = checkpoints.at(-1)?.[1];
    let status = "pending"; // a lease without checkpoints: kept for its token only
    let waitingFor: string | null = null;
    if (newest) {
      const state = parseObject(String(newest.state_json));
      status = summary
        ? (RUN_STATUS[String(summary.status)] ?? "running")
        : state?.is_finished === true || state?.isFinished === true
          ? "completed"
          : "running";
      if (status === "waiting") waitingFor = interruptSignalOf(state as JsonValue | undefined) ?? null;
    }
    const lastError = errors.at(-1);
    const errorJson =
      status === "failed" && lastError ? JSON.stringify(recordedError(String(lastError.error_json))) : null;
    const first = checkpoints[0]?.[1];
    const createdAt = summary
      ? time(summary.created_at)
      : first
        ? rowCreatedAtMs(first.created_at, String(first.state_json))
        : 0;
    const updatedAt = summary
      ? time(summary.updated_at)
      : newest
        ? rowCreatedAtMs(newest.created_at, String(newest.state_json))
        : 0;
    insertRun.run(id, DEFAULT_GRAPH_WORKFLOW, status, errorJson, waitingFor, token, createdAt || 0, updatedAt || 0);
    let seq = 0;
    for (const [k, r] of checkpoints) {
      const at = rowCreatedAtMs(r.created_at, String(r.state_json));
      const ms = Number.isFinite(at) ? at : 0;
      for (const ref of blobRefsOf(String(r.state_json))) {
        copyBlob?.run(ref);
        // A ref the database never held (0.1 kept blobs in a directory) is read from there, unreferenced here.
        if (blobHeld.get(journalRef(ref)) !== undefined) insertRef.run(id, seq, journalRef(ref));
      }
      insertStep.run(
        id,
        seq++,
        `${CHECKPOINT_STEP}${k}:${String(r.node_name)}`,
        NULL_HASH,
        "completed",
        String(r.state_json),
        ms,
        ms,
        token,
      );
    }
    for (const e of errors) {
      const at = time(e.created_at);
      insertStep.run(
        id,
        seq++,
        `${ERROR_STEP}${Number(e.step_index)}:${String(e.node_name)}`,
        NULL_HASH,
        "completed",
        String(e.error_json),
        at,
        at,
        token,
      );
    }
  }

  // Side-effect records: in the run their key names (the runner's keys are `<workflowId>:<step>:<call>`).
  if (has("workflow_idempotency")) {
    for (const r of all("SELECT * FROM workflow_idempotency ORDER BY started_at, idem_key")) {
      const key = String(r.idem_key);
      const workflowId = String(r.workflow_id);
      const { runId, part } = effectRunId(key, workflowId);
      if (runExists.get(runId) === undefined) {
        insertRun.run(runId, DEFAULT_GRAPH_WORKFLOW, "pending", null, null, 0, time(r.started_at), time(r.started_at));
      }
      const seq = Number((nextSeqOf.get(runId) as Row).n);
      const done = r.status === "finished";
      const token = Number(
        (db.prepare(`SELECT fencing_token FROM ${runs} WHERE run_id = ?`).get(runId) as Row).fencing_token,
      );
      insertStep.run(
        runId,
        seq,
        `${EFFECT_STEP}${part}:${String(r.name)}`,
        hashInput(key),
        done ? "completed" : "started",
        done ? String(r.result_json ?? "{}") : null,
        time(r.started_at),
        done ? time(r.finished_at) : null,
        token,
      );
    }
  }

  for (const t of [...snapshotTables, ...OLD_TABLES.filter(has)]) db.exec(`DROP TABLE "${t}"`);
  db.exec(snapshotViewSql(steps));
}

/** The blob references (`{ "$dumplings_blob": ref }`) of a stored state's top-level `sharedMemory`/`shared_memory` values. */
function blobRefsOf(stateJson: string): string[] {
  const state = parseObject(stateJson);
  const memory = (state?.sharedMemory ?? state?.shared_memory) as Row | undefined;
  if (!memory || typeof memory !== "object") return [];
  const out: string[] = [];
  for (const v of Object.values(memory)) {
    const ref = v !== null && typeof v === "object" ? (v as Row).$dumplings_blob : undefined;
    if (typeof ref === "string" && /^sha256:[0-9a-f]{64}$/.test(ref)) out.push(ref);
  }
  return out;
}

function parseObject(text: string): Row | undefined {
  try {
    const v = JSON.parse(text) as unknown;
    return v !== null && typeof v === "object" && !Array.isArray(v) ? (v as Row) : undefined;
  } catch {
    return undefined;
  }
}

/** A stored node error (`{ name, message, code? }` or anything) as a journal `RecordedError`. */
function recordedError(text: string): { name: string; message: string; code?: string } {
  const e = parseObject(text) ?? {};
  return {
    name: typeof e.name === "string" ? e.name : "Error",
    message: typeof e.message === "string" ? e.message : text,
    ...(typeof e.code === "string" ? { code: e.code } : {}),
  };
}
