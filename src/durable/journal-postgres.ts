/**
 * PostgreSQL journal: the {@link SqlJournal} on the shared PostgreSQL driver.
 * The same four tables as the SQLite journal, in a schema (default
 * `dumplings`). Each change is one transaction that first locks the run's row
 * (`SELECT … FOR UPDATE`), so lease, token check and write are atomic across
 * any number of processes and machines. A server that is down gives a
 * `BackendError`, and the same journal works once it is back.
 *
 * Time is the server's (`statement_timestamp()`): a lease's expiry is compared
 * with it inside the transaction that takes the lease, and every stored time
 * is stamped with it, so workers whose clocks disagree still agree on who
 * holds a run (case pb-32).
 *
 * @module
 */

import { createHash } from "node:crypto";
import { checkOptions, optionKeys } from "../core/options.js";
import {
  type PgLikePool,
  POSTGRES_CONNECTION_KEYS,
  type PostgresConnectionOptions,
  PostgresDriver,
  type PostgresMigrations,
} from "../drivers/postgres.js";
import { RunNotFoundError, StaleFencingTokenError } from "./errors.js";
import {
  blobWrite,
  createOnlyWrite,
  jsonColumn,
  type LeaseResult,
  leaseMs,
  type RunPatch,
  type RunStatus,
  type StepRecord,
  signalFromRow,
  snapshotWrite,
  syncedWrite,
  type UpdateRunResult,
  type WriteStepOptions,
} from "./journal.js";
import { nextOrExisting, SqlJournal, stepRecordValues } from "./journal-sql.js";
import { DEFAULT_JOURNAL_TABLE_PREFIX, RUN_ID_BYTEWISE, sqlJournalMigrations } from "./journal-sql-schema.js";
import { type AcquireLeaseOptions, leaseReentrant } from "./lease.js";

/** The keys of {@link PostgresJournalOptions}: any other is an `InvalidOptionError`. */
const JOURNAL_POSTGRES_OPTIONS = optionKeys<PostgresJournalOptions>({
  ...POSTGRES_CONNECTION_KEYS,
});

export type { PgPoolLike } from "../drivers/postgres.js";

/**
 * Options of {@link PostgresJournal}: the connection options every PostgreSQL
 * component shares — `url` (default `process.env.DATABASE_URL`, else
 * `postgres://127.0.0.1:5432/postgres`), `pool` (injected, left open),
 * `schema` (default `dumplings`), `maxConnections` (default 10; `max` is its
 * deprecated alias), `connectTimeoutMs` (default 5000), `statementTimeoutMs`
 * (default 30000). See {@link PostgresConnectionOptions}.
 */
export interface PostgresJournalOptions extends PostgresConnectionOptions {}

const MIGRATIONS: PostgresMigrations = {
  component: "journal",
  migrations: sqlJournalMigrations(DEFAULT_JOURNAL_TABLE_PREFIX, {
    table: (n) => `{s}."${n}"`,
    bigint: "BIGINT",
    keyed: "",
    bytewise: RUN_ID_BYTEWISE.postgres,
  }),
};

/**
 * PostgreSQL implementation of {@link Journal} (node-postgres, loaded on first use).
 *
 * @example
 * const journal = new PostgresJournal({ url: process.env.DATABASE_URL, schema: "durable" });
 * await runDurable("run-1", workflow, { journal });
 */
export class PostgresJournal extends SqlJournal {
  /** The pool in use (created, or the injected one). */
  readonly pool: PgLikePool;
  /** The schema holding the tables. */
  readonly schema: string;
  private readonly pg: PostgresDriver;
  /** Prepared statements by kind (see {@link named}). */
  private readonly statements = new Map<string, { name: string; text: string }>();

  /**
   * No connection is made here: the tables are created or migrated at the first call.
   *
   * @param options - see {@link PostgresJournalOptions}
   * @param components - @internal migrations of components run after the journal's own, in the
   *   same schema and the same setup transaction (the workflow store's move of its old tables
   *   into the journal); with `create: false`, a schema holding only tables such a component
   *   recognises (its `present`) opens as a journal and is migrated
   * @throws {InvalidOptionError} on a bad schema name, URL, timeout or pool size
   */
  constructor(options: PostgresJournalOptions = {}, components: readonly PostgresMigrations[] = []) {
    checkOptions("postgres", options, JOURNAL_POSTGRES_OPTIONS);
    const driver = new PostgresDriver(
      "postgres",
      options,
      components.length === 0
        ? MIGRATIONS
        : [
            {
              ...MIGRATIONS,
              // A schema holding only a component that moves its tables into the journal opens as a journal.
              present: async (query, schema) => {
                for (const c of components) if ((await c.present?.(query, schema)) === true) return true;
                return false;
              },
            },
            ...components,
          ],
    );
    super(driver);
    this.pg = driver;
    this.pool = driver.pool;
    this.schema = driver.schema;
  }

