/**
 * PostgreSQL cold store for workflow checkpoints, through `pg`.
 *
 * Same tables as the SQLite store, in a configurable schema. The
 * compare-and-set on a workflow's latest step locks its summary row
 * (`SELECT … FOR UPDATE`) inside the transaction that inserts the snapshot,
 * so racing writers from any number of processes serialise and the loser
 * gets a {@link ConflictError}. Retention deletes in batches (default 5,000
 * rows per statement) so a large prune never holds long locks or bloats one
 * transaction.
 *
 * @module
 */
import pg from "pg";
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

/** The part of a `pg.Pool` this store uses (any compatible pool can be injected). */
export interface PgPoolLike {
  query: pg.Pool["query"];
  connect(): Promise<pg.PoolClient>;
  end(): Promise<void>;
}

/** Options of {@link PostgresColdStore}. */
export interface PostgresColdStoreOptions {
  /** An injected pool (left open by `close()`). */
  pool?: PgPoolLike;
  /** Connection string when no pool is given. @default process.env.DATABASE_URL */
  url?: string;
  /** Schema holding the tables (created if missing). @default "public" */
  schema?: string;
  /** Rows per DELETE statement when pruning. @default 5000 */
  pruneBatchSize?: number;
  /** Connection timeout of a created pool, ms. @default 5000 */
  connectTimeoutMs?: number;
}

const num = (v: unknown): number => Number(v);

function quoteIdent(name: string): string {
  if (!/^[A-Za-z_][A-Za-z0-9_]{0,62}$/.test(name)) throw new RangeError(`invalid PostgreSQL schema name ${name}`);
  return `"${name}"`;
}

interface SummaryRow {
  workflow_id: string;
  session_id: string;
  status: WorkflowRowStatus;
  latest_step: string | number;
  current_node: string;
  parent_workflow_id: string | null;
  created_at: string | number;
  updated_at: string | number;
}

const toSummary = (r: SummaryRow): WorkflowSummary => ({
  workflowId: r.workflow_id,
  sessionId: r.session_id,
  status: r.status,
  latestStep: num(r.latest_step),
  currentNode: r.current_node,
  parentWorkflowId: r.parent_workflow_id,
  createdAt: num(r.created_at),
  updatedAt: num(r.updated_at),
});

const toSnapshot = (r: {
  workflow_id: string;
  step_index: string | number;
  node_name: string;
  state_json: string;
  created_at: string | number;
}): StoredSnapshot => ({
  workflowId: r.workflow_id,
  stepIndex: num(r.step_index),
  nodeName: r.node_name,
  stateJson: r.state_json,
  createdAt: num(r.created_at),
});

/**
 * Cold checkpoint store in PostgreSQL.
 *
 * @example
 * const cold = new PostgresColdStore({ url: process.env.DATABASE_URL, schema: "workflows" });
 * const store = await CheckpointStore.open({ cold });
 */
export class PostgresColdStore implements ColdStore {
  readonly name = "postgres";
  /** The pool in use. */
  readonly pool: PgPoolLike;
  private readonly owned: boolean;
  private readonly s: string;
  private readonly batch: number;
  private ready: Promise<void> | undefined;

  /** @param options - an injected `pool` or a `url`; the `schema` to use */
  constructor(options: PostgresColdStoreOptions = {}) {
    this.s = quoteIdent(options.schema ?? "public");
    this.batch = options.pruneBatchSize ?? 5000;
    if (options.pool) {
      this.pool = options.pool;
      this.owned = false;
    } else {
      const url = options.url ?? process.env.DATABASE_URL;
      if (!url) throw new BackendError("postgres", "no connection: pass { pool } or { url }, or set DATABASE_URL");
      this.pool = new pg.Pool({ connectionString: url, connectionTimeoutMillis: options.connectTimeoutMs ?? 5000 });
      this.owned = true;
    }
  }

  private t(name: string): string {
    return `${this.s}.${name}`;
  }

