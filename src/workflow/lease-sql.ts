/**
 * Workflow leases in SQL: the `workflow_leases` table (component
 * `workflow-lease` of the drivers' migration ledger, beside the cold store's
 * `workflow` component) and its statements, used by {@link SqlColdStore}.
 *
 * The same lease as a durable run's (`durable/journal-sql.ts`): an owner, an
 * expiry and a fencing token per workflow. Taking the lease increments the
 * token; expiry is judged by the database's clock ({@link SqlDriver.nowMs})
 * inside the statement that takes it, so a worker whose clock runs ahead can
 * never take over a live lease. A fenced write reads the lease row with the
 * driver's `forUpdate` inside its own transaction (PostgreSQL: a row lock a
 * takeover waits on; SQLite: `BEGIN IMMEDIATE` already serialises), so a
 * takeover and a stale worker's write are ordered, and the stale write is
 * refused.
 *
 * The table is separate from `workflows` so a lease can be taken before a
 * workflow's first checkpoint exists. **A workflow's fencing token never goes
 * back**, whatever is deleted or pruned: `deleteWorkflow` ends the lease in
 * its own transaction (frees it and raises its token, so no token from before
 * the delete passes a fence again, and a worker still running the workflow
 * loses it), and its row outlives the delete; `prune` removes free rows of
 * workflows that no longer exist once they are older than its cutoff, and in
 * the same transaction raises the lease-token floor (`workflow_lease_floor`,
 * one row: the highest token a pruned row had) that every new row starts
 * above. (Without the floor, an id run again after a prune started at token 1
 * and a worker paused while holding token 1 passed the fence of the new
 * worker's lease: a new user's trial.) On PostgreSQL a new row reads the floor
 * `FOR KEY SHARE` and prune locks it `FOR UPDATE` before it deletes, so a
 * prune and an acquire are ordered.
 *
 * @module
 */
import { BackendError, StaleFencingTokenError } from "../core/errors.js";
import type { SqlDriver, SqlQuery } from "../drivers/sql.js";
import type { WorkflowLeaseResult, WorkflowMigrations } from "./cold.js";

/** The ledger key of the lease table's migrations. */
export const WORKFLOW_LEASE_COMPONENT = "workflow-lease";

/**
 * The lease table of one dialect, for the driver's migration ledger (a component of its
 * own, so it is versioned apart from the cold store's `workflow` tables).
 *
 * @param dialect - `sqlite` or `postgres` (table names carry the driver's `{s}` schema placeholder)
 * @returns the component `workflow-lease` and its migrations
 * @example
 * const driver = new SqliteDriver("sqlite", { path: "wf.db" }, [workflowMigrations("sqlite"), workflowLeaseMigrations("sqlite")]);
 */
export function workflowLeaseMigrations(dialect: "sqlite" | "postgres"): WorkflowMigrations {
  const pg = dialect === "postgres";
  const t = (name: string) => (pg ? `{s}.${name}` : name);
  const ms = pg ? "BIGINT" : "INTEGER";
  return {
    component: WORKFLOW_LEASE_COMPONENT,
    migrations: [
      {
        version: 1,
        name: "workflow leases",
        up: [
          `CREATE TABLE IF NOT EXISTS ${t("workflow_leases")} (
            workflow_id TEXT PRIMARY KEY,
            owner TEXT,
            expires_at ${ms},
            fencing_token ${ms} NOT NULL,
            updated_at ${ms} NOT NULL)${pg ? "" : " WITHOUT ROWID"}`,
          `CREATE INDEX IF NOT EXISTS workflow_leases_updated ON ${t("workflow_leases")} (updated_at)`,
        ],
      },
      {
        version: 2,
        name: "workflow lease-token floor",
        up: [
          `CREATE TABLE IF NOT EXISTS ${t("workflow_lease_floor")} (
            one INTEGER PRIMARY KEY CHECK (one = 1),
            fencing_token ${ms} NOT NULL)`,
          // Rows pruned before this version left no trace: start new rows above every token still stored.
          `INSERT INTO ${t("workflow_lease_floor")} (one, fencing_token)
           SELECT 1, COALESCE(MAX(fencing_token), 0) FROM ${t("workflow_leases")}
           WHERE NOT EXISTS (SELECT 1 FROM ${t("workflow_lease_floor")})`,
        ],
      },
    ],
  };
}

