/**
 * SQLite journal (embedded default): four tables in one database file,
 * WAL mode, every operation one `BEGIN IMMEDIATE` transaction, so several
 * processes on one machine can share the file safely.
 *
 * @module
 */
import Database from "better-sqlite3";
import { DumplingsError } from "../core/errors.js";
import { assertJson, type JsonValue } from "../core/json.js";
import { JournalIntegrityError, RunNotFoundError, SignalConflictError, StaleFencingTokenError } from "./errors.js";

type Row = JournalRow;

import {
  checkStepWrite,
  eventFromRow,
  type Journal,
  type JournalEvent,
  type JournalEventType,
  type JournalRow,
  jsonColumn,
  type LeaseResult,
  parseStored,
  type RecordedError,
  type RunPatch,
  type RunRecord,
  type RunStatus,
  runFromRow,
  type SignalRecord,
  type StepRecord,
  signalFromRow,
  stepFromRow,
  type UpdateRunResult,
} from "./journal.js";

/** Options of {@link SqliteJournal}. */
export interface SqliteJournalOptions {
  /** Database file path (created when missing). Ignored when `database` is given. @default "./.dumplings-durable.db" */
  path?: string;
  /** An open better-sqlite3 database to use instead (not closed by {@link SqliteJournal.close}). */
  database?: Database.Database;
  /** Prefix of the table names. @default "durable_" */
  tablePrefix?: string;
  /** How long (ms) to wait for another process's write lock. @default 10000 */
  busyTimeoutMs?: number;
}

/**
 * SQLite implementation of {@link Journal} (better-sqlite3).
 *
 * @example
 * const journal = new SqliteJournal({ path: "/var/lib/app/durable.db" });
 * const result = await runDurable("run-1", myWorkflow, { journal, input: { q: "hi" } });
 */
export class SqliteJournal implements Journal {
  readonly name = "sqlite";
  readonly db: Database.Database;
  private readonly owned: boolean;
  private readonly t: { runs: string; steps: string; signals: string; events: string };