  private async q<R extends pg.QueryResultRow>(
    what: string,
    key: string | undefined,
    sql: string,
    params: unknown[] = [],
    client?: pg.PoolClient,
  ): Promise<pg.QueryResult<R>> {
    try {
      return await (client ?? this.pool).query<R>(sql, params);
    } catch (e) {
      throw new BackendError("postgres", what, { key, cause: e });
    }
  }

  private async tx<T>(what: string, key: string | undefined, fn: (c: pg.PoolClient) => Promise<T>): Promise<T> {
    let client: pg.PoolClient;
    try {
      client = await this.pool.connect();
    } catch (e) {
      throw new BackendError("postgres", what, { key, cause: e });
    }
    try {
      await client.query("BEGIN");
      const out = await fn(client);
      await client.query("COMMIT");
      return out;
    } catch (e) {
      await client.query("ROLLBACK").catch(() => undefined);
      if (e instanceof ConflictError || e instanceof BackendError) throw e;
      throw new BackendError("postgres", what, { key, cause: e });
    } finally {
      client.release();
    }
  }

  /** {@inheritDoc ColdStore.init} */
  init(): Promise<void> {
    this.ready ??= this.tx("cannot create workflow tables", undefined, async (c) => {
      // Serialise concurrent CREATE IF NOT EXISTS from several processes.
      await c.query("SELECT pg_advisory_xact_lock(hashtext($1))", [`dumplings-workflow-schema:${this.s}`]);
      await c.query(`CREATE SCHEMA IF NOT EXISTS ${this.s}`);
      await c.query(`
        CREATE TABLE IF NOT EXISTS ${this.t("workflow_snapshots")} (
          id BIGSERIAL PRIMARY KEY,
          workflow_id TEXT NOT NULL,
          step_index INTEGER NOT NULL,
          node_name TEXT NOT NULL,
          state_json TEXT NOT NULL,
          created_at BIGINT NOT NULL,
          UNIQUE (workflow_id, step_index)
        );
        CREATE INDEX IF NOT EXISTS workflow_snapshots_created_at ON ${this.t("workflow_snapshots")} (created_at);
        CREATE TABLE IF NOT EXISTS ${this.t("workflows")} (
          workflow_id TEXT PRIMARY KEY,
          session_id TEXT NOT NULL,
          status TEXT NOT NULL,
          latest_step INTEGER NOT NULL,
          current_node TEXT NOT NULL,
          active_step INTEGER NOT NULL,
          parent_workflow_id TEXT,
          created_at BIGINT NOT NULL,
          updated_at BIGINT NOT NULL
        );
        CREATE INDEX IF NOT EXISTS workflows_status_updated ON ${this.t("workflows")} (status, updated_at DESC, workflow_id DESC);
        CREATE INDEX IF NOT EXISTS workflows_updated ON ${this.t("workflows")} (updated_at DESC, workflow_id DESC);
        CREATE TABLE IF NOT EXISTS ${this.t("workflow_step_errors")} (
          id BIGSERIAL PRIMARY KEY,
          workflow_id TEXT NOT NULL,
          step_index INTEGER NOT NULL,
          node_name TEXT NOT NULL,
          error_json TEXT NOT NULL,
          created_at BIGINT NOT NULL
        );
        CREATE INDEX IF NOT EXISTS workflow_step_errors_workflow ON ${this.t("workflow_step_errors")} (workflow_id, step_index);
        CREATE TABLE IF NOT EXISTS ${this.t("workflow_idempotency")} (
          idem_key TEXT PRIMARY KEY,
          workflow_id TEXT NOT NULL,
          step_index INTEGER NOT NULL,
          name TEXT NOT NULL,
          status TEXT NOT NULL CHECK (status IN ('started', 'finished')),
          result_json TEXT,
          started_at BIGINT NOT NULL,
          finished_at BIGINT
        );
        CREATE INDEX IF NOT EXISTS workflow_idempotency_workflow ON ${this.t("workflow_idempotency")} (workflow_id, step_index);
        CREATE TABLE IF NOT EXISTS ${this.t("workflow_blob_refs")} (
          workflow_id TEXT NOT NULL,
          step_index INTEGER NOT NULL,
          ref TEXT NOT NULL,
          PRIMARY KEY (workflow_id, step_index, ref)
        );
        CREATE INDEX IF NOT EXISTS workflow_blob_refs_ref ON ${this.t("workflow_blob_refs")} (ref);
      `);
    });
    this.ready.catch(() => {
      this.ready = undefined;
    });
    return this.ready;
  }