type Row = Record<string, unknown>;
const num = (v: unknown): number | null => (v === null || v === undefined ? null : Number(v));

/** The lease statements of one SQL cold store. */
export class SqlWorkflowLeases {
  /** The quoted table name. */
  private readonly table: string;
  /** The quoted table of the lease-token floor (one row). */
  private readonly floor: string;
  /** PostgreSQL: row locks on the floor (SQLite's `BEGIN IMMEDIATE` already serialises). */
  private readonly pg: boolean;

  /** @param driver - the cold store's driver, set up with {@link workflowLeaseMigrations} */
  constructor(private readonly driver: SqlDriver) {
    this.table = driver.table("workflow_leases");
    this.floor = driver.table("workflow_lease_floor");
    this.pg = driver.name === "postgres";
  }

  /** The lease row of a workflow as stored, with whether it is live by the database's clock. */
  private async current(query: SqlQuery, workflowId: string, lock: boolean): Promise<Row | undefined> {
    const r = await query(
      `SELECT owner, expires_at, fencing_token, CASE WHEN expires_at > ${this.driver.nowMs} THEN 1 ELSE 0 END AS live
       FROM ${this.table} WHERE workflow_id = $1${lock ? this.driver.forUpdate : ""}`,
      [workflowId],
    );
    return r.rows[0];
  }

  /** {@inheritDoc ColdStore.acquireLease} */
  async acquire(workflowId: string, owner: string, ttlMs: number): Promise<WorkflowLeaseResult> {
    const now = this.driver.nowMs;
    const ttl = Math.max(1, Math.ceil(ttlMs));
    // A holder that releases between the refused upsert and the read of the holder: try again.
    for (let attempt = 0; ; attempt++) {
      const out = await this.driver.transaction(
        `cannot take the lease of workflow "${workflowId}"`,
        workflowId,
        async (query): Promise<WorkflowLeaseResult | undefined> => {
          // A new row starts above every token a pruned row had; the lock orders this with a prune.
          const floor = await query(`SELECT fencing_token FROM ${this.floor}${this.pg ? " FOR KEY SHARE" : ""}`);
          const taken = await query(
            `INSERT INTO ${this.table} AS l (workflow_id, owner, expires_at, fencing_token, updated_at)
             VALUES ($1, $2, ${now} + CAST($3 AS BIGINT), CAST($4 AS BIGINT), ${now})
             ON CONFLICT (workflow_id) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at,
               fencing_token = l.fencing_token + 1, updated_at = excluded.updated_at
             WHERE l.owner IS NULL OR l.expires_at IS NULL OR l.expires_at <= excluded.updated_at
               OR l.owner = excluded.owner
             RETURNING fencing_token, expires_at`,
            [workflowId, owner, ttl, (num(floor.rows[0]?.fencing_token) ?? 0) + 1],
          );
          const row = taken.rows[0];
          if (row)
            return { acquired: true, fencingToken: Number(row.fencing_token), expiresAt: Number(row.expires_at) };
          const holder = await this.current(query, workflowId, true);
          if (!holder || holder.owner === null || Number(holder.live) !== 1) return undefined;
          return {
            acquired: false,
            owner: String(holder.owner),
            expiresAt: Number(holder.expires_at),
            fencingToken: Number(holder.fencing_token),
          };
        },
      );
      if (out) return out;
      if (attempt >= 5) {
        throw new BackendError(
          this.driver.name,
          `cannot take the lease of workflow "${workflowId}": it changed hands during every attempt`,
          { key: workflowId },
        );
      }
    }
  }

  /** {@inheritDoc ColdStore.renewLease} */
  async renew(workflowId: string, fencingToken: number, ttlMs: number): Promise<number> {
    const now = this.driver.nowMs;
    return this.driver.transaction(`cannot renew the lease of workflow "${workflowId}"`, workflowId, async (query) => {
      const r = await query(
        `UPDATE ${this.table} SET expires_at = ${now} + CAST($3 AS BIGINT), updated_at = ${now}
         WHERE workflow_id = $1 AND fencing_token = $2 AND owner IS NOT NULL RETURNING expires_at`,
        [workflowId, fencingToken, Math.max(1, Math.ceil(ttlMs))],
      );
      const row = r.rows[0];
      if (row) return Number(row.expires_at);
      throw this.lost(workflowId, "lease renewal refused", fencingToken, await this.current(query, workflowId, false));
    });
  }