  /**
   * @param options - `path` or `database`, `tablePrefix` (default `durable_`), `busyTimeoutMs` (default 10000)
   * @throws {DumplingsError} `BACKEND_ERROR` when the file cannot be opened
   */
  constructor(options: SqliteJournalOptions = {}) {
    const prefix = options.tablePrefix ?? "durable_";
    if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(prefix)) {
      throw new DumplingsError("INVALID_OPTION", `invalid SQLite table prefix ${JSON.stringify(prefix)}`);
    }
    this.t = {
      runs: `${prefix}runs`,
      steps: `${prefix}steps`,
      signals: `${prefix}signals`,
      events: `${prefix}events`,
    };
    try {
      this.owned = !options.database;
      this.db = options.database ?? new Database(options.path ?? "./.dumplings-durable.db");
      this.db.pragma(`busy_timeout = ${options.busyTimeoutMs ?? 10_000}`);
      if (this.owned) this.db.pragma("journal_mode = WAL");
      this.db.exec(`
        CREATE TABLE IF NOT EXISTS ${this.t.runs} (
          run_id TEXT PRIMARY KEY, workflow TEXT NOT NULL, status TEXT NOT NULL, input_json TEXT NOT NULL,
          output_json TEXT, error_json TEXT, waiting_for TEXT, wake_at INTEGER,
          fencing_token INTEGER NOT NULL DEFAULT 0, lease_owner TEXT, lease_expires_at INTEGER,
          created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL);
        CREATE INDEX IF NOT EXISTS ${this.t.runs}_status ON ${this.t.runs} (status, created_at);
        CREATE TABLE IF NOT EXISTS ${this.t.steps} (
          run_id TEXT NOT NULL, seq INTEGER NOT NULL, name TEXT NOT NULL, input_hash TEXT NOT NULL,
          status TEXT NOT NULL, output_json TEXT, error_json TEXT, attempt INTEGER NOT NULL,
          started_at INTEGER NOT NULL, finished_at INTEGER, fencing_token INTEGER NOT NULL,
          PRIMARY KEY (run_id, seq)) WITHOUT ROWID;
        CREATE TABLE IF NOT EXISTS ${this.t.signals} (
          run_id TEXT NOT NULL, name TEXT NOT NULL, value_json TEXT NOT NULL, sent_at INTEGER NOT NULL,
          PRIMARY KEY (run_id, name)) WITHOUT ROWID;
        CREATE TABLE IF NOT EXISTS ${this.t.events} (
          run_id TEXT NOT NULL, idx INTEGER NOT NULL, type TEXT NOT NULL, at INTEGER NOT NULL,
          seq INTEGER, name TEXT, attempt INTEGER, fencing_token INTEGER,
          PRIMARY KEY (run_id, idx)) WITHOUT ROWID;
      `);
    } catch (cause) {
      throw new DumplingsError(
        "BACKEND_ERROR",
        `[dumplings:sqlite] cannot open the durable journal: ${String(cause)}`,
        {
          cause,
        },
      );
    }
  }

  private tx<T>(fn: () => T): Promise<T> {
    try {
      return Promise.resolve(this.db.transaction(fn).immediate());
    } catch (e) {
      return Promise.reject(e);
    }
  }

  private event(runId: string, type: JournalEventType, e: Partial<JournalEvent> = {}): void {
    const row = this.db.prepare(`SELECT COUNT(*) AS n FROM ${this.t.events} WHERE run_id = ?`).get(runId) as Row;
    this.db
      .prepare(
        `INSERT INTO ${this.t.events} (run_id, idx, type, at, seq, name, attempt, fencing_token) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
      )
      .run(
        runId,
        Number(row.n),
        type,
        Date.now(),
        e.seq ?? null,
        e.name ?? null,
        e.attempt ?? null,
        e.fencingToken ?? null,
      );
  }

  private runRow(runId: string): Row | undefined {
    return this.db.prepare(`SELECT * FROM ${this.t.runs} WHERE run_id = ?`).get(runId) as Row | undefined;
  }

  private requireRun(runId: string): Row {
    const row = this.runRow(runId);
    if (!row) throw new RunNotFoundError(runId);
    return row;
  }

  private checkToken(runId: string, token: number): Row {
    const row = this.requireRun(runId);
    if (Number(row.fencing_token) !== token) throw new StaleFencingTokenError(runId, token, Number(row.fencing_token));
    return row;
  }

  /** {@inheritDoc Journal.createRun} */
  async createRun(init: { runId: string; workflow: string; input: JsonValue }) {
    const input = jsonColumn(init.input, "run input") ?? "null";
    return this.tx(() => {
      const existing = this.runRow(init.runId);
      if (existing) return { created: false, run: runFromRow(existing) };
      const now = Date.now();
      this.db
        .prepare(
          `INSERT INTO ${this.t.runs} (run_id, workflow, status, input_json, fencing_token, created_at, updated_at) VALUES (?, ?, 'pending', ?, 0, ?, ?)`,
        )
        .run(init.runId, init.workflow, input, now, now);
      this.event(init.runId, "run_created", { name: init.workflow });
      return { created: true, run: runFromRow(this.requireRun(init.runId)) };
    });
  }

  /** {@inheritDoc Journal.getRun} */
  async getRun(runId: string): Promise<RunRecord | undefined> {
    const row = this.runRow(runId);
    return row ? runFromRow(row) : undefined;
  }

  /** {@inheritDoc Journal.listRuns} */
  async listRuns(filter: { status?: RunStatus; limit?: number } = {}): Promise<RunRecord[]> {
    const limit = filter.limit ?? 1000;
    const rows = filter.status
      ? this.db
          .prepare(`SELECT * FROM ${this.t.runs} WHERE status = ? ORDER BY created_at DESC, run_id LIMIT ?`)
          .all(filter.status, limit)
      : this.db.prepare(`SELECT * FROM ${this.t.runs} ORDER BY created_at DESC, run_id LIMIT ?`).all(limit);
    return (rows as Row[]).map(runFromRow);
  }

  /** {@inheritDoc Journal.acquireLease} */
  async acquireLease(runId: string, owner: string, ttlMs: number): Promise<LeaseResult> {
    return this.tx((): LeaseResult => {
      const row = this.requireRun(runId);
      const now = Date.now();
      const heldBy = row.lease_owner === null ? undefined : String(row.lease_owner);
      const expiresAt = row.lease_expires_at === null ? undefined : Number(row.lease_expires_at);
      if (heldBy !== undefined && expiresAt !== undefined && expiresAt > now && heldBy !== owner) {
        return { acquired: false, owner: heldBy, expiresAt };
      }
      const token = Number(row.fencing_token) + 1;
      this.db
        .prepare(
          `UPDATE ${this.t.runs} SET fencing_token = ?, lease_owner = ?, lease_expires_at = ?, updated_at = ? WHERE run_id = ?`,
        )
        .run(token, owner, now + ttlMs, now, runId);
      this.event(runId, "lease_acquired", { name: owner, fencingToken: token });
      return { acquired: true, fencingToken: token, expiresAt: now + ttlMs };
    });
  }

  /** {@inheritDoc Journal.renewLease} */
  async renewLease(runId: string, token: number, ttlMs: number): Promise<number> {
    return this.tx(() => {
      this.checkToken(runId, token);
      const expiresAt = Date.now() + ttlMs;
      this.db.prepare(`UPDATE ${this.t.runs} SET lease_expires_at = ? WHERE run_id = ?`).run(expiresAt, runId);
      return expiresAt;
    });
  }

  /** {@inheritDoc Journal.releaseLease} */
  async releaseLease(runId: string, token: number): Promise<void> {
    return this.tx(() => {
      this.db
        .prepare(
          `UPDATE ${this.t.runs} SET lease_owner = NULL, lease_expires_at = NULL WHERE run_id = ? AND fencing_token = ?`,
        )
        .run(runId, token);
    });
  }

  /** {@inheritDoc Journal.readSteps} */
  async readSteps(runId: string): Promise<StepRecord[]> {
    const rows = this.db.prepare(`SELECT * FROM ${this.t.steps} WHERE run_id = ? ORDER BY seq`).all(runId) as Row[];
    return rows.map(stepFromRow);
  }

  /** {@inheritDoc Journal.writeStep} */
  async writeStep(token: number, record: StepRecord): Promise<void> {
    const output = jsonColumn(record.output, `step "${record.name}" output`);
    const error = record.error === undefined ? null : JSON.stringify(record.error);
    return this.tx(() => {
      const run = this.checkToken(record.runId, token);
      const count = Number(
        (this.db.prepare(`SELECT COUNT(*) AS n FROM ${this.t.steps} WHERE run_id = ?`).get(record.runId) as Row).n,
      );
      const existing = this.db
        .prepare(`SELECT name, status FROM ${this.t.steps} WHERE run_id = ? AND seq = ?`)
        .get(record.runId, record.seq) as { name: string; status: string } | undefined;
      checkStepWrite(record.runId, token, Number(run.fencing_token), count, existing, record);
      this.db
        .prepare(
          `INSERT INTO ${this.t.steps} (run_id, seq, name, input_hash, status, output_json, error_json, attempt, started_at, finished_at, fencing_token)
           VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
           ON CONFLICT (run_id, seq) DO UPDATE SET input_hash = excluded.input_hash, status = excluded.status,
             output_json = excluded.output_json, error_json = excluded.error_json, attempt = excluded.attempt,
             started_at = excluded.started_at, finished_at = excluded.finished_at, fencing_token = excluded.fencing_token`,
        )
        .run(
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
        );
      this.event(record.runId, `step_${record.status}`, {
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
    return this.tx((): UpdateRunResult => {
      this.checkToken(runId, token);
      if (patch.status === "waiting" && patch.waitingFor !== undefined) {
        const sig = this.db
          .prepare(`SELECT * FROM ${this.t.signals} WHERE run_id = ? AND name = ?`)
          .get(runId, patch.waitingFor) as Row | undefined;
        if (sig) return { ok: false, signal: signalFromRow(sig) };
      }
      this.db
        .prepare(
          `UPDATE ${this.t.runs} SET status = ?, output_json = ?, error_json = ?, waiting_for = ?, wake_at = ?, updated_at = ? WHERE run_id = ?`,
        )
        .run(patch.status, output, error, patch.waitingFor ?? null, patch.wakeAt ?? null, Date.now(), runId);
      this.event(runId, `run_${patch.status}` as JournalEventType, {
        name: patch.waitingFor,
        fencingToken: token,
      });
      return { ok: true };
    });
  }

  /** {@inheritDoc Journal.sendSignal} */
  async sendSignal(runId: string, name: string, value: JsonValue): Promise<RunRecord> {
    const text = jsonColumn(value, `signal "${name}" value`) ?? "null";
    return this.tx(() => {
      const run = this.requireRun(runId);
      const exists = this.db.prepare(`SELECT 1 FROM ${this.t.signals} WHERE run_id = ? AND name = ?`).get(runId, name);
      if (exists) throw new SignalConflictError(runId, name);
      this.db
        .prepare(`INSERT INTO ${this.t.signals} (run_id, name, value_json, sent_at) VALUES (?, ?, ?, ?)`)
        .run(runId, name, text, Date.now());
      this.event(runId, "signal_received", { name });
      return runFromRow(run);
    });
  }

  /** {@inheritDoc Journal.getSignal} */
  async getSignal(runId: string, name: string): Promise<SignalRecord | undefined> {
    const row = this.db.prepare(`SELECT * FROM ${this.t.signals} WHERE run_id = ? AND name = ?`).get(runId, name);
    return row ? signalFromRow(row as Row) : undefined;
  }

  /** {@inheritDoc Journal.listSignals} */
  async listSignals(runId: string): Promise<SignalRecord[]> {
    const rows = this.db.prepare(`SELECT * FROM ${this.t.signals} WHERE run_id = ? ORDER BY sent_at, name`).all(runId);
    return (rows as Row[]).map(signalFromRow);
  }

  /** {@inheritDoc Journal.readEvents} */
  async readEvents(runId: string): Promise<JournalEvent[]> {
    const rows = this.db.prepare(`SELECT * FROM ${this.t.events} WHERE run_id = ? ORDER BY idx`).all(runId);
    return (rows as Row[]).map(eventFromRow);
  }

  /** {@inheritDoc Journal.deleteRun} */
  async deleteRun(runId: string): Promise<void> {
    return this.tx(() => {
      for (const table of Object.values(this.t)) this.db.prepare(`DELETE FROM ${table} WHERE run_id = ?`).run(runId);
    });
  }

  /** Closes the database when this journal opened it. */
  async close(): Promise<void> {
    if (this.owned && this.db.open) this.db.close();
  }
}