  /** {@inheritDoc ColdStore.write} */
  async write(row: SnapshotWrite, expectedLatest: number | null | undefined): Promise<void> {
    await this.tx(
      `cannot write checkpoint ${row.stepIndex} of workflow "${row.workflowId}"`,
      row.workflowId,
      async (c) => {
        if (expectedLatest !== undefined) {
          const cur = await c.query<{ latest_step: number }>(
            `SELECT latest_step FROM ${this.t("workflows")} WHERE workflow_id = $1 FOR UPDATE`,
            [row.workflowId],
          );
          const actual = cur.rows[0] ? num(cur.rows[0].latest_step) : null;
          if (actual === null && expectedLatest === null) {
            // Two creators race: the primary key decides, the loser's insert does nothing.
            const ins = await c.query(
              `INSERT INTO ${this.t("workflows")} (workflow_id, session_id, status, latest_step, current_node, active_step, parent_workflow_id, created_at, updated_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8) ON CONFLICT (workflow_id) DO NOTHING`,
              [
                row.workflowId,
                row.sessionId,
                row.status,
                row.stepIndex,
                row.currentNode,
                row.activeStep,
                row.parentWorkflowId,
                row.createdAt,
              ],
            );
            if (ins.rowCount !== 1) {
              const now = await c.query<{ latest_step: number }>(
                `SELECT latest_step FROM ${this.t("workflows")} WHERE workflow_id = $1`,
                [row.workflowId],
              );
              throw new ConflictError(
                row.workflowId,
                null,
                now.rows[0] ? num(now.rows[0].latest_step) : null,
                "postgres",
              );
            }
          } else if (actual !== expectedLatest) {
            throw new ConflictError(row.workflowId, expectedLatest, actual, "postgres");
          }
        }
        await c.query(
          `INSERT INTO ${this.t("workflow_snapshots")} (workflow_id, step_index, node_name, state_json, created_at)
         VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT (workflow_id, step_index) DO UPDATE SET
           node_name = EXCLUDED.node_name, state_json = EXCLUDED.state_json, created_at = EXCLUDED.created_at`,
          [row.workflowId, row.stepIndex, row.nodeName, row.stateJson, row.createdAt],
        );
        await c.query(
          `INSERT INTO ${this.t("workflows")} AS w (workflow_id, session_id, status, latest_step, current_node, active_step, parent_workflow_id, created_at, updated_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8)
         ON CONFLICT (workflow_id) DO UPDATE SET
           session_id = EXCLUDED.session_id, status = EXCLUDED.status, latest_step = EXCLUDED.latest_step,
           current_node = EXCLUDED.current_node, active_step = EXCLUDED.active_step, updated_at = EXCLUDED.updated_at
         WHERE EXCLUDED.latest_step >= w.latest_step`,
          [
            row.workflowId,
            row.sessionId,
            row.status,
            row.stepIndex,
            row.currentNode,
            row.activeStep,
            row.parentWorkflowId,
            row.createdAt,
          ],
        );
        await c.query(`DELETE FROM ${this.t("workflow_blob_refs")} WHERE workflow_id = $1 AND step_index = $2`, [
          row.workflowId,
          row.stepIndex,
        ]);
        if (row.blobRefs.length > 0) {
          await c.query(
            `INSERT INTO ${this.t("workflow_blob_refs")} (workflow_id, step_index, ref)
           SELECT $1, $2, unnest($3::text[]) ON CONFLICT DO NOTHING`,
            [row.workflowId, row.stepIndex, [...new Set(row.blobRefs)]],
          );
        }
      },
    );
  }