  /** {@inheritDoc ColdStore.releaseLease} (unsynced where the driver can be: a release lost with the host only makes the next taker wait for the expiry) */
  async release(workflowId: string, fencingToken: number): Promise<void> {
    const what = `cannot release the lease of workflow "${workflowId}"`;
    const body = (query: SqlQuery) =>
      query(
        `UPDATE ${this.table} SET owner = NULL, expires_at = NULL, updated_at = ${this.driver.nowMs}
         WHERE workflow_id = $1 AND fencing_token = $2`,
        [workflowId, fencingToken],
      );
    await (this.driver.unsyncedTransaction
      ? this.driver.unsyncedTransaction(what, workflowId, body)
      : this.driver.transaction(what, workflowId, body));
  }

  /**
   * Inside a write transaction: locks the workflow's lease row and refuses the write unless
   * `fencingToken` is its current, held lease (and, with `live`, not expired by the database's clock).
   *
   * @param what - the write, for the error (`checkpoint 4 refused`)
   * @throws {WorkflowLeaseLostError} otherwise (the caller's transaction rolls back)
   */
  async fence(query: SqlQuery, workflowId: string, fencingToken: number, what: string, live: boolean): Promise<void> {
    const row = await this.current(query, workflowId, true);
    if (
      row &&
      num(row.fencing_token) === fencingToken &&
      row.owner !== null &&
      row.owner !== undefined &&
      (!live || Number(row.live) === 1)
    ) {
      return;
    }
    throw this.lost(workflowId, what, fencingToken, row);
  }

  /**
   * Inside `deleteWorkflow`'s transaction: ends the workflow's lease (frees it and raises its
   * token), so no token from before the delete passes a fence again; a worker still running the
   * workflow loses its lease (its next renewal, checkpoint or side-effect start is refused).
   */
  async endOnDelete(query: SqlQuery, workflowId: string): Promise<void> {
    await query(
      `UPDATE ${this.table} SET owner = NULL, expires_at = NULL, fencing_token = fencing_token + 1,
         updated_at = ${this.driver.nowMs} WHERE workflow_id = $1`,
      [workflowId],
    );
  }

  /**
   * Deletes, in batches, the free (released, or expired by the database's clock) lease rows of
   * workflows that no longer exist, last changed before `cutoff` (ms), and raises the lease-token
   * floor to the highest token deleted in the same transaction, so the id's next lease starts
   * above it. A live lease is never deleted.
   *
   * @param workflows - the quoted table of workflow summaries
   * @returns rows deleted
   */
  async prune(workflows: string, cutoff: number, batch: number): Promise<number> {
    let deleted = 0;
    for (;;) {
      const n = await this.driver.transaction("cannot prune workflow leases", undefined, async (query) => {
        // First the floor (PostgreSQL: waits for the acquires in flight, holds off new ones till commit).
        const floor = await query(`SELECT fencing_token FROM ${this.floor}${this.driver.forUpdate}`);
        const r = await query(
          `DELETE FROM ${this.table} WHERE workflow_id IN (
             SELECT l.workflow_id FROM ${this.table} l
             WHERE l.updated_at < $1 AND (l.owner IS NULL OR l.expires_at <= ${this.driver.nowMs})
               AND NOT EXISTS (SELECT 1 FROM ${workflows} w WHERE w.workflow_id = l.workflow_id)
             LIMIT $2)
           RETURNING fencing_token`,
          [cutoff, batch],
        );
        const highest = r.rows.reduce((max, row) => Math.max(max, num(row.fencing_token) ?? 0), 0);
        if (highest > (num(floor.rows[0]?.fencing_token) ?? 0)) {
          await query(`UPDATE ${this.floor} SET fencing_token = CAST($1 AS BIGINT)`, [highest]);
        }
        return r.rows.length;
      });
      deleted += n;
      if (n < batch) return deleted;
    }
  }

  private lost(workflowId: string, what: string, fencingToken: number, row: Row | undefined): StaleFencingTokenError {
    return new StaleFencingTokenError({
      workflowId,
      what,
      fencingToken,
      lease: {
        token: num(row?.fencing_token),
        owner: row?.owner === null || row?.owner === undefined ? null : String(row.owner),
        expiresAt: num(row?.expires_at),
      },
    });
  }
}
