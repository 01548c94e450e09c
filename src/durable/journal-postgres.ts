/**
 * PostgreSQL journal: the same four tables as the SQLite store, in a schema
 * of their own. Each operation is one transaction that first locks the run's
 * row (`SELECT … FOR UPDATE`), so lease, token check and write are atomic
 * across any number of processes and machines.
 *
 * @module
 */
import pg from "pg";
import { BackendError, DumplingsError } from "../core/errors.js";
import type { JsonValue } from "../core/json.js";
import { RunNotFoundError, SignalConflictError, StaleFencingTokenError } from "./errors.js";
import type {
  Journal,
  JournalEvent,
  JournalEventType,
  LeaseResult,
  RunPatch,
  RunRecord,
  RunStatus,
  SignalRecord,
  StepRecord,
  UpdateRunResult,
} from "./journal.js";
import { checkStepWrite, eventFromRow, jsonColumn, runFromRow, signalFromRow, stepFromRow } from "./journal.js";

type Row = Record<string, unknown>;

/** The part of a `pg.Pool` the journal uses (inject any compatible pool). */
export interface PgPoolLike {
  connect(): Promise<pg.PoolClient>;
  query(text: string, values?: unknown[]): Promise<{ rows: Row[]; rowCount: number | null }>;
  end(): Promise<void>;
}

/** Options of {@link PostgresJournal}. */
export interface PostgresJournalOptions {
  /** A pool to use (not ended by `close()`); else one is created from `url`. */
  pool?: PgPoolLike;
  /** Connection string. @default process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/postgres" */
  url?: string;
  /** Schema holding the tables (created when missing). @default "dumplings" */
  schema?: string;
  /** Pool size when the pool is created here. @default 5 */
  max?: number;
}

/**
 * PostgreSQL implementation of {@link Journal} (node-postgres).
 *
 * @example
 * const journal = new PostgresJournal({ url: process.env.DATABASE_URL, schema: "durable" });
 * await runDurable("run-1", workflow, { journal });
 */
export class PostgresJournal implements Journal {
  readonly name = "postgres";
  readonly pool: PgPoolLike;
  private readonly owned: boolean;
  private readonly schema: string;
  private readonly t: { runs: string; steps: string; signals: string; events: string };
  private migrated: Promise<void> | undefined;

  /**
   * @param options - `pool` or `url`, `schema` (default `dumplings`), `max` (default 5)
   * @throws {DumplingsError} `INVALID_OPTION` on a bad schema name
   */
  constructor(options: PostgresJournalOptions = {}) {
    const schema = options.schema ?? "dumplings";
    if (!/^[A-Za-z_][A-Za-z0-9_]{0,62}$/.test(schema)) {
      throw new DumplingsError("INVALID_OPTION", `invalid PostgreSQL schema name ${JSON.stringify(schema)}`);
    }
    this.schema = schema;
    const q = (n: string) => `"${schema}"."${n}"`;
    this.t = {
      runs: q("durable_runs"),
      steps: q("durable_steps"),
      signals: q("durable_signals"),
      events: q("durable_events"),
    };
    this.owned = !options.pool;
    this.pool =
      options.pool ??
      (new pg.Pool({
        connectionString: options.url ?? process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/postgres",
        max: options.max ?? 5,
      }) as unknown as PgPoolLike);
  }