  /** {@inheritDoc ColdStore.read} */
  async read(workflowId: string, stepIndex: number): Promise<StoredSnapshot | undefined> {
    const r = await this.q<Parameters<typeof toSnapshot>[0]>(
      `cannot read step ${stepIndex} of workflow "${workflowId}"`,
      workflowId,
      `SELECT workflow_id, step_index, node_name, state_json, created_at FROM ${this.t("workflow_snapshots")}
       WHERE workflow_id = $1 AND step_index = $2`,
      [workflowId, stepIndex],
    );
    return r.rows[0] && toSnapshot(r.rows[0]);
  }

  /** {@inheritDoc ColdStore.latest} */
  async latest(workflowId: string): Promise<StoredSnapshot | undefined> {
    const r = await this.q<Parameters<typeof toSnapshot>[0]>(
      `cannot read latest checkpoint of workflow "${workflowId}"`,
      workflowId,
      `SELECT workflow_id, step_index, node_name, state_json, created_at FROM ${this.t("workflow_snapshots")}
       WHERE workflow_id = $1 ORDER BY step_index DESC LIMIT 1`,
      [workflowId],
    );
    return r.rows[0] && toSnapshot(r.rows[0]);
  }

  /** {@inheritDoc ColdStore.summary} */
  async summary(workflowId: string): Promise<WorkflowSummary | undefined> {
    const r = await this.q<SummaryRow>(
      `cannot read workflow "${workflowId}"`,
      workflowId,
      `SELECT * FROM ${this.t("workflows")} WHERE workflow_id = $1`,
      [workflowId],
    );
    return r.rows[0] && toSummary(r.rows[0]);
  }

  /** {@inheritDoc ColdStore.history} */
  async history(workflowId: string): Promise<StoredSnapshot[]> {
    const r = await this.q<Parameters<typeof toSnapshot>[0]>(
      `cannot read history of workflow "${workflowId}"`,
      workflowId,
      `SELECT workflow_id, step_index, node_name, state_json, created_at FROM ${this.t("workflow_snapshots")}
       WHERE workflow_id = $1 ORDER BY step_index`,
      [workflowId],
    );
    return r.rows.map(toSnapshot);
  }

  private listQuery(query: { status?: WorkflowRowStatus; limit: number; after?: ListCursor }): [string, unknown[]] {
    const where: string[] = [];
    const params: unknown[] = [];
    if (query.status !== undefined) {
      params.push(query.status);
      where.push(`status = $${params.length}`);
    }
    if (query.after) {
      params.push(query.after.updatedAt, query.after.workflowId);
      where.push(`(updated_at, workflow_id) < ($${params.length - 1}, $${params.length})`);
    }
    params.push(query.limit);
    return [
      `SELECT * FROM ${this.t("workflows")} ${where.length ? `WHERE ${where.join(" AND ")}` : ""}
       ORDER BY updated_at DESC, workflow_id DESC LIMIT $${params.length}`,
      params,
    ];
  }

  /** {@inheritDoc ColdStore.list} */
  async list(query: { status?: WorkflowRowStatus; limit: number; after?: ListCursor }): Promise<WorkflowSummary[]> {
    const [sql, params] = this.listQuery(query);
    const r = await this.q<SummaryRow>("cannot list workflows", undefined, sql, params);
    return r.rows.map(toSummary);
  }

  /** {@inheritDoc ColdStore.explainList} */
  async explainList(status?: WorkflowRowStatus): Promise<string> {
    const [sql, params] = this.listQuery({ status, limit: 10, after: { updatedAt: 0, workflowId: "" } });
    const r = await this.q<{ "QUERY PLAN": string }>("cannot explain", undefined, `EXPLAIN ${sql}`, params);
    return r.rows.map((x) => x["QUERY PLAN"]).join("\n");
  }