  /**
   * {@inheritDoc Journal.acquireLease}
   *
   * One statement (one round trip): locks the run's row, takes the lease when
   * it is free, expired or `owner`'s (when reentrant; judged by the server's clock), counts
   * and appends the `lease_acquired` event; else returns the holder. An event
   * index taken by a process of an earlier release takes the transaction of
   * {@link SqlJournal}.
   */
  override async acquireLease(
    runId: string,
    owner: string,
    ttlMs: number,
    options?: AcquireLeaseOptions,
  ): Promise<LeaseResult> {
    const reentrant = leaseReentrant(this.name, options);
    const now = this.pg.nowMs;
    let row: Record<string, unknown> | undefined;
    try {
      row = (
        await this.pg.query(`cannot lease run ${JSON.stringify(runId)}`, runId, {
          ...this.named(
            "lease",
            () => `WITH run AS (
  SELECT lease_owner, lease_expires_at, status FROM ${this.t.runs} WHERE run_id = $1 FOR UPDATE
), taken AS (
  UPDATE ${this.t.runs} SET fencing_token = fencing_token + 1, lease_owner = $2::text,
    lease_expires_at = ${now} + $3::bigint, updated_at = ${now}, event_count = event_count + 1
  WHERE run_id = $1 AND EXISTS (SELECT 1 FROM run)
    AND (lease_owner IS NULL OR lease_expires_at IS NULL OR lease_expires_at <= ${now}
      OR (lease_owner = $2::text AND $4::integer = 1))
  RETURNING fencing_token, lease_expires_at, event_count
), event AS (
  INSERT INTO ${this.t.events} (run_id, idx, type, at, name, fencing_token)
  SELECT $1, event_count - 1, 'lease_acquired', ${now}, $2::text, fencing_token FROM taken
  RETURNING 1
)
SELECT (SELECT count(*) FROM run)::integer AS found, (SELECT lease_owner FROM run) AS owner,
  (SELECT lease_expires_at FROM run) AS owner_expires, (SELECT status FROM run) AS status,
  taken.fencing_token, taken.lease_expires_at,
  (SELECT count(*) FROM event)::integer AS written
FROM (SELECT 1) AS one LEFT JOIN taken ON true`,
          ),
          values: [runId, owner, leaseMs(ttlMs), reentrant ? 1 : 0],
        })
      ).rows[0];
    } catch (e) {
      if (takenIndex(e)) return super.acquireLease(runId, owner, ttlMs, { reentrant });
      throw e;
    }
    if (!row || Number(row.found) === 0) throw new RunNotFoundError(runId);
    if (Number(row.written) === 1) {
      return {
        acquired: true,
        fencingToken: Number(row.fencing_token),
        expiresAt: Number(row.lease_expires_at),
        status: String(row.status) as RunStatus,
      };
    }
    if (row.fencing_token === null || row.fencing_token === undefined) {
      return { acquired: false, owner: String(row.owner), expiresAt: Number(row.owner_expires) };
    }
    return super.acquireLease(runId, owner, ttlMs, { reentrant });
  }

