/**
 * The one-time move of a workflow archive written by an earlier release into
 * the durable journal of the same database (docs/one-engine.md, part 3):
 * component `workflow` of the migration ledger, version 2, of an SQLite file
 * ({@link workflowJournalMigrations}) or a PostgreSQL schema
 * ({@link postgresWorkflowJournalMigrations}).
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
 * A run of the same id already in the journal (a durable run) is left alone:
 * neither the workflow's rows nor side-effect records of its keys are copied
 * into it.
 *
 * What each workflow becomes is decided once, by a pure planner over the rows
 * read from the old tables ({@link planWorkflow}, {@link planEffect}); each
 * dialect only reads those rows and inserts the plan: SQLite synchronously,
 * PostgreSQL awaited (a migration function of the PostgreSQL driver).
 *
 * The migration runs inside the ledger's transaction (on PostgreSQL under the
 * schema's advisory lock, so processes opening one schema together move it
 * once): a crash leaves the database as it was, and the next open runs it
 * again.
 *
 * @module
 */

import type { JsonValue } from "../../core/json.js";
import type { PgQuery, PostgresMigrations } from "../../drivers/postgres.js";
import { hashInput } from "../journal.js";
import {
  CHECKPOINT_STEP,
  DEFAULT_GRAPH_WORKFLOW,
  EFFECT_STEP,
  ERROR_STEP,
  effectRunId,
  interruptSignalOf,
  journalRef,
  resumesAlone,
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

/** A row read from an old table, as the database driver returns it (PostgreSQL's BIGINTs as strings). */
export type OldRow = Record<string, unknown>;
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

// ---- the planner: what the journal gets, from rows of the old tables (no database) ----

/** The old workflow tables a database holds, as {@link oldTablesOf} sorts them. */
export interface OldTables {
  /** The snapshot tables in reading order: `workflow_snapshots` (when a table), then the month tables by name. */
  snapshots: string[];
  /** The other old tables present. */
  others: string[];
  /** Whether the database holds `table`. */
  has(table: string): boolean;
}

/**
 * Which of a database's tables are old workflow tables, in the order they are read (a later
 * snapshot table's row of a step index wins: it was written later) and dropped.
 *
 * @param names - every table of the database (the schema on PostgreSQL)
 */
export function oldTablesOf(names: Iterable<string>): OldTables {
  const tables = new Set(names);
  return {
    snapshots: [
      ...(tables.has("workflow_snapshots") ? ["workflow_snapshots"] : []),
      ...[...tables].filter((t) => MONTH_TABLE.test(t)).sort(),
    ],
    others: OLD_TABLES.filter((t) => tables.has(t)),
    has: (t) => tables.has(t),
  };
}

/** What the old tables hold of one workflow (the same columns in every dialect). */
export interface OldWorkflowRows {
  workflowId: string;
  /**
   * Its snapshot rows (`step_index`, `node_name`, `state_json`, `created_at`): each table's by
   * `step_index, id`, the tables in {@link OldTables.snapshots} order.
   */
  snapshots: readonly OldRow[];
  /** Its `workflows` row (0.1 and later), if any. */
  summary: OldRow | undefined;
  /** The `fencing_token` of its `workflow_leases` row, if any. */
  leaseToken: unknown;
  /** The token of `workflow_lease_floor` (0 when none). */
  floor: number;
  /** Its `workflow_step_errors` rows (`step_index`, `node_name`, `error_json`, `created_at`) by `id`. */
  errors: readonly OldRow[];
}

/** A run to insert into the journal's runs table (input `null`, no lease). */
export interface PlannedRun {
  runId: string;
  workflow: string;
  status: string;
  errorJson: string | null;
  waitingFor: string | null;
  fencingToken: number;
  createdAt: number;
  updatedAt: number;
}

/** A step record to insert (attempt 1, no error). */
export interface PlannedStep {
  seq: number;
  name: string;
  inputHash: string;
  status: "completed" | "started";
  outputJson: string | null;
  startedAt: number;
  finishedAt: number | null;
  fencingToken: number;
  /** A checkpoint the workflow resumes from alone (`WriteStepOptions.snapshot`): what `pruneRuns` keeps. */
  snapshot: boolean;
  /**
   * The blob references (`sha256:<hex>`) its output holds: each is copied from the old blob table
   * when that holds it, and referenced (as `<hex>`) when the journal then holds it; one the
   * database never held (0.1 kept blobs in a directory) stays unreferenced, read from there.
   */
  blobRefs: string[];
}

const RUN_STATUS: Record<string, string> = {
  running: "running",
  waiting: "waiting",
  finished: "completed",
  failed: "failed",
};

/** Times of this package's own tables: integer ms (only snapshot rows may hold the original's seconds or text). */
function time(v: unknown): number {
  const ms = Number(v);
  return Number.isFinite(ms) ? ms : 0;
}

/**
 * The run and step records of one workflow of the old tables: its checkpoints (the last row of
 * each step index), then its node failures; status, waited-for signal, times and fencing token
 * (at least the highest token its lease ever had, so no token goes back) from its summary row,
 * or from its newest state when it has none (the original design). A workflow with a lease and
 * no checkpoint is a `pending` run kept for its token.
 *
 * @param rows - what the old tables hold of it
 * @returns the run and its steps, seqs from 0
 */
export function planWorkflow(rows: OldWorkflowRows): { run: PlannedRun; steps: PlannedStep[] } {
  const byStep = new Map<number, OldRow>();
  for (const r of rows.snapshots) byStep.set(Number(r.step_index), r);
  const checkpoints = [...byStep.entries()].sort((a, b) => a[0] - b[0]);
  const { summary, errors } = rows;
  const token = Math.max(time(rows.floor), time(rows.leaseToken ?? 0));
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
  const run: PlannedRun = {
    runId: rows.workflowId,
    workflow: DEFAULT_GRAPH_WORKFLOW,
    status,
    errorJson,
    waitingFor,
    fencingToken: token,
    createdAt: createdAt || 0,
    updatedAt: updatedAt || 0,
  };
  const steps: PlannedStep[] = [];
  for (const [k, r] of checkpoints) {
    const at = rowCreatedAtMs(r.created_at, String(r.state_json));
    const ms = Number.isFinite(at) ? at : 0;
    const state = parseObject(String(r.state_json));
    steps.push({
      seq: steps.length,
      name: `${CHECKPOINT_STEP}${k}:${String(r.node_name)}`,
      inputHash: NULL_HASH,
      status: "completed",
      outputJson: String(r.state_json),
      startedAt: ms,
      finishedAt: ms,
      fencingToken: token,
      snapshot: resumesAlone((state ?? null) as JsonValue),
      blobRefs: blobRefsOf(state),
    });
  }
  for (const e of errors) {
    const at = time(e.created_at);
    steps.push({
      seq: steps.length,
      name: `${ERROR_STEP}${Number(e.step_index)}:${String(e.node_name)}`,
      inputHash: NULL_HASH,
      status: "completed",
      outputJson: String(e.error_json),
      startedAt: at,
      finishedAt: at,
      fencingToken: token,
      snapshot: false,
      blobRefs: [],
    });
  }
  return { run, steps };
}

/** The run an old side-effect row (`workflow_idempotency`) goes to: the run its key names. */
export function effectRunOf(row: OldRow): string {
  return effectRunId(String(row.idem_key), String(row.workflow_id)).runId;
}

/** The journal's run of that id as the move found it. */
export interface ExistingRun {
  /** Whether this move created it (else it was there before: a durable run of that id). */
  moved: boolean;
  fencingToken: number;
  /** Its highest seq + 1. */
  nextSeq: number;
}

/**
 * The record of one old side effect (`effect:<s>:<i>:<name>`; a `started` one stays started: the
 * next holder reconciles it), appended to the run its key names, and that run when it is
 * missing (`pending`, token 0). Nothing when the run was in the journal before the move (a
 * durable run of that id: a record appended there would break its replay).
 *
 * @param row - the `workflow_idempotency` row (rows are moved by `started_at, idem_key`)
 * @param existing - the run {@link effectRunOf} names, when the journal holds it
 */
export function planEffect(
  row: OldRow,
  existing: ExistingRun | undefined,
): { runId: string; run?: PlannedRun; step: PlannedStep } | undefined {
  if (existing && !existing.moved) return undefined;
  const key = String(row.idem_key);
  const { runId, part } = effectRunId(key, String(row.workflow_id));
  const done = row.status === "finished";
  const startedAt = time(row.started_at);
  const fencingToken = existing?.fencingToken ?? 0;
  return {
    runId,
    ...(existing
      ? {}
      : {
          run: {
            runId,
            workflow: DEFAULT_GRAPH_WORKFLOW,
            status: "pending",
            errorJson: null,
            waitingFor: null,
            fencingToken,
            createdAt: startedAt,
            updatedAt: startedAt,
          },
        }),
    step: {
      seq: existing?.nextSeq ?? 0,
      name: `${EFFECT_STEP}${part}:${String(row.name)}`,
      inputHash: hashInput(key),
      status: done ? "completed" : "started",
      outputJson: done ? String(row.result_json ?? "{}") : null,
      startedAt,
      finishedAt: done ? time(row.finished_at) : null,
      fencingToken,
      snapshot: false,
      blobRefs: [],
    },
  };
}

// ---- SQLite: synchronous reads and inserts inside the ledger's transaction ----

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
      { version: 2, name: MOVE_NAME, up: (db) => migrateSqlite(db, prefix) },
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

/** Name of version 2 in the ledger. */
const MOVE_NAME = "workflow tables moved into the journal";

/** Moves every workflow of the old tables into the journal, drops them, creates the view. */
function migrateSqlite(db: MigrationDatabase, prefix: string): void {
  const runs = `"${prefix}runs"`;
  const steps = `"${prefix}steps"`;
  const old = oldTablesOf(
    (db.prepare("SELECT name FROM sqlite_master WHERE type = 'table'").all() as { name: string }[]).map((r) => r.name),
  );
  const all = (sql: string, ...values: unknown[]) => db.prepare(sql).all(...values) as OldRow[];
  const get = (sql: string, ...values: unknown[]) => db.prepare(sql).get(...values) as OldRow | undefined;

  // Every workflow id any old table names.
  const ids = new Set<string>();
  for (const t of old.snapshots)
    for (const r of all(`SELECT DISTINCT workflow_id FROM "${t}"`)) ids.add(String(r.workflow_id));
  if (old.has("workflows")) for (const r of all("SELECT workflow_id FROM workflows")) ids.add(String(r.workflow_id));
  if (old.has("workflow_leases"))
    for (const r of all("SELECT workflow_id FROM workflow_leases")) ids.add(String(r.workflow_id));
  const floor = old.has("workflow_lease_floor")
    ? time(get("SELECT MAX(fencing_token) AS t FROM workflow_lease_floor")?.t ?? 0)
    : 0;

  const insertRun = db.prepare(
    `INSERT INTO ${runs} (run_id, workflow, status, input_json, error_json, waiting_for, fencing_token, created_at, updated_at)
     VALUES (?, ?, ?, 'null', ?, ?, ?, ?, ?)`,
  );
  const addRun = (r: PlannedRun) =>
    insertRun.run(r.runId, r.workflow, r.status, r.errorJson, r.waitingFor, r.fencingToken, r.createdAt, r.updatedAt);
  const insertStep = db.prepare(
    `INSERT INTO ${steps} (run_id, seq, name, input_hash, status, output_json, error_json, attempt, started_at, finished_at, fencing_token, snapshot)
     VALUES (?, ?, ?, ?, ?, ?, NULL, 1, ?, ?, ?, ?)`,
  );
  // Blobs the old table held: copied once, referenced by the checkpoints that name them.
  const copyBlob = old.has("workflow_blobs")
    ? db.prepare(
        `INSERT INTO "${prefix}blobs" (ref, bytes, size, created_at)
         SELECT substr(ref, 8), bytes, size, created_at FROM workflow_blobs WHERE ref = ?
         ON CONFLICT (ref) DO NOTHING`,
      )
    : undefined;
  const insertRef = db.prepare(
    `INSERT INTO "${prefix}blob_refs" (run_id, seq, ref)
     SELECT ?, ?, ? WHERE EXISTS (SELECT 1 FROM "${prefix}blobs" WHERE ref = ?) ON CONFLICT DO NOTHING`,
  );
  const addStep = (runId: string, s: PlannedStep) => {
    for (const ref of s.blobRefs) {
      copyBlob?.run(ref);
      insertRef.run(runId, s.seq, journalRef(ref), journalRef(ref));
    }
    insertStep.run(
      runId,
      s.seq,
      s.name,
      s.inputHash,
      s.status,
      s.outputJson,
      s.startedAt,
      s.finishedAt,
      s.fencingToken,
      s.snapshot ? 1 : null,
    );
  };
  const runOf = db.prepare(`SELECT fencing_token FROM ${runs} WHERE run_id = ?`);
  const nextSeqOf = db.prepare(`SELECT COALESCE(MAX(seq) + 1, 0) AS n FROM ${steps} WHERE run_id = ?`);

  const moved = new Set<string>();
  for (const id of ids) {
    if (runOf.get(id) !== undefined) continue; // a durable run of that id: not overwritten
    const { run, steps: records } = planWorkflow({
      workflowId: id,
      snapshots: old.snapshots.flatMap((t) =>
        all(
          `SELECT step_index, node_name, state_json, created_at FROM "${t}" WHERE workflow_id = ? ORDER BY step_index, id`,
          id,
        ),
      ),
      summary: old.has("workflows") ? get("SELECT * FROM workflows WHERE workflow_id = ?", id) : undefined,
      leaseToken: old.has("workflow_leases")
        ? get("SELECT fencing_token FROM workflow_leases WHERE workflow_id = ?", id)?.fencing_token
        : undefined,
      floor,
      errors: old.has("workflow_step_errors")
        ? all(
            "SELECT step_index, node_name, error_json, created_at FROM workflow_step_errors WHERE workflow_id = ? ORDER BY id",
            id,
          )
        : [],
    });
    addRun(run);
    moved.add(id);
    for (const s of records) addStep(id, s);
  }

  if (old.has("workflow_idempotency")) {
    for (const r of all("SELECT * FROM workflow_idempotency ORDER BY started_at, idem_key")) {
      const runId = effectRunOf(r);
      const found = runOf.get(runId) as OldRow | undefined;
      const plan = planEffect(
        r,
        found && {
          moved: moved.has(runId),
          fencingToken: time(found.fencing_token),
          nextSeq: time((nextSeqOf.get(runId) as OldRow).n),
        },
      );
      if (!plan) continue;
      if (plan.run) {
        addRun(plan.run);
        moved.add(runId);
      }
      addStep(runId, plan.step);
    }
  }

  for (const t of [...old.snapshots, ...old.others]) db.exec(`DROP TABLE "${t}"`);
  db.exec(snapshotViewSql(steps));
}

// ---- PostgreSQL: awaited reads and inserts inside the ledger's transaction, under its lock ----

/**
 * SQL of the PostgreSQL `workflow_snapshots` view (the original design's columns) over the checkpoint
 * steps: one row per workflow and step index, its newest record (as {@link snapshotViewSql}).
 */
export function postgresSnapshotViewSql(stepsTable: string): string {
  const index = `split_part(name, ':', 2)`;
  return `CREATE OR REPLACE VIEW {s}.workflow_snapshots AS
    SELECT DISTINCT ON (run_id, ${index}) seq AS id, run_id AS workflow_id,
      CASE WHEN name ~ '^${CHECKPOINT_STEP}[0-9]{1,9}:' THEN ${index}::integer END AS step_index,
      substr(name, ${CHECKPOINT_STEP.length} + length(${index}) + 2) AS node_name,
      output_json AS state_json, started_at AS created_at
    FROM ${stepsTable} WHERE name ~ '^${CHECKPOINT_STEP}[0-9]{1,9}:' AND status = 'completed'
    ORDER BY run_id, ${index}, seq DESC`;
}

/** Whether a schema holds workflow tables of an earlier release (the PostgreSQL twin of {@link hasOldWorkflowTables}). */
export async function hasOldPostgresWorkflowTables(query: PgQuery, schema: string): Promise<boolean> {
  const r = await query(
    `SELECT 1 FROM pg_tables WHERE schemaname = $1
       AND (tablename IN ('workflow_snapshots', 'workflows') OR tablename ~ '^workflow_snapshots_[0-9]')`,
    [schema],
  );
  return r.rows.length > 0;
}

/**
 * The `workflow` component of a PostgreSQL schema's ledger, run after the journal's own
 * migrations (the same versions as {@link workflowJournalMigrations}, in the shape of the
 * PostgreSQL driver's migrations: version 2 is an async function in the ledger's transaction).
 *
 * @param prefix - the journal's table prefix (`durable_`)
 * @returns the component
 * @example
 * new PostgresJournal({ schema: "app" }, [postgresWorkflowJournalMigrations("durable_")]);
 */
export function postgresWorkflowJournalMigrations(prefix: string): PostgresMigrations {
  return {
    component: "workflow",
    migrations: [
      { version: 1, name: "workflow tables", up: [] },
      { version: 2, name: MOVE_NAME, up: (query, schema) => migratePostgres(query, schema, prefix) },
      {
        version: 3,
        name: "workflow_snapshots view: one row per step index",
        up: [`DROP VIEW IF EXISTS {s}.workflow_snapshots`, postgresSnapshotViewSql(`{s}."${prefix}steps"`)],
      },
    ],
    present: hasOldPostgresWorkflowTables,
  };
}

/** Step records per insert statement, and their output bytes at most (one statement's parameters). */
const PG_BATCH_ROWS = 500;
const PG_BATCH_BYTES = 16 * 1024 * 1024;

/** {@link migrateSqlite} on PostgreSQL: the same plan, awaited reads, batched inserts. */
async function migratePostgres(query: PgQuery, schema: string, prefix: string): Promise<void> {
  const j = (name: string) => `{s}."${prefix}${name}"`;
  const o = (name: string) => `{s}."${name}"`;
  const old = oldTablesOf(
    (await query("SELECT tablename FROM pg_tables WHERE schemaname = $1", [schema])).rows.map((r) =>
      String(r.tablename),
    ),
  );
  const all = async (sql: string, values?: unknown[]) => (await query(sql, values)).rows;

  const ids = new Set<string>();
  for (const t of old.snapshots)
    for (const r of await all(`SELECT DISTINCT workflow_id FROM ${o(t)}`)) ids.add(String(r.workflow_id));
  if (old.has("workflows"))
    for (const r of await all(`SELECT workflow_id FROM ${o("workflows")}`)) ids.add(String(r.workflow_id));
  if (old.has("workflow_leases"))
    for (const r of await all(`SELECT workflow_id FROM ${o("workflow_leases")}`)) ids.add(String(r.workflow_id));
  const floor = old.has("workflow_lease_floor")
    ? time((await all(`SELECT MAX(fencing_token) AS t FROM ${o("workflow_lease_floor")}`))[0]?.t ?? 0)
    : 0;
  const durable = new Set(
    (await all(`SELECT run_id FROM ${j("runs")} WHERE run_id = ANY($1::text[])`, [[...ids]])).map((r) =>
      String(r.run_id),
    ),
  );

  const addRun = (r: PlannedRun) =>
    query(
      `INSERT INTO ${j("runs")} (run_id, workflow, status, input_json, error_json, waiting_for, fencing_token, created_at, updated_at)
       VALUES ($1, $2, $3, 'null', $4, $5, $6, $7, $8)`,
      [r.runId, r.workflow, r.status, r.errorJson, r.waitingFor, r.fencingToken, r.createdAt, r.updatedAt],
    );
  const addSteps = async (runId: string, records: readonly PlannedStep[]) => {
    const refs = records.flatMap((s) => s.blobRefs.map((ref) => [s.seq, ref] as const));
    if (refs.length > 0) {
      if (old.has("workflow_blobs")) {
        await query(
          `INSERT INTO ${j("blobs")} (ref, bytes, size, created_at)
           SELECT substr(ref, 8), bytes, size, created_at FROM ${o("workflow_blobs")} WHERE ref = ANY($1::text[])
           ON CONFLICT (ref) DO NOTHING`,
          [[...new Set(refs.map(([, ref]) => ref))]],
        );
      }
      await query(
        `INSERT INTO ${j("blob_refs")} (run_id, seq, ref)
         SELECT $1, r.seq, r.ref FROM unnest($2::integer[], $3::text[]) AS r(seq, ref)
         WHERE EXISTS (SELECT 1 FROM ${j("blobs")} b WHERE b.ref = r.ref)
         ON CONFLICT DO NOTHING`,
        [runId, refs.map(([seq]) => seq), refs.map(([, ref]) => journalRef(ref))],
      );
    }
    for (let i = 0; i < records.length; ) {
      const batch: PlannedStep[] = [];
      let bytes = 0;
      while (i < records.length && batch.length < PG_BATCH_ROWS && (batch.length === 0 || bytes < PG_BATCH_BYTES)) {
        const s = records[i++] as PlannedStep;
        bytes += s.outputJson?.length ?? 0;
        batch.push(s);
      }
      await query(
        `INSERT INTO ${j("steps")} (run_id, seq, name, input_hash, status, output_json, error_json, attempt, started_at, finished_at, fencing_token, snapshot)
         SELECT $1, s.seq, s.name, s.input_hash, s.status, s.output_json, NULL, 1, s.started_at, s.finished_at, s.fencing_token, s.snapshot
         FROM unnest($2::integer[], $3::text[], $4::text[], $5::text[], $6::text[], $7::bigint[], $8::bigint[], $9::bigint[], $10::integer[])
           AS s(seq, name, input_hash, status, output_json, started_at, finished_at, fencing_token, snapshot)`,
        [
          runId,
          batch.map((s) => s.seq),
          batch.map((s) => s.name),
          batch.map((s) => s.inputHash),
          batch.map((s) => s.status),
          batch.map((s) => s.outputJson),
          batch.map((s) => s.startedAt),
          batch.map((s) => s.finishedAt),
          batch.map((s) => s.fencingToken),
          batch.map((s) => (s.snapshot ? 1 : null)),
        ],
      );
    }
  };

  const moved = new Map<string, { fencingToken: number; nextSeq: number }>();
  for (const id of ids) {
    if (durable.has(id)) continue; // a durable run of that id: not overwritten
    const snapshots: OldRow[] = [];
    for (const t of old.snapshots) {
      snapshots.push(
        ...(await all(
          `SELECT step_index, node_name, state_json, created_at FROM ${o(t)} WHERE workflow_id = $1 ORDER BY step_index, id`,
          [id],
        )),
      );
    }
    const { run, steps } = planWorkflow({
      workflowId: id,
      snapshots,
      summary: old.has("workflows")
        ? (await all(`SELECT * FROM ${o("workflows")} WHERE workflow_id = $1`, [id]))[0]
        : undefined,
      leaseToken: old.has("workflow_leases")
        ? (await all(`SELECT fencing_token FROM ${o("workflow_leases")} WHERE workflow_id = $1`, [id]))[0]
            ?.fencing_token
        : undefined,
      floor,
      errors: old.has("workflow_step_errors")
        ? await all(
            `SELECT step_index, node_name, error_json, created_at FROM ${o("workflow_step_errors")} WHERE workflow_id = $1 ORDER BY id`,
            [id],
          )
        : [],
    });
    await addRun(run);
    await addSteps(id, steps);
    moved.set(id, { fencingToken: run.fencingToken, nextSeq: steps.length });
  }

  if (old.has("workflow_idempotency")) {
    const rows = await all(`SELECT * FROM ${o("workflow_idempotency")} ORDER BY started_at, idem_key`);
    const named = new Set(rows.map(effectRunOf).filter((id) => !moved.has(id) && !durable.has(id)));
    if (named.size > 0) {
      const found = await all(`SELECT run_id FROM ${j("runs")} WHERE run_id = ANY($1::text[])`, [[...named]]);
      for (const r of found) durable.add(String(r.run_id));
    }
    for (const r of rows) {
      const runId = effectRunOf(r);
      const m = moved.get(runId);
      const plan = planEffect(
        r,
        durable.has(runId) ? { moved: false, fencingToken: 0, nextSeq: 0 } : m && { moved: true, ...m },
      );
      if (!plan) continue;
      if (plan.run) await addRun(plan.run);
      await addSteps(runId, [plan.step]);
      moved.set(runId, { fencingToken: plan.step.fencingToken, nextSeq: plan.step.seq + 1 });
    }
  }

  for (const t of [...old.snapshots, ...old.others]) await query(`DROP TABLE ${o(t)}`);
  await query(postgresSnapshotViewSql(j("steps")));
}

/** The blob references (`{ "$dumplings_blob": ref }`) of a stored state's top-level `sharedMemory`/`shared_memory` values. */
function blobRefsOf(state: OldRow | undefined): string[] {
  const memory = (state?.sharedMemory ?? state?.shared_memory) as OldRow | undefined;
  if (!memory || typeof memory !== "object") return [];
  const out: string[] = [];
  for (const v of Object.values(memory)) {
    const ref = v !== null && typeof v === "object" ? (v as OldRow).$dumplings_blob : undefined;
    if (typeof ref === "string" && /^sha256:[0-9a-f]{64}$/.test(ref)) out.push(ref);
  }
  return out;
}

function parseObject(text: string): OldRow | undefined {
  try {
    const v = JSON.parse(text) as unknown;
    return v !== null && typeof v === "object" && !Array.isArray(v) ? (v as OldRow) : undefined;
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