  private async orphans(c: pg.PoolClient, refs: string[]): Promise<string[]> {
    if (refs.length === 0) return [];
    const r = await c.query<{ ref: string }>(
      `SELECT u.ref FROM unnest($1::text[]) AS u(ref)
       WHERE NOT EXISTS (SELECT 1 FROM ${this.t("workflow_blob_refs")} b WHERE b.ref = u.ref)`,
      [[...new Set(refs)]],
    );
    return r.rows.map((x) => x.ref);
  }

  /** {@inheritDoc ColdStore.deleteWorkflow} */
  async deleteWorkflow(workflowId: string): Promise<{ existed: boolean; orphanRefs: string[] }> {
    return this.tx(`cannot delete workflow "${workflowId}"`, workflowId, async (c) => {
      const refs = await c.query<{ ref: string }>(
        `DELETE FROM ${this.t("workflow_blob_refs")} WHERE workflow_id = $1 RETURNING ref`,
        [workflowId],
      );
      const a = await c.query(`DELETE FROM ${this.t("workflow_snapshots")} WHERE workflow_id = $1`, [workflowId]);
      const b = await c.query(`DELETE FROM ${this.t("workflows")} WHERE workflow_id = $1`, [workflowId]);
      await c.query(`DELETE FROM ${this.t("workflow_step_errors")} WHERE workflow_id = $1`, [workflowId]);
      await c.query(`DELETE FROM ${this.t("workflow_idempotency")} WHERE workflow_id = $1`, [workflowId]);
      return {
        existed: (a.rowCount ?? 0) + (b.rowCount ?? 0) > 0,
        orphanRefs: await this.orphans(
          c,
          refs.rows.map((x) => x.ref),
        ),
      };
    });
  }

  /** {@inheritDoc ColdStore.prune} */
  async prune(cutoff: number, keepLast: number): Promise<{ deletedSnapshots: number; orphanRefs: string[] }> {
    let deletedSnapshots = 0;
    const orphanRefs = new Set<string>();
    for (;;) {
      const n = await this.tx("cannot prune workflow snapshots", undefined, async (c) => {
        const del = await c.query<{ workflow_id: string; step_index: number }>(
          `DELETE FROM ${this.t("workflow_snapshots")} WHERE id IN (
             SELECT s.id FROM ${this.t("workflow_snapshots")} s JOIN ${this.t("workflows")} w USING (workflow_id)
             WHERE s.created_at < $1 AND s.step_index <= w.latest_step - $2
             LIMIT $3)
           RETURNING workflow_id, step_index`,
          [cutoff, keepLast, this.batch],
        );
        if (del.rows.length > 0) {
          const refs = await c.query<{ ref: string }>(
            `DELETE FROM ${this.t("workflow_blob_refs")} b
             USING unnest($1::text[], $2::int[]) AS d(workflow_id, step_index)
             WHERE b.workflow_id = d.workflow_id AND b.step_index = d.step_index RETURNING b.ref`,
            [del.rows.map((r) => r.workflow_id), del.rows.map((r) => r.step_index)],
          );
          for (const ref of await this.orphans(
            c,
            refs.rows.map((r) => r.ref),
          ))
            orphanRefs.add(ref);
        }
        return del.rows.length;
      });
      deletedSnapshots += n;
      if (n < this.batch) break;
    }
    for (;;) {
      const r = await this.q(
        "cannot prune side-effect records",
        undefined,
        `DELETE FROM ${this.t("workflow_idempotency")} WHERE idem_key IN (
           SELECT i.idem_key FROM ${this.t("workflow_idempotency")} i JOIN ${this.t("workflows")} w USING (workflow_id)
           WHERE i.started_at < $1 AND i.step_index < w.active_step LIMIT $2)`,
        [cutoff, this.batch],
      );
      if ((r.rowCount ?? 0) < this.batch) break;
    }
    return { deletedSnapshots, orphanRefs: [...orphanRefs] };
  }