  /**
   * {@inheritDoc Journal.updateRun}
   *
   * One statement (one round trip) unless the run is to wait for a signal:
   * that check must see every signal committed before the run's row was
   * locked, which a statement's snapshot (taken before it waits for the
   * lock) may not, so it takes a transaction of two statements, the lock
   * first (see {@link suspend}). The
   * change to `running` is unsynced (`synchronous_commit = off` for its
   * transaction only).
   */
  override async updateRun(token: number, runId: string, patch: RunPatch): Promise<UpdateRunResult> {
    if (patch.status === "waiting" && patch.waitingFor !== undefined) return this.suspend(token, runId, patch);
    const output = jsonColumn(patch.output, "run output");
    const error = patch.error === undefined ? null : JSON.stringify(patch.error);
    const now = this.pg.nowMs;
    const sync = patch.status !== "running";
    let row: Record<string, unknown> | undefined;
    try {
      row = (
        await this.pg.query(`cannot update run ${JSON.stringify(runId)}`, runId, {
          ...this.named(
            sync ? "update" : "update-unsynced",
            () => `WITH run AS (
  SELECT fencing_token FROM ${this.t.runs} WHERE run_id = $1 FOR UPDATE
), changed AS (
  UPDATE ${this.t.runs} SET status = $2::text, output_json = $3::text, error_json = $4::text, waiting_for = $5::text,
    wake_at = $6::bigint, updated_at = ${now}, event_count = event_count + 1
  WHERE run_id = $1 AND fencing_token = $7::bigint AND EXISTS (SELECT 1 FROM run WHERE fencing_token = $7::bigint)
  RETURNING event_count
), event AS (
  INSERT INTO ${this.t.events} (run_id, idx, type, at, name, fencing_token, detail)
  SELECT $1, event_count - 1, 'run_' || $2::text, ${now}, $5::text, $7::bigint, $8::text FROM changed
  RETURNING 1
)
SELECT (SELECT fencing_token FROM run) AS token, (SELECT count(*) FROM event)::integer AS written${sync ? "" : ", set_config('synchronous_commit', 'off', true) AS unsynced"}`,
          ),
          values: [
            runId,
            patch.status,
            output,
            error,
            patch.waitingFor ?? null,
            patch.wakeAt ?? null,
            token,
            patch.status === "blocked" ? (patch.error?.message ?? null) : null,
          ],
        })
      ).rows[0];
    } catch (e) {
      if (takenIndex(e)) return super.updateRun(token, runId, patch);
      throw e;
    }
    if (Number(row?.written) === 1) return { ok: true };
    if (row?.token === null || row?.token === undefined) throw new RunNotFoundError(runId);
    if (Number(row.token) !== token) throw new StaleFencingTokenError(runId, token, Number(row.token));
    return super.updateRun(token, runId, patch);
  }

  /**
   * {@link updateRun} to wait for a signal: one transaction of two statements
   * (four round trips with its `BEGIN` and `COMMIT`). The first locks the
   * run's row (and reads its token); the second, whose snapshot is therefore
   * taken after every signal committed before the lock was granted
   * (`sendSignal` locks the row too), looks for the signal and, when it has
   * not arrived, suspends the run and counts and appends its event. An event
   * index taken by a process of an earlier release takes the transaction of
   * {@link SqlJournal}.
   */
  private async suspend(token: number, runId: string, patch: RunPatch): Promise<UpdateRunResult> {
    const name = patch.waitingFor as string;
    const output = jsonColumn(patch.output, "run output");
    const error = patch.error === undefined ? null : JSON.stringify(patch.error);
    const lock = this.named("lock", () => `SELECT fencing_token FROM ${this.t.runs} WHERE run_id = $1 FOR UPDATE`);
    const now = this.pg.nowMs;
    const wait = this.named(
      "suspend",
      () => `WITH sig AS (
  SELECT value_json, sent_at FROM ${this.t.signals} WHERE run_id = $1 AND name = $2::text
), changed AS (
  UPDATE ${this.t.runs} SET status = $3::text, output_json = $4::text, error_json = $5::text, waiting_for = $2::text,
    wake_at = $6::bigint, updated_at = ${now}, event_count = event_count + 1
  WHERE run_id = $1 AND NOT EXISTS (SELECT 1 FROM sig)
  RETURNING event_count
), event AS (
  INSERT INTO ${this.t.events} (run_id, idx, type, at, name, fencing_token)
  SELECT $1, event_count - 1, 'run_' || $3::text, ${now}, $2::text, $7::bigint FROM changed
  RETURNING 1
)
SELECT (SELECT count(*) FROM sig)::integer AS arrived, (SELECT value_json FROM sig) AS value_json,
  (SELECT sent_at FROM sig) AS sent_at, (SELECT count(*) FROM event)::integer AS written`,
    );
    try {
      return await this.pg.transaction(`cannot update run ${JSON.stringify(runId)}`, runId, async (query) => {
        const run = (await query(lock.text, [runId])).rows[0];
        if (!run) throw new RunNotFoundError(runId);
        if (Number(run.fencing_token) !== token) {
          throw new StaleFencingTokenError(runId, token, Number(run.fencing_token));
        }
        const values = [runId, name, patch.status, output, error, patch.wakeAt ?? null, token];
        const row = (await query(wait.text, values)).rows[0];
        if (Number(row?.arrived) > 0) {
          return {
            ok: false,
            signal: signalFromRow({ run_id: runId, name, value_json: row?.value_json, sent_at: row?.sent_at }),
          };
        }
        if (Number(row?.written) !== 1) throw new Error(`the suspension of run ${JSON.stringify(runId)} wrote nothing`);
        return { ok: true };
      });
    } catch (e) {
      if (takenIndex(e)) return super.updateRun(token, runId, patch);
      throw e;
    }
  }