  private migrate(): Promise<void> {
    this.migrated ??= (async () => {
      const c = await this.pool.connect();
      try {
        await c.query("BEGIN");
        await c.query("SELECT pg_advisory_xact_lock(hashtext($1))", [`dumplings-durable:${this.schema}`]);
        await c.query(`CREATE SCHEMA IF NOT EXISTS "${this.schema}"`);
        await c.query(`
          CREATE TABLE IF NOT EXISTS ${this.t.runs} (
            run_id TEXT PRIMARY KEY, workflow TEXT NOT NULL, status TEXT NOT NULL, input_json TEXT NOT NULL,
            output_json TEXT, error_json TEXT, waiting_for TEXT, wake_at BIGINT,
            fencing_token BIGINT NOT NULL DEFAULT 0, lease_owner TEXT, lease_expires_at BIGINT,
            created_at BIGINT NOT NULL, updated_at BIGINT NOT NULL);
          CREATE INDEX IF NOT EXISTS durable_runs_status ON ${this.t.runs} (status, created_at);
          CREATE TABLE IF NOT EXISTS ${this.t.steps} (
            run_id TEXT NOT NULL, seq INTEGER NOT NULL, name TEXT NOT NULL, input_hash TEXT NOT NULL,
            status TEXT NOT NULL, output_json TEXT, error_json TEXT, attempt INTEGER NOT NULL,
            started_at BIGINT NOT NULL, finished_at BIGINT, fencing_token BIGINT NOT NULL,
            PRIMARY KEY (run_id, seq));
          CREATE TABLE IF NOT EXISTS ${this.t.signals} (
            run_id TEXT NOT NULL, name TEXT NOT NULL, value_json TEXT NOT NULL, sent_at BIGINT NOT NULL,
            PRIMARY KEY (run_id, name));
          CREATE TABLE IF NOT EXISTS ${this.t.events} (
            run_id TEXT NOT NULL, idx INTEGER NOT NULL, type TEXT NOT NULL, at BIGINT NOT NULL,
            seq INTEGER, name TEXT, attempt INTEGER, fencing_token BIGINT,
            PRIMARY KEY (run_id, idx));`);
        await c.query("COMMIT");
      } catch (cause) {
        await c.query("ROLLBACK").catch(() => undefined);
        this.migrated = undefined;
        throw new BackendError("postgres", `cannot create the durable journal tables in schema "${this.schema}"`, {
          cause,
        });
      } finally {
        c.release();
      }
    })();
    return this.migrated;
  }

  private async tx<T>(what: string, runId: string, fn: (c: pg.PoolClient) => Promise<T>): Promise<T> {
    await this.migrate();
    let c: pg.PoolClient;
    try {
      c = await this.pool.connect();
    } catch (cause) {
      throw new BackendError("postgres", `cannot ${what} run "${runId}"`, { key: runId, cause });
    }
    try {
      await c.query("BEGIN");
      const out = await fn(c);
      await c.query("COMMIT");
      return out;
    } catch (error) {
      await c.query("ROLLBACK").catch(() => undefined);
      if (error instanceof DumplingsError) throw error;
      throw new BackendError("postgres", `cannot ${what} run "${runId}"`, { key: runId, cause: error });
    } finally {
      c.release();
    }
  }

  private async query(what: string, runId: string, text: string, values: unknown[]): Promise<Row[]> {
    await this.migrate();
    try {
      return (await this.pool.query(text, values)).rows;
    } catch (cause) {
      throw new BackendError("postgres", `cannot ${what} run "${runId}"`, { key: runId, cause });
    }
  }

  private async lockRun(c: pg.PoolClient, runId: string): Promise<Row> {
    const { rows } = await c.query(`SELECT * FROM ${this.t.runs} WHERE run_id = $1 FOR UPDATE`, [runId]);
    const row = rows[0] as Row | undefined;
    if (!row) throw new RunNotFoundError(runId);
    return row;
  }

  private async lockToken(c: pg.PoolClient, runId: string, token: number): Promise<Row> {
    const row = await this.lockRun(c, runId);
    if (Number(row.fencing_token) !== token) throw new StaleFencingTokenError(runId, token, Number(row.fencing_token));
    return row;
  }

  private async event(c: pg.PoolClient, runId: string, type: JournalEventType, e: Partial<JournalEvent> = {}) {
    await c.query(
      `INSERT INTO ${this.t.events} (run_id, idx, type, at, seq, name, attempt, fencing_token)
       SELECT $1, COALESCE(MAX(idx) + 1, 0), $2, $3, $4, $5, $6, $7 FROM ${this.t.events} WHERE run_id = $1`,
      [runId, type, Date.now(), e.seq ?? null, e.name ?? null, e.attempt ?? null, e.fencingToken ?? null],
    );
  }

  /** {@inheritDoc Journal.createRun} */
  async createRun(init: { runId: string; workflow: string; input: JsonValue }) {
    const input = jsonColumn(init.input, "run input") ?? "null";
    return this.tx("create", init.runId, async (c) => {
      const now = Date.now();
      const ins = await c.query(
        `INSERT INTO ${this.t.runs} (run_id, workflow, status, input_json, fencing_token, created_at, updated_at)
         VALUES ($1, $2, 'pending', $3, 0, $4, $4) ON CONFLICT (run_id) DO NOTHING RETURNING *`,
        [init.runId, init.workflow, input, now],
      );
      if (ins.rows[0]) {
        await this.event(c, init.runId, "run_created", { name: init.workflow });
        return { created: true, run: runFromRow(ins.rows[0] as Row) };
      }
      return { created: false, run: runFromRow(await this.lockRun(c, init.runId)) };
    });
  }