  /** {@inheritDoc ColdStore.recordError} */
  async recordError(record: StepErrorRecord): Promise<void> {
    await this.tx(`cannot record the error of workflow "${record.workflowId}"`, record.workflowId, async (c) => {
      await c.query(
        `INSERT INTO ${this.t("workflow_step_errors")} (workflow_id, step_index, node_name, error_json, created_at)
         VALUES ($1, $2, $3, $4, $5)`,
        [record.workflowId, record.stepIndex, record.nodeName, JSON.stringify(record.error), record.createdAt],
      );
      await c.query(
        `UPDATE ${this.t("workflows")} SET status = 'failed', updated_at = $1 WHERE workflow_id = $2 AND latest_step = $3`,
        [record.createdAt, record.workflowId, record.stepIndex],
      );
    });
  }

  /** {@inheritDoc ColdStore.errors} */
  async errors(workflowId: string): Promise<StepErrorRecord[]> {
    const r = await this.q<{
      workflow_id: string;
      step_index: number;
      node_name: string;
      error_json: string;
      created_at: string;
    }>(
      `cannot read errors of workflow "${workflowId}"`,
      workflowId,
      `SELECT workflow_id, step_index, node_name, error_json, created_at FROM ${this.t("workflow_step_errors")}
       WHERE workflow_id = $1 ORDER BY id`,
      [workflowId],
    );
    return r.rows.map((x) => ({
      workflowId: x.workflow_id,
      stepIndex: num(x.step_index),
      nodeName: x.node_name,
      error: JSON.parse(x.error_json),
      createdAt: num(x.created_at),
    }));
  }

  /** {@inheritDoc ColdStore.idempotencyBegin} */
  async idempotencyBegin(
    key: string,
    info: { workflowId: string; stepIndex: number; name: string; now: number },
  ): Promise<IdempotencyRecord | undefined> {
    const ins = await this.q(
      `cannot record the start of side effect "${key}"`,
      key,
      `INSERT INTO ${this.t("workflow_idempotency")} (idem_key, workflow_id, step_index, name, status, started_at)
       VALUES ($1, $2, $3, $4, 'started', $5) ON CONFLICT (idem_key) DO NOTHING`,
      [key, info.workflowId, info.stepIndex, info.name, info.now],
    );
    if (ins.rowCount === 1) return undefined;
    const r = await this.q<{
      idem_key: string;
      workflow_id: string;
      step_index: number;
      name: string;
      status: "started" | "finished";
      result_json: string | null;
      started_at: string;
      finished_at: string | null;
    }>(`cannot read side effect "${key}"`, key, `SELECT * FROM ${this.t("workflow_idempotency")} WHERE idem_key = $1`, [
      key,
    ]);
    const x = r.rows[0];
    if (!x) throw new BackendError("postgres", `side effect "${key}" vanished while being read`, { key });
    return {
      key: x.idem_key,
      workflowId: x.workflow_id,
      stepIndex: num(x.step_index),
      name: x.name,
      status: x.status,
      resultJson: x.result_json,
      startedAt: num(x.started_at),
      finishedAt: x.finished_at === null ? null : num(x.finished_at),
    };
  }

  /** {@inheritDoc ColdStore.idempotencyFinish} */
  async idempotencyFinish(key: string, resultJson: string, now: number): Promise<void> {
    await this.q(
      `cannot record the result of side effect "${key}"`,
      key,
      `UPDATE ${this.t("workflow_idempotency")} SET status = 'finished', result_json = $1, finished_at = $2 WHERE idem_key = $3`,
      [resultJson, now, key],
    );
  }

  /** {@inheritDoc ColdStore.idempotencyAbandon} */
  async idempotencyAbandon(key: string): Promise<void> {
    await this.q(
      `cannot clear side effect "${key}"`,
      key,
      `DELETE FROM ${this.t("workflow_idempotency")} WHERE idem_key = $1 AND status = 'started'`,
      [key],
    );
  }

  /** {@inheritDoc ColdStore.close} */
  async close(): Promise<void> {
    if (this.owned) await this.pool.end();
  }
}