  /**
   * A prepared statement of this journal, its text built once by `text`: its name a hash of that text
   * (one name per schema and variant, within PostgreSQL's 63-byte identifiers).
   */
  private named(kind: string, text: () => string): { name: string; text: string } {
    let statement = this.statements.get(kind);
    if (!statement) {
      const sql = text();
      statement = { name: `dumplings_${createHash("sha1").update(sql).digest("hex").slice(0, 24)}`, text: sql };
      this.statements.set(kind, statement);
    }
    return statement;
  }

  /**
   * {@inheritDoc Journal.releaseLease}
   *
   * One statement, unsynced (`synchronous_commit = off` for its transaction only).
   */
  override async releaseLease(runId: string, token: number): Promise<void> {
    await this.pg.query(
      `cannot release the lease of run ${JSON.stringify(runId)}`,
      runId,
      `WITH unsynced AS (SELECT set_config('synchronous_commit', 'off', true))
       UPDATE ${this.t.runs} SET lease_owner = NULL, lease_expires_at = NULL FROM unsynced
       WHERE run_id = $1 AND fencing_token = $2`,
      [runId, token],
    );
  }

  /**
   * {@inheritDoc Journal.writeStep}
   *
   * One statement, so one round trip: it counts the event on the run's row
   * (locking it) where the token, the seq and the record it replaces allow
   * the write, writes the record and appends the event, or writes nothing;
   * a refusal is then checked again, and explained, by the transaction of
   * {@link SqlJournal} (a refusal is rare: a lost lease, a bug). `sync: false` sets
   * `synchronous_commit = off` for that statement's transaction only: the
   * record is in the server when the call returns, and may be lost only if
   * the server itself crashes before its WAL writer flushes it (within
   * about 3 × `wal_writer_delay`) or a later synced commit does. Anything
   * unusual (an event index taken by a process of an earlier release, a seq
   * that is not an integer) takes the transaction of {@link SqlJournal}.
   */
  override async writeStep(token: number, record: StepRecord, options?: WriteStepOptions): Promise<void> {
    const sync = syncedWrite(this.name, options);
    const { runId, seq } = record;
    if (
      !Number.isInteger(seq) ||
      seq < 0 ||
      !Number.isSafeInteger(token) ||
      blobWrite(this.name, options) ||
      createOnlyWrite(options)
    ) {
      // with blobs: the transaction stores and locks them (see SqlJournal); a create-only write: its check
      return super.writeStep(token, record, options);
    }
    const statement = this.named(sync ? "step" : "step-unsynced", () => stepWriteSql(this.t, this.pg.nowMs, sync));
    const values = [...stepRecordValues(token, record, snapshotWrite(options)), `step_${record.status}`];
    let row: Record<string, unknown> | undefined;
    try {
      row = (
        await this.pg.query(`cannot write a step of run ${JSON.stringify(runId)}`, runId, { ...statement, values })
      ).rows[0];
    } catch (e) {
      // 23505: the event's index is taken (a process of the previous release counted the events itself):
      // the statement wrote nothing; the transaction resynchronises the counter.
      if (takenIndex(e) || lostRace(e)) return super.writeStep(token, record, options);
      throw e;
    }
    if (Number(row?.written) === 2) {
      // the record replaced one that held blob references: the blobs nothing references any more go
      const dropped = row?.dropped_refs as string[] | null | undefined;
      if (dropped && dropped.length > 0) await this.dropOrphanBlobs(dropped);
      return;
    }
    // Refused (a stale token, no run, a gap, a completed or renamed record), or written by no one:
    // the transaction checks again, and says why or writes it.
    return super.writeStep(token, record, options);
  }

  /**
   * Drops the journal's schema and everything in it, other components' tables
   * included (tests, teardown). The next call creates the tables again.
   *
   * @throws {BackendError} when PostgreSQL fails
   */
  async dropSchema(): Promise<void> {
    try {
      await this.pool.query(this.pg.sql("DROP SCHEMA IF EXISTS {s} CASCADE"));
    } catch (e) {
      throw this.pg.wrap(e, `cannot drop schema "${this.schema}"`);
    } finally {
      this.pg.forgetMigrations();
    }
  }
}