  /** {@inheritDoc Journal.getRun} */
  async getRun(runId: string): Promise<RunRecord | undefined> {
    const rows = await this.query("read", runId, `SELECT * FROM ${this.t.runs} WHERE run_id = $1`, [runId]);
    return rows[0] ? runFromRow(rows[0]) : undefined;
  }

  /** {@inheritDoc Journal.listRuns} */
  async listRuns(filter: { status?: RunStatus; limit?: number } = {}): Promise<RunRecord[]> {
    const rows = await this.query(
      "list",
      "*",
      `SELECT * FROM ${this.t.runs} WHERE ($1::text IS NULL OR status = $1) ORDER BY created_at DESC, run_id LIMIT $2`,
      [filter.status ?? null, filter.limit ?? 1000],
    );
    return rows.map(runFromRow);
  }

  /** {@inheritDoc Journal.acquireLease} */
  async acquireLease(runId: string, owner: string, ttlMs: number): Promise<LeaseResult> {
    return this.tx("lease", runId, async (c): Promise<LeaseResult> => {
      const row = await this.lockRun(c, runId);
      const now = Date.now();
      const heldBy = row.lease_owner === null ? undefined : String(row.lease_owner);
      const expiresAt = row.lease_expires_at === null ? undefined : Number(row.lease_expires_at);
      if (heldBy !== undefined && expiresAt !== undefined && expiresAt > now && heldBy !== owner) {
        return { acquired: false, owner: heldBy, expiresAt };
      }
      const token = Number(row.fencing_token) + 1;
      await c.query(
        `UPDATE ${this.t.runs} SET fencing_token = $1, lease_owner = $2, lease_expires_at = $3, updated_at = $4 WHERE run_id = $5`,
        [token, owner, now + ttlMs, now, runId],
      );
      await this.event(c, runId, "lease_acquired", { name: owner, fencingToken: token });
      return { acquired: true, fencingToken: token, expiresAt: now + ttlMs };
    });
  }

  /** {@inheritDoc Journal.renewLease} */
  async renewLease(runId: string, token: number, ttlMs: number): Promise<number> {
    return this.tx("renew the lease of", runId, async (c) => {
      await this.lockToken(c, runId, token);
      const expiresAt = Date.now() + ttlMs;
      await c.query(`UPDATE ${this.t.runs} SET lease_expires_at = $1 WHERE run_id = $2`, [expiresAt, runId]);
      return expiresAt;
    });
  }

  /** {@inheritDoc Journal.releaseLease} */
  async releaseLease(runId: string, token: number): Promise<void> {
    await this.query(
      "release the lease of",
      runId,
      `UPDATE ${this.t.runs} SET lease_owner = NULL, lease_expires_at = NULL WHERE run_id = $1 AND fencing_token = $2`,
      [runId, token],
    );
  }

  /** {@inheritDoc Journal.readSteps} */
  async readSteps(runId: string): Promise<StepRecord[]> {
    const rows = await this.query(
      "read the steps of",
      runId,
      `SELECT * FROM ${this.t.steps} WHERE run_id = $1 ORDER BY seq`,
      [runId],
    );
    return rows.map(stepFromRow);
  }

  /** {@inheritDoc Journal.writeStep} */
  async writeStep(token: number, record: StepRecord): Promise<void> {
    const output = jsonColumn(record.output, `step "${record.name}" output`);
    const error = record.error === undefined ? null : JSON.stringify(record.error);
    await this.tx("write a step of", record.runId, async (c) => {
      const run = await this.lockToken(c, record.runId, token);
      const count = Number(
        (await c.query(`SELECT COUNT(*) AS n FROM ${this.t.steps} WHERE run_id = $1`, [record.runId])).rows[0]?.n,
      );
      const existing = (
        await c.query(`SELECT name, status FROM ${this.t.steps} WHERE run_id = $1 AND seq = $2`, [
          record.runId,
          record.seq,
        ])
      ).rows[0] as { name: string; status: string } | undefined;
      checkStepWrite(record.runId, token, Number(run.fencing_token), count, existing, record);
      await c.query(
        `INSERT INTO ${this.t.steps} (run_id, seq, name, input_hash, status, output_json, error_json, attempt, started_at, finished_at, fencing_token)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
         ON CONFLICT (run_id, seq) DO UPDATE SET input_hash = EXCLUDED.input_hash, status = EXCLUDED.status,
           output_json = EXCLUDED.output_json, error_json = EXCLUDED.error_json, attempt = EXCLUDED.attempt,
           started_at = EXCLUDED.started_at, finished_at = EXCLUDED.finished_at, fencing_token = EXCLUDED.fencing_token`,
        [
          record.runId,
          record.seq,
          record.name,
          record.inputHash,
          record.status,
          output,
          error,
          record.attempt,
          record.startedAt,
          record.finishedAt ?? null,
          token,
        ],
      );
      await this.event(c, record.runId, `step_${record.status}`, {
        seq: record.seq,
        name: record.name,
        attempt: record.attempt,
        fencingToken: token,
      });
    });
  }