/**
 * The statement of {@link PostgresJournal.writeStep}: `$1` run id, `$2` seq,
 * `$3` name, `$4` input hash, `$5` status, `$6` output JSON, `$7` error JSON,
 * `$8` attempt, `$9` started at, `$10` finished at, `$11` token, `$12`
 * snapshot (1 or NULL), `$13` event type. Returns one row, `written`: 2 when the record and its event were
 * written, else 0 and nothing was (the caller's transaction then says why), and `dropped_refs`: the blob
 * references of the record it replaced (deleted with it; a record written with blobs takes the transaction).
 * When the event was counted but the record at `seq` turns out completed or of another name (a writer of
 * the same token committed it after this statement's snapshot: the `ON CONFLICT` sees the row as
 * committed, the checks before it do not), the statement fails with 22012 and changes nothing.
 *
 * The run's event counter is incremented where the run's token is `$11` and
 * the record may be written: `seq` is the next position (the highest seq + 1,
 * see `nextOrExisting`) or holds a record of the same name that is not completed.
 * That `UPDATE` locks the run's row and, when it had to wait for the lock,
 * checks the token again on the row as committed (READ COMMITTED); the record
 * and the event are written from its result. The step records are read in the
 * statement's snapshot: every writer of a run's steps holds its current
 * token, so the snapshot's steps are the run's (an operator's change bumps
 * the token, which the locked row shows).
 */
function stepWriteSql(
  t: { runs: string; steps: string; events: string; blobRefs: string },
  now: string,
  sync: boolean,
): string {
  return `WITH counted AS (
  UPDATE ${t.runs} SET event_count = event_count + 1
  WHERE run_id = $1 AND fencing_token = $11::bigint
    AND ${nextOrExisting(t.steps, "$1", "$2::integer")}
    AND NOT EXISTS (SELECT 1 FROM ${t.steps} WHERE run_id = $1 AND seq = $2::integer
      AND (name <> $3::text OR status = 'completed'))
  RETURNING event_count
), step AS (
  INSERT INTO ${t.steps} (run_id, seq, name, input_hash, status, output_json, error_json, attempt, started_at, finished_at, fencing_token, snapshot)
  SELECT $1, $2::integer, $3::text, $4::text, $5::text, $6::text, $7::text, $8::integer, $9::bigint, $10::bigint, $11::bigint, $12::integer FROM counted
  ON CONFLICT (run_id, seq) DO UPDATE SET input_hash = excluded.input_hash, status = excluded.status,
    output_json = excluded.output_json, error_json = excluded.error_json, attempt = excluded.attempt,
    started_at = excluded.started_at, finished_at = excluded.finished_at, fencing_token = excluded.fencing_token,
    snapshot = excluded.snapshot
    WHERE ${t.steps}.name = excluded.name AND ${t.steps}.status <> 'completed'
  RETURNING 1
), event AS (
  INSERT INTO ${t.events} (run_id, idx, type, at, seq, name, attempt, fencing_token)
  SELECT $1, event_count - 1, $13::text, ${now}, $2::integer, $3::text, $8::integer, $11::bigint FROM counted
  RETURNING 1
), refs AS (
  DELETE FROM ${t.blobRefs} WHERE run_id = $1 AND seq = $2::integer AND EXISTS (SELECT 1 FROM counted)
  RETURNING ref
)
SELECT (SELECT count(*) FROM step)::integer + (SELECT count(*) FROM event)::integer AS written,
  (SELECT array_agg(ref) FROM refs) AS dropped_refs,
  CASE WHEN EXISTS (SELECT 1 FROM counted) AND NOT EXISTS (SELECT 1 FROM step)
    THEN 1 / (SELECT count(*) FROM step)::integer END AS lost${sync ? "" : ", set_config('synchronous_commit', 'off', true) AS unsynced"}`;
}

/**
 * Whether a one-statement write failed because its event's index was taken
 * (23505, by a process of the previous release that counted the events
 * itself): the statement wrote nothing, and the transaction resynchronises
 * the counter.
 */
function takenIndex(e: unknown): boolean {
  return (e as { cause?: { code?: unknown } } | null)?.cause?.code === "23505";
}

/**
 * Whether a one-statement step write found the record at its seq completed (or of another name) by
 * a writer of the same token that committed after the statement's snapshot was taken: the
 * statement raises 22012 (its `lost` column divides by zero) so that nothing it counted or wrote
 * stays, and the transaction of {@link SqlJournal} then says why.
 */
function lostRace(e: unknown): boolean {
  return (e as { cause?: { code?: unknown } } | null)?.cause?.code === "22012";
}