  /** {@inheritDoc Journal.updateRun} */
  async updateRun(token: number, runId: string, patch: RunPatch): Promise<UpdateRunResult> {
    const output = jsonColumn(patch.output, "run output");
    const error = patch.error === undefined ? null : JSON.stringify(patch.error);
    return this.tx("update", runId, async (c): Promise<UpdateRunResult> => {
      await this.lockToken(c, runId, token);
      if (patch.status === "waiting" && patch.waitingFor !== undefined) {
        const sig = (
          await c.query(`SELECT * FROM ${this.t.signals} WHERE run_id = $1 AND name = $2`, [runId, patch.waitingFor])
        ).rows[0] as Row | undefined;
        if (sig) return { ok: false, signal: signalFromRow(sig) };
      }
      await c.query(
        `UPDATE ${this.t.runs} SET status = $1, output_json = $2, error_json = $3, waiting_for = $4, wake_at = $5, updated_at = $6 WHERE run_id = $7`,
        [patch.status, output, error, patch.waitingFor ?? null, patch.wakeAt ?? null, Date.now(), runId],
      );
      await this.event(c, runId, `run_${patch.status}` as JournalEventType, {
        name: patch.waitingFor,
        fencingToken: token,
      });
      return { ok: true };
    });
  }

  /** {@inheritDoc Journal.sendSignal} */
  async sendSignal(runId: string, name: string, value: JsonValue): Promise<RunRecord> {
    const text = jsonColumn(value, `signal "${name}" value`) ?? "null";
    return this.tx("signal", runId, async (c) => {
      const run = await this.lockRun(c, runId);
      const ins = await c.query(
        `INSERT INTO ${this.t.signals} (run_id, name, value_json, sent_at) VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING`,
        [runId, name, text, Date.now()],
      );
      if (!ins.rowCount) throw new SignalConflictError(runId, name);
      await this.event(c, runId, "signal_received", { name });
      return runFromRow(run);
    });
  }

  /** {@inheritDoc Journal.getSignal} */
  async getSignal(runId: string, name: string): Promise<SignalRecord | undefined> {
    const rows = await this.query(
      "read a signal of",
      runId,
      `SELECT * FROM ${this.t.signals} WHERE run_id = $1 AND name = $2`,
      [runId, name],
    );
    return rows[0] ? signalFromRow(rows[0]) : undefined;
  }

  /** {@inheritDoc Journal.listSignals} */
  async listSignals(runId: string): Promise<SignalRecord[]> {
    const rows = await this.query(
      "list the signals of",
      runId,
      `SELECT * FROM ${this.t.signals} WHERE run_id = $1 ORDER BY sent_at, name`,
      [runId],
    );
    return rows.map(signalFromRow);
  }

  /** {@inheritDoc Journal.readEvents} */
  async readEvents(runId: string): Promise<JournalEvent[]> {
    const rows = await this.query(
      "read the events of",
      runId,
      `SELECT * FROM ${this.t.events} WHERE run_id = $1 ORDER BY idx`,
      [runId],
    );
    return rows.map(eventFromRow);
  }

  /** {@inheritDoc Journal.deleteRun} */
  async deleteRun(runId: string): Promise<void> {
    await this.tx("delete", runId, async (c) => {
      for (const table of Object.values(this.t)) await c.query(`DELETE FROM ${table} WHERE run_id = $1`, [runId]);
    });
  }

  /** Drops the journal's schema and everything in it (tests, teardown). */
  async dropSchema(): Promise<void> {
    await this.pool.query(`DROP SCHEMA IF EXISTS "${this.schema}" CASCADE`);
    this.migrated = undefined;
  }

  /** Ends the pool when this journal created it. */
  async close(): Promise<void> {
    if (this.owned) await this.pool.end();
  }
}
