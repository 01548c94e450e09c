/**
 * The SQL journal, written once for every SQL database: the four tables of a
 * durable run (runs, steps, signals, events) over the async {@link SqlDriver}
 * contract. `SqliteJournal` and `PostgresJournal` are this class with their
 * driver; the dialect differences live in the drivers (placeholders, row
 * locks, error mapping) and in {@link sqlJournalMigrations}' per-dialect
 * spelling of the DDL.
 *
 * Atomicity: every operation that changes a run is one transaction that
 * first reads the run's row with `driver.forUpdate` (PostgreSQL: `SELECT …
 * FOR UPDATE`, a row lock held until commit; SQLite: `BEGIN IMMEDIATE`
 * already holds the file's write lock), so the token check, the write and the
 * audit event are atomic across any number of processes and machines.
 *
 * The audit log costs O(1) per event: the run's row carries the number of
 * events written so far (`event_count`, migration 2), incremented in the same
 * transaction as the event it numbers.
 *
 * Time is the database's ({@link SqlDriver.nowMs}, written inline in the
 * statements): lease expiry is compared with it in the same `UPDATE` that
 * takes the lease, after the run's row is locked, and `expiresAt`,
 * `created_at`, `updated_at`, event `at` and signal `sent_at` are stamped
 * with it. No value of the caller's `Date.now()` reaches the tables, except
 * the step records' `started_at`/`finished_at`, which the executor writes.
 *
 * @module
 */
import type { JsonValue } from "../core/json.js";
import type { SqlDriver, SqlQuery, SqlResult } from "../drivers/sql.js";
import { JournalIntegrityError, SignalConflictError } from "./errors.js";
import {
  type BlobWrite,
  blobWrite,
  checkListRuns,
  checkPruneOptions,
  checkResetSeq,
  checkStepQuery,
  checkStepWrite,
  createOnlyWrite,
  ENDED_RUN_STATUSES,
  eventFromRow,
  type Journal,
  type JournalEvent,
  type JournalEventInput,
  type JournalEventType,
  type JournalRow,
  jsonColumn,
  type LeaseResult,
  type ListRunsFilter,
  leaseMs,
  outputBytes,
  type PruneOptions,
  type PruneResult,
  RETRYABLE_RUN_STATUSES,
  type RunPatch,
  type RunRecord,
  type RunStatus,
  retryRefused,
  runFromRow,
  type SignalRecord,
  type StepQuery,
  type StepRecord,
  signalFromRow,
  signalRefused,
  snapshotWrite,
  sqlListRuns,
  stepFromRow,
  syncedWrite,
  type UpdateRunResult,
  type WriteStepOptions,
} from "./journal.js";
import { DEFAULT_JOURNAL_TABLE_PREFIX, RUN_ID_BYTEWISE } from "./journal-sql-schema.js";
import {
  asBuffer,
  BLOB_CHUNK,
  chunks,
  headOf,
  PRUNE_BATCH,
  placeholders,
  RESET_COLUMNS,
  requireRun,
  requireToken,
  runAsync,
  runSync,
  type SqlSteps,
  type StepHead,
  sqlTexts,
  stepRecordValues,
  what,
} from "./journal-sql-statements.js";
import { type AcquireLeaseOptions, leaseReentrant } from "./lease.js";

export { nextOrExisting, type StepHead, stepRecordValues } from "./journal-sql-statements.js";

type Row = JournalRow;

/**
 * {@link Journal} over any {@link SqlDriver}: the implementation of
 * `SqliteJournal` and `PostgresJournal`. Use it directly with a driver of your
 * own making; its tables must have been created with {@link sqlJournalMigrations}.
 *
 * @example
 * const driver = new SqliteDriver("sqlite", { path: "runs.db" }, {
 *   component: "journal",
 *   migrations: sqlJournalMigrations("durable_", { table: (n) => `"${n}"`, bigint: "INTEGER", keyed: " WITHOUT ROWID" }),
 * });
 * const journal = new SqlJournal(driver);
 * await journal.createRun({ runId: "r1", workflow: "agent", input: { q: "hi" } });
 */
export class SqlJournal implements Journal {
  /** The driver's name (`sqlite`, `postgres`), used in messages. */
  readonly name: string;
  /** The driver every call goes through. */
  protected readonly driver: SqlDriver;
  private stepCheck: string | undefined;
  private stepHeadSql: string | undefined;
  /** Whether the database stores text as UTF-8 and casts bytes to text as they are (SQLite with a UTF-8 file); asked once. */
  private utf8: boolean | undefined;
  private statementTexts: ReturnType<typeof sqlTexts> | undefined;
  /** The quoted table names. */
  protected readonly t: { runs: string; steps: string; signals: string; events: string; blobRefs: string };
  /** The quoted blob table (content-addressed bytes, no run id). */
  protected readonly blobs: string;

  /**
   * @param driver - a ready-to-use driver whose migrations include {@link sqlJournalMigrations}
   * @param tablePrefix - prefix of the table names @default "durable_"
   */
  constructor(driver: SqlDriver, tablePrefix = DEFAULT_JOURNAL_TABLE_PREFIX) {
    this.driver = driver;
    this.name = driver.name;
    this.t = {
      runs: driver.table(`${tablePrefix}runs`),
      steps: driver.table(`${tablePrefix}steps`),
      signals: driver.table(`${tablePrefix}signals`),
      events: driver.table(`${tablePrefix}events`),
      blobRefs: driver.table(`${tablePrefix}blob_refs`),
    };
    this.blobs = driver.table(`${tablePrefix}blobs`);
  }

  /**
   * One write transaction that first reads the run's row (locking it where the database needs a row lock);
   * with `sync: false`, unsynced where the driver can be ({@link SqlDriver.unsyncedTransaction}).
   */
  private change<T>(
    verb: string,
    runId: string,
    fn: (query: SqlQuery, run: Row | undefined) => Promise<T>,
    sync = true,
  ) {
    return this.write(what(verb, runId), runId, sync, async (query) => {
      const { rows } = await query(`SELECT * FROM ${this.t.runs} WHERE run_id = $1${this.driver.forUpdate}`, [runId]);
      return fn(query, rows[0]);
    });
  }

  /** A write transaction, unsynced when `sync` is false and the driver can be. */
  private write<T>(label: string, runId: string, sync: boolean, fn: (query: SqlQuery) => Promise<T>): Promise<T> {
    return !sync && this.driver.unsyncedTransaction
      ? this.driver.unsyncedTransaction(label, runId, fn)
      : this.driver.transaction(label, runId, fn);
  }

  private async read(verb: string, runId: string, text: string, values: unknown[]): Promise<Row[]> {
    return (await this.driver.query(what(verb, runId), runId, text, values)).rows;
  }

  /** Every row of a run in one table, in `order`. */
  private allOf(verb: string, runId: string, table: string, order: string): Promise<Row[]> {
    return this.read(verb, runId, `SELECT * FROM ${table} WHERE run_id = $1 ORDER BY ${order}`, [runId]);
  }

  /** The database's clock in epoch ms, as an SQL expression (one value per statement). */
  private get nowSql(): string {
    return this.driver.nowMs;
  }

  /**
   * Appends an audit event: its index is the run's `event_count`, incremented
   * in the same transaction; `at` is the database's clock.
   */
  private event(query: SqlQuery, runId: string, type: JournalEventType, e: Partial<JournalEvent> = {}) {
    return runAsync(this.eventStatements(runId, type, e), query);
  }

  /** The statements of {@link event}, as a {@link SqlSteps} body. */
  private *eventStatements(runId: string, type: JournalEventType, e: Partial<JournalEvent>): SqlSteps<void> {
    const counted: SqlResult = yield [this.sql.countEvent, [runId]];
    yield* this.eventInsert(runId, type, e, Number(counted.rows[0]?.event_count) - 1);
  }

  /** Inserts the event numbered `idx` (counted by the caller); resynchronises the counter when that index is taken. */
  private *eventInsert(runId: string, type: JournalEventType, e: Partial<JournalEvent>, idx: number): SqlSteps<void> {
    const values = [
      runId,
      idx,
      type,
      e.seq ?? null,
      e.name ?? null,
      e.attempt ?? null,
      e.fencingToken ?? null,
      e.by ?? null,
      e.detail ?? null,
    ];
    if ((yield [this.sql.insertEvent, values]).rowCount) return;
    // The index is taken: a process of the previous release (which counted the events instead) wrote
    // to this run during a rolling upgrade. Resynchronise the counter once, from the events themselves.
    const { rows }: SqlResult = yield [
      `SELECT COALESCE(MAX(idx) + 1, 0) AS n FROM ${this.t.events} WHERE run_id = $1`,
      [runId],
    ];
    const next = Number(rows[0]?.n);
    yield [`UPDATE ${this.t.runs} SET event_count = $2 WHERE run_id = $1`, [runId, next + 1]];
    values[1] = next;
    if (!(yield [this.sql.insertEvent, values]).rowCount) {
      throw new Error(`event #${next} of run ${JSON.stringify(runId)} is taken`);
    }
  }

  /** {@inheritDoc Journal.now} */
  async now(): Promise<number> {
    const { rows } = await this.driver.query(
      "cannot read the database clock",
      undefined,
      `SELECT ${this.nowSql} AS now`,
    );
    return Number(rows[0]?.now);
  }

  /** {@inheritDoc Journal.createRun} */
  async createRun(init: { runId: string; workflow: string; input: JsonValue }) {
    const input = jsonColumn(init.input, "run input") ?? "null";
    return this.change("create", init.runId, async (query, existing) => {
      if (existing) return { created: false, run: runFromRow(existing) };
      const { rows } = await query(
        `INSERT INTO ${this.t.runs} (run_id, workflow, status, input_json, fencing_token, created_at, updated_at)
         VALUES ($1, $2, 'pending', $3, 0, ${this.nowSql}, ${this.nowSql}) ON CONFLICT (run_id) DO NOTHING RETURNING *`,
        [init.runId, init.workflow, input],
      );
      const created = rows[0];
      if (!created) {
        // PostgreSQL: another transaction created the run after this one read (and so could not lock) its row.
        const again = await query(`SELECT * FROM ${this.t.runs} WHERE run_id = $1${this.driver.forUpdate}`, [
          init.runId,
        ]);
        return { created: false, run: runFromRow(requireRun(init.runId, again.rows[0])) };
      }
      await this.event(query, init.runId, "run_created", { name: init.workflow });
      return { created: true, run: runFromRow(created) };
    });
  }

  /** {@inheritDoc Journal.getRun} */
  async getRun(runId: string): Promise<RunRecord | undefined> {
    const rows = await this.read("read", runId, `SELECT * FROM ${this.t.runs} WHERE run_id = $1`, [runId]);
    return rows[0] ? runFromRow(rows[0]) : undefined;
  }

  /**
   * {@inheritDoc Journal.listRuns}
   *
   * One keyset query on an index of `(created_at, run_id)` (after `workflow`, `status` or both when
   * filtered): `(created_at, run_id) < cursor`, `ORDER BY created_at DESC, run_id DESC LIMIT limit`.
   */
  async listRuns(filter?: ListRunsFilter): Promise<RunRecord[]> {
    const { text, values } = sqlListRuns(
      this.t.runs,
      checkListRuns(this.name, filter),
      RUN_ID_BYTEWISE[this.driver.name],
    );
    const { rows } = await this.driver.query("cannot list runs", undefined, text, values);
    // one bad row is listed with its readError, not a failure of the whole listing
    return rows.map((row) => runFromRow(row, true));
  }

  /**
   * The database's plan of {@link listRuns}' query for `filter` (`EXPLAIN`), one line per plan row:
   * which index serves a listing (diagnostics and tests; the workflow store's `explainList`).
   * @throws {InvalidOptionError} as {@link listRuns}
   */
  explainListRuns(filter?: ListRunsFilter): Promise<string> {
    const { text, values } = sqlListRuns(
      this.t.runs,
      checkListRuns(this.name, filter),
      RUN_ID_BYTEWISE[this.driver.name],
    );
    return this.driver.explain(text, values);
  }

  /**
   * {@inheritDoc Journal.acquireLease}
   *
   * One conditional `UPDATE` after the row is locked: the expiry is compared
   * with the database's clock in its `WHERE`, and the new expiry is that clock
   * + `ttlMs`.
   */
  async acquireLease(runId: string, owner: string, ttlMs: number, options?: AcquireLeaseOptions): Promise<LeaseResult> {
    const reentrant = leaseReentrant(this.name, options) ? 1 : 0;
    return this.change("lease", runId, async (query, row): Promise<LeaseResult> => {
      const run = requireRun(runId, row);
      const { rows } = await query(
        `UPDATE ${this.t.runs} SET fencing_token = fencing_token + 1, lease_owner = $2,
           lease_expires_at = ${this.nowSql} + $3, updated_at = ${this.nowSql}
         WHERE run_id = $1
           AND (lease_owner IS NULL OR lease_expires_at IS NULL OR lease_expires_at <= ${this.nowSql}
             OR (lease_owner = $2 AND $4 = 1))
         RETURNING fencing_token, lease_expires_at`,
        [runId, owner, leaseMs(ttlMs), reentrant],
      );
      const taken = rows[0];
      if (!taken) return { acquired: false, owner: String(run.lease_owner), expiresAt: Number(run.lease_expires_at) };
      const token = Number(taken.fencing_token);
      await this.event(query, runId, "lease_acquired", { name: owner, fencingToken: token });
      return {
        acquired: true,
        fencingToken: token,
        expiresAt: Number(taken.lease_expires_at),
        status: String(run.status) as RunStatus,
      };
    });
  }

  /** {@inheritDoc Journal.renewLease} */
  async renewLease(runId: string, token: number, ttlMs: number): Promise<number> {
    return this.change("renew the lease of", runId, async (query, row) => {
      requireToken(runId, token, row);
      const { rows } = await query(
        `UPDATE ${this.t.runs} SET lease_expires_at = ${this.nowSql} + $2 WHERE run_id = $1 RETURNING lease_expires_at`,
        [runId, leaseMs(ttlMs)],
      );
      return Number(rows[0]?.lease_expires_at);
    });
  }

  /**
   * {@inheritDoc Journal.releaseLease}
   *
   * One conditional `UPDATE` (atomic on its own), unsynced where the driver can be.
   */
  async releaseLease(runId: string, token: number): Promise<void> {
    await this.write(what("release the lease of", runId), runId, false, (query) =>
      query(
        `UPDATE ${this.t.runs} SET lease_owner = NULL, lease_expires_at = NULL WHERE run_id = $1 AND fencing_token = $2`,
        [runId, token],
      ),
    );
  }

  /**
   * {@inheritDoc Journal.readSteps}
   *
   * A query is one statement on the `(run_id, seq)` key: `seq >= fromSeq`, the name's prefix compared with
   * `substr` (in characters), and `last` as `ORDER BY seq DESC LIMIT last` (then put back in seq order).
   */
  async readSteps(runId: string, query?: StepQuery): Promise<StepRecord[]> {
    const q = checkStepQuery(this.name, query);
    // The columns a record needs (the run id is the caller's: not read back as 1,000 copies of one string).
    const columns = `seq, name, input_hash, status, ${q?.outputs === false ? "NULL AS output_json, NULL AS error_json" : "output_json, error_json"}, attempt, started_at, finished_at, fencing_token, snapshot`;
    let rows: Row[];
    if (q === undefined) {
      rows = await this.read(
        "read the steps of",
        runId,
        `SELECT ${columns} FROM ${this.t.steps} WHERE run_id = $1 ORDER BY seq`,
        [runId],
      );
    } else {
      const values: unknown[] = [runId, q.fromSeq];
      let where = "run_id = $1 AND seq >= $2";
      if (q.namePrefix !== "") {
        // substr counts characters (code points) in both databases
        values.push([...q.namePrefix].length, q.namePrefix);
        where += " AND substr(name, 1, CAST($3 AS INTEGER)) = $4";
      }
      let tail = " ORDER BY seq";
      if (q.last !== undefined) {
        values.push(q.last);
        tail = ` ORDER BY seq DESC LIMIT $${values.length}`;
      }
      rows = await this.read(
        "read the steps of",
        runId,
        `SELECT ${columns} FROM ${this.t.steps} WHERE ${where}${tail}`,
        values,
      );
      if (q.last !== undefined) rows.reverse();
    }
    const steps = new Array<StepRecord>(rows.length);
    for (let i = 0; i < rows.length; i++) steps[i] = stepFromRow(rows[i] as Row, runId);
    return steps;
  }

  /**
   * {@inheritDoc Journal.writeStep}
   *
   * One transaction; on a driver with {@link SqlDriver.syncTransaction} (SQLite) its statements run
   * synchronously, with no promise per statement.
   */
  async writeStep(token: number, record: StepRecord, options?: WriteStepOptions): Promise<void> {
    const sync = syncedWrite(this.name, options);
    const blobs = blobWrite(this.name, options);
    const bytes = outputBytes(record) !== undefined && (await this.utf8Bytes());
    const values = stepRecordValues(token, record, snapshotWrite(options), bytes);
    const create = createOnlyWrite(options);
    const { runId } = record;
    const label = what("write a step of", runId);
    if (this.driver.syncTransaction) {
      // awaited, not returned: an async function returning a promise takes two more turns of the microtask queue
      await this.driver.syncTransaction(
        label,
        runId,
        (run) => runSync(this.stepStatements(token, record, values, blobs, create), run),
        sync,
      );
      return;
    }
    await this.write(label, runId, sync, (query) =>
      runAsync(this.stepStatements(token, record, values, blobs, create), query),
    );
  }

  /**
   * Whether an output's UTF-8 bytes may be bound in place of its text: SQLite, whose statements cast
   * `$6` to TEXT, which takes a blob's bytes as they are as text of the file's encoding, so only in a
   * UTF-8 file (a new file's; `PRAGMA encoding` asked once). The text is then neither decoded from
   * the bytes nor encoded again by the driver.
   */
  private async utf8Bytes(): Promise<boolean> {
    if (this.utf8 === undefined) {
      if (this.driver.name !== "sqlite") this.utf8 = false;
      else {
        const { rows } = await this.driver.query("cannot read the database encoding", undefined, "PRAGMA encoding");
        this.utf8 = String(rows[0]?.encoding).toUpperCase() === "UTF-8";
      }
    }
    return this.utf8;
  }

  /** The statements of {@link writeStep}'s transaction, as a {@link SqlSteps} body. */
  private *stepStatements(
    token: number,
    record: StepRecord,
    values: unknown[],
    blobs: BlobWrite | undefined,
    create = false,
    next = false,
  ): SqlSteps<void> {
    const { runId, seq } = record;
    const valid = Number.isInteger(seq) && seq >= 0;
    const event: Partial<JournalEvent> = { seq, name: record.name, attempt: record.attempt, fencingToken: token };
    const type: JournalEventType = `step_${record.status}`;
    let counted: number | undefined;
    if (valid && !create && this.driver.forUpdate === "") {
      // The transaction holds the database's write lock (SQLite): three statements, each a check and a write.
      // The run's event counter is incremented where its token matches; the record is written where it is
      // the next one or replaces a record of its name that is not completed. Anything else is refused by the
      // checks below, which say why (and the transaction, the counter included, rolls back).
      const run: SqlResult = yield [this.sql.countStepEvent, [runId, token]];
      if (run.rows.length === 1) {
        counted = Number(run.rows[0]?.event_count) - 1;
        // `next`: the caller read the run's highest seq under this lock (appendStep): a plain insert.
        if ((yield [next ? this.sql.createStep : this.sql.insertNextStep, values]).rowCount === 1) {
          yield* this.stepRefs(runId, seq, blobs);
          yield* this.eventInsert(runId, type, event, counted);
          return;
        }
      }
    }
    // One statement reads what the checks need: the run's token (its row locked where the database needs
    // it), the record at `seq` (if any) and the run's highest seq (one index probe each).
    const { rows }: SqlResult = yield [this.stepCheckSql, [runId, valid ? seq : -1]];
    const run = requireToken(runId, token, rows[0]);
    const cur = rows[0]?.seq === null || rows[0]?.seq === undefined ? undefined : rows[0];
    const lastSeq = rows[0]?.last_seq;
    const count = lastSeq === null || lastSeq === undefined ? 0 : Number(lastSeq) + 1;
    const existing = cur ? { name: String(cur.name), status: String(cur.status) } : undefined;
    checkStepWrite(runId, token, Number(run.fencing_token), count, existing, record, create);
    const written: SqlResult = yield [create ? this.sql.createStep : this.sql.upsertStep, values];
    if (written.rowCount === 0) {
      // Another writer of the same token completed (or renamed) the record at `seq` after this check read:
      // refused, not overwritten (the transaction rolls back).
      throw new JournalIntegrityError(runId, seq, `step #${seq} was written by another writer meanwhile`);
    }
    yield* this.stepRefs(runId, seq, blobs);
    if (counted === undefined) yield* this.eventStatements(runId, type, event);
    else yield* this.eventInsert(runId, type, event, counted);
  }

  /**
   * The blob references of the record at `seq`, in its write's transaction: the record's former references
   * go, its new ones (`blobs`) are stored and recorded, and the former blobs nothing references any more
   * are deleted (see {@link storeBlobs} and {@link dropOrphans} for the locking).
   */
  private *stepRefs(runId: string, seq: number, blobs: BlobWrite | undefined): SqlSteps<void> {
    const old: SqlResult = yield [
      `DELETE FROM ${this.t.blobRefs} WHERE run_id = $1 AND seq = $2 RETURNING ref`,
      [runId, seq],
    ];
    if (blobs !== undefined && blobs.refs.length > 0) {
      yield* this.storeBlobs(runId, seq, blobs);
      for (const ref of blobs.refs) {
        yield [`INSERT INTO ${this.t.blobRefs} (run_id, seq, ref) VALUES ($1, $2, $3)`, [runId, seq, ref]];
      }
    }
    const kept = new Set(blobs?.refs);
    const gone = old.rows.map((r) => String(r.ref)).filter((ref) => !kept.has(ref));
    if (gone.length > 0) yield* this.dropOrphans(gone);
  }

  /**
   * Makes every blob of `blobs.refs` present when the transaction commits: those stored are locked
   * against a concurrent delete (PostgreSQL `FOR KEY SHARE`; SQLite's `BEGIN IMMEDIATE` holds the file),
   * the others inserted from `blobs.bytes`. A delete that locked a blob first and deleted it is waited
   * for, and the blob is then written again.
   * @throws {JournalIntegrityError} when a reference is neither stored nor given
   */
  private *storeBlobs(runId: string, seq: number, blobs: BlobWrite): SqlSteps<void> {
    const lock = this.driver.name === "postgres" ? " FOR KEY SHARE" : "";
    const held = new Set<string>();
    for (const part of chunks(blobs.refs, BLOB_CHUNK)) {
      const r: SqlResult = yield [
        `SELECT ref FROM ${this.blobs} WHERE ref IN (${placeholders(part.length)}) ORDER BY ref${lock}`,
        part,
      ];
      for (const x of r.rows) held.add(String(x.ref));
    }
    for (const ref of blobs.refs) {
      if (held.has(ref)) continue;
      const bytes = blobs.bytes.get(ref);
      if (bytes === undefined) {
        throw new JournalIntegrityError(
          runId,
          seq,
          `blob ${ref} is referenced but not stored: pass its bytes in WriteStepOptions.blobs`,
        );
      }
      const inserted: SqlResult = yield [
        `INSERT INTO ${this.blobs} (ref, bytes, size, created_at) VALUES ($1, $2, $3, ${this.nowSql})
         ON CONFLICT (ref) DO NOTHING RETURNING ref`,
        [ref, asBuffer(bytes), bytes.byteLength],
      ];
      if (inserted.rows.length === 1) continue;
      // another writer inserted it meanwhile (committed: this statement waited for it): lock it
      const again: SqlResult = yield [`SELECT ref FROM ${this.blobs} WHERE ref = $1${lock}`, [ref]];
      if (again.rows.length === 0) throw new JournalIntegrityError(runId, seq, `blob ${ref} vanished while stored`);
    }
  }

  /**
   * Of `refs` (whose references this transaction has just deleted), deletes the blobs nothing references
   * any more. PostgreSQL: the blobs are locked first (`FOR UPDATE`, in ref order), then their references
   * counted by a new statement, which sees every write committed while it waited (READ COMMITTED): a
   * write holding a blob's `FOR KEY SHARE` lock keeps it.
   * @returns the number of blobs deleted
   */
  private *dropOrphans(refs: readonly string[]): SqlSteps<number> {
    const unique = [...new Set(refs)].sort();
    if (unique.length === 0) return 0;
    if (this.driver.name === "postgres") {
      for (const part of chunks(unique, BLOB_CHUNK)) {
        yield [
          `SELECT ref FROM ${this.blobs} WHERE ref IN (${placeholders(part.length)}) ORDER BY ref FOR UPDATE`,
          part,
        ];
      }
    }
    const still = new Set<string>();
    for (const part of chunks(unique, BLOB_CHUNK)) {
      const r: SqlResult = yield [
        `SELECT DISTINCT ref FROM ${this.t.blobRefs} WHERE ref IN (${placeholders(part.length)})`,
        part,
      ];
      for (const x of r.rows) still.add(String(x.ref));
    }
    let deleted = 0;
    for (const part of chunks(
      unique.filter((ref) => !still.has(ref)),
      BLOB_CHUNK,
    )) {
      const r: SqlResult = yield [
        `DELETE FROM ${this.blobs} WHERE ref IN (${placeholders(part.length)}) RETURNING ref`,
        part,
      ];
      deleted += r.rows.length;
    }
    return deleted;
  }

  /** {@link dropOrphans} in a transaction of its own. */
  protected async dropOrphanBlobs(refs: readonly string[]): Promise<number> {
    if (refs.length === 0) return 0;
    return this.driver.transaction("cannot delete blobs", undefined, (query) =>
      runAsync(this.dropOrphans(refs), query),
    );
  }

  /** {@inheritDoc Journal.readBlob} */
  async readBlob(ref: string): Promise<Uint8Array | undefined> {
    const { rows } = await this.driver.query(
      `cannot read blob ${ref}`,
      undefined,
      `SELECT bytes FROM ${this.blobs} WHERE ref = $1`,
      [ref],
    );
    const v = rows[0]?.bytes as Uint8Array | undefined | null;
    return v === undefined || v === null ? undefined : new Uint8Array(v);
  }

  /** Statement texts used on every write, built once (one string each, so the driver's statement cache finds them at once). */
  private get sql() {
    // SQLite: the output is cast to TEXT, so a UTF-8 file takes a state's bytes as its text ({@link utf8Bytes}).
    this.statementTexts ??= sqlTexts(this.t, this.nowSql, this.driver.name === "sqlite" ? "CAST($6 AS TEXT)" : "$6");
    return this.statementTexts;
  }

  /**
   * The reads of {@link writeStep}'s checks, in one statement (`$1` run id, `$2` seq): one row with the run's
   * token, the record at `$2` (`seq`, `name`, `status`: null when there is none) and the run's highest seq
   * (`last_seq`, null without records); no row: no run.
   */
  private get stepCheckSql(): string {
    const lock = this.driver.forUpdate ? `${this.driver.forUpdate} OF r` : "";
    this.stepCheck ??= `SELECT r.fencing_token, s.seq, s.name, s.status,
        (SELECT MAX(m.seq) FROM ${this.t.steps} m WHERE m.run_id = r.run_id) AS last_seq FROM ${this.t.runs} r
      LEFT JOIN ${this.t.steps} s ON s.run_id = r.run_id AND s.seq = CAST($2 AS INTEGER)
      WHERE r.run_id = $1${lock}`;
    return this.stepCheck;
  }

  /**
   * @internal What a writer appending after a run's newest record of a kind needs (a workflow's
   * checkpoint, compared and set), in one statement that reads no record's output: the run's highest
   * seq (`lastSeq`, undefined without records) and the newest record whose name starts with
   * `namePrefix` (its seq, name and status; undefined without one). Both are read in one snapshot.
   */
  async stepHead(runId: string, namePrefix: string): Promise<StepHead> {
    return headOf(
      await this.read("read the steps of", runId, this.headSql, [runId, [...namePrefix].length, namePrefix]),
    );
  }

  /** The statement of {@link stepHead}: `$1` run id, `$2` the prefix's length in characters, `$3` the prefix. */
  private get headSql(): string {
    this.stepHeadSql ??= `SELECT 0 AS k, MAX(seq) AS seq, CAST(NULL AS TEXT) AS name, CAST(NULL AS TEXT) AS status
      FROM ${this.t.steps} WHERE run_id = $1
      UNION ALL
      SELECT * FROM (SELECT 1 AS k, seq, name, status FROM ${this.t.steps}
        WHERE run_id = $1 AND substr(name, 1, CAST($2 AS INTEGER)) = $3 ORDER BY seq DESC LIMIT 1) AS newest`;
    return this.stepHeadSql;
  }

  /**
   * @internal Appends a record at the run's next seq (its highest + 1) when `accept` takes the run's
   * newest record whose name starts with `namePrefix` (see {@link stepHead}): a workflow's checkpoint,
   * compared and set. On a driver with {@link SqlDriver.syncTransaction} (SQLite), one transaction under
   * the file's write lock reads the run, asks `tokenOf` the token to write with (undefined: no write),
   * reads the head, builds the record (`make(seq, token)`) and writes it, so the write need not check
   * again that its seq is the next one. Returns the run as read and the seq written; or the run and
   * `refused`, the newest record `accept` refused; or only the run (undefined: none) when `tokenOf`
   * gave no token; nothing is written but the record. Undefined on another driver: the caller reads
   * the run and {@link stepHead} and calls {@link writeStep} (checked there).
   *
   * @throws {StaleFencingTokenError} when the token is not the run's (nothing written)
   */
  async appendStep(
    runId: string,
    tokenOf: (run: RunRecord | undefined) => number | undefined,
    make: (seq: number, token: number) => StepRecord,
    options: WriteStepOptions | undefined,
    namePrefix: string,
    accept: (newest: StepHead["newest"]) => boolean,
  ): Promise<{ run: RunRecord | undefined; seq?: number; refused?: StepHead["newest"] } | undefined> {
    if (!this.driver.syncTransaction) return undefined;
    const sync = syncedWrite(this.name, options);
    const blobs = blobWrite(this.name, options);
    const bytes = await this.utf8Bytes();
    const head = [runId, [...namePrefix].length, namePrefix];
    return this.driver.syncTransaction(
      what("write a step of", runId),
      runId,
      (run) => {
        const row = run(`SELECT * FROM ${this.t.runs} WHERE run_id = $1`, [runId]).rows[0];
        const record = row === undefined ? undefined : runFromRow(row);
        const token = tokenOf(record);
        if (record === undefined || token === undefined) return { run: record };
        // The newest record first: usually the newest of the prefix too (one probe of the key, whose
        // cells a large record makes costly to compare); else the head statement.
        const last = run(`SELECT seq, name, status FROM ${this.t.steps} WHERE run_id = $1 ORDER BY seq DESC LIMIT 1`, [
          runId,
        ]).rows[0];
        const { lastSeq, newest } =
          last === undefined
            ? { lastSeq: undefined, newest: undefined }
            : String(last.name).startsWith(namePrefix)
              ? headOf([
                  { k: 0, seq: last.seq },
                  { k: 1, ...last },
                ])
              : headOf(run(this.headSql, head).rows);
        if (!accept(newest)) return { run: record, refused: newest };
        const step = make(lastSeq === undefined ? 0 : lastSeq + 1, token);
        const values = stepRecordValues(token, step, snapshotWrite(options), bytes);
        runSync(this.stepStatements(token, step, values, blobs, false, true), run);
        return { run: record, seq: step.seq };
      },
      sync,
    );
  }

  /** {@inheritDoc Journal.updateRun} */
  async updateRun(token: number, runId: string, patch: RunPatch): Promise<UpdateRunResult> {
    const output = jsonColumn(patch.output, "run output");
    const error = patch.error === undefined ? null : JSON.stringify(patch.error);
    // `running` unsynced (see Journal.updateRun): the lease holds the run, not the status.
    const sync = patch.status !== "running";
    return this.change(
      "update",
      runId,
      async (query, row): Promise<UpdateRunResult> => {
        requireToken(runId, token, row);
        if (patch.status === "waiting" && patch.waitingFor !== undefined) {
          const { rows } = await query(`SELECT * FROM ${this.t.signals} WHERE run_id = $1 AND name = $2`, [
            runId,
            patch.waitingFor,
          ]);
          if (rows[0]) return { ok: false, signal: signalFromRow(rows[0]) };
        }
        await query(
          `UPDATE ${this.t.runs} SET status = $1, output_json = $2, error_json = $3, waiting_for = $4, wake_at = $5,
           updated_at = ${this.nowSql} WHERE run_id = $6`,
          [patch.status, output, error, patch.waitingFor ?? null, patch.wakeAt ?? null, runId],
        );
        await this.event(query, runId, `run_${patch.status}` as JournalEventType, {
          name: patch.waitingFor,
          fencingToken: token,
          detail: patch.status === "blocked" ? patch.error?.message : undefined,
        });
        return { ok: true };
      },
      sync,
    );
  }

  /** {@inheritDoc Journal.sendSignal} */
  async sendSignal(runId: string, name: string, value: JsonValue): Promise<RunRecord> {
    const text = jsonColumn(value, `signal "${name}" value`) ?? "null";
    return this.change("signal", runId, async (query, row) => {
      const run = requireRun(runId, row);
      const status = String(run.status) as RunStatus;
      if (ENDED_RUN_STATUSES.has(status)) {
        // a second signal is a conflict whatever the status; a new one to an ended run is never recorded
        const sent = await query(`SELECT 1 FROM ${this.t.signals} WHERE run_id = $1 AND name = $2`, [runId, name]);
        if (sent.rows.length > 0) throw new SignalConflictError(runId, name);
        throw signalRefused(runId, status, name);
      }
      const inserted = await query(
        `INSERT INTO ${this.t.signals} (run_id, name, value_json, sent_at) VALUES ($1, $2, $3, ${this.nowSql})
         ON CONFLICT (run_id, name) DO NOTHING`,
        [runId, name, text],
      );
      if (!inserted.rowCount) throw new SignalConflictError(runId, name);
      await this.event(query, runId, "signal_received", { name });
      return runFromRow(run);
    });
  }

  /** {@inheritDoc Journal.getSignal} */
  async getSignal(runId: string, name: string): Promise<SignalRecord | undefined> {
    const rows = await this.read(
      "read a signal of",
      runId,
      `SELECT * FROM ${this.t.signals} WHERE run_id = $1 AND name = $2`,
      [runId, name],
    );
    return rows[0] ? signalFromRow(rows[0]) : undefined;
  }

  /** {@inheritDoc Journal.listSignals} */
  async listSignals(runId: string): Promise<SignalRecord[]> {
    return (await this.allOf("list the signals of", runId, this.t.signals, "sent_at, name")).map(signalFromRow);
  }

  /** {@inheritDoc Journal.readEvents} */
  async readEvents(runId: string): Promise<JournalEvent[]> {
    return (await this.allOf("read the events of", runId, this.t.events, "idx")).map(eventFromRow);
  }

  /** {@inheritDoc Journal.deleteRun} */
  async deleteRun(runId: string): Promise<void> {
    await this.change("delete", runId, async (query) => {
      const refs = await query(`DELETE FROM ${this.t.blobRefs} WHERE run_id = $1 RETURNING ref`, [runId]);
      for (const table of Object.values(this.t)) await query(`DELETE FROM ${table} WHERE run_id = $1`, [runId]);
      await runAsync(this.dropOrphans(refs.rows.map((r) => String(r.ref))), query);
    });
  }

  /**
   * {@inheritDoc Journal.pruneRuns}
   *
   * Walks the runs that have snapshot steps (a partial index), 200 a query; per run, transactions that
   * lock its row, find its `keepLast`-th newest snapshot step and delete at most 1,000 older records
   * finished before the cutoff each. SQLite then runs `PRAGMA incremental_vacuum` (the journal's files
   * are created with incremental auto-vacuum) or `VACUUM` with `"full"`; PostgreSQL `VACUUM` on the
   * journal's tables with `"full"`.
   */
  async pruneRuns(options: PruneOptions): Promise<PruneResult> {
    const o = await checkPruneOptions(this.name, options, () => this.now());
    const result: PruneResult = { deletedSteps: 0, deletedBlobs: 0 };
    let after = "";
    for (;;) {
      const { rows } = await this.driver.query(
        "cannot prune runs",
        undefined,
        `SELECT DISTINCT run_id FROM ${this.t.steps} WHERE snapshot = 1 AND run_id > $1 ORDER BY run_id LIMIT 200`,
        [after],
      );
      if (rows.length === 0) break;
      for (const row of rows) {
        const runId = String(row.run_id);
        for (;;) {
          const deleted = await this.change("prune", runId, async (query, run) => {
            if (!run) return 0;
            const bound = (
              await query(
                `SELECT seq FROM ${this.t.steps} WHERE run_id = $1 AND snapshot = 1 ORDER BY seq DESC LIMIT 1 OFFSET $2`,
                [runId, o.keepLast - 1],
              )
            ).rows[0]?.seq;
            if (bound === undefined || bound === null) return 0;
            const gone = await query(
              `DELETE FROM ${this.t.steps} WHERE run_id = $1 AND seq IN (SELECT seq FROM ${this.t.steps}
                 WHERE run_id = $1 AND seq < $2 AND finished_at < $3 AND finished_at >= $4
                 ORDER BY seq LIMIT ${PRUNE_BATCH}) RETURNING seq`,
              [runId, Number(bound), o.before, o.from],
            );
            result.deletedBlobs += await this.dropStepRefs(
              query,
              runId,
              gone.rows.map((r) => Number(r.seq)),
            );
            return gone.rows.length;
          });
          result.deletedSteps += deleted;
          if (deleted < PRUNE_BATCH) break;
        }
        after = runId;
      }
    }
    await this.vacuum(o.vacuum);
    return result;
  }

  /**
   * Deletes the blob references of the step records `seqs` of a run (just deleted by the caller's
   * transaction), and the blobs nothing references any more.
   * @returns the number of blobs deleted
   */
  protected async dropStepRefs(query: SqlQuery, runId: string, seqs: readonly number[]): Promise<number> {
    const refs: string[] = [];
    for (const part of chunks(seqs, BLOB_CHUNK)) {
      const r = await query(
        `DELETE FROM ${this.t.blobRefs} WHERE run_id = $1 AND seq IN (${placeholders(part.length, 2)}) RETURNING ref`,
        [runId, ...part],
      );
      for (const x of r.rows) refs.push(String(x.ref));
    }
    return runAsync(this.dropOrphans(refs), query);
  }

  /** Gives space back after a prune (see {@link PruneOptions.vacuum}). */
  private async vacuum(mode: "incremental" | "full"): Promise<void> {
    if (this.driver.name === "sqlite") {
      if (mode === "full") {
        await this.driver.query("cannot vacuum the journal", undefined, "VACUUM");
        // In WAL mode the rewritten pages sit in the WAL: copy them back so the file itself shrinks.
        await this.driver.query("cannot vacuum the journal", undefined, "PRAGMA wal_checkpoint(TRUNCATE)");
      } else await this.driver.query("cannot vacuum the journal", undefined, "PRAGMA incremental_vacuum");
      return;
    }
    if (mode !== "full") return;
    for (const table of [...Object.values(this.t), this.blobs]) {
      await this.driver.query(`cannot vacuum ${table}`, undefined, `VACUUM ${table}`);
    }
  }

  /** {@inheritDoc Journal.appendEvent} */
  async appendEvent(runId: string, event: JournalEventInput): Promise<void> {
    await this.change("append an event to", runId, async (query, row) => {
      requireRun(runId, row);
      await this.event(query, runId, event.type, event);
    });
  }

  /**
   * The operators' common write: the run becomes `status` with the fencing
   * token incremented and the lease cleared (so its executor's next write is
   * refused), `clear` columns set to NULL.
   */
  private async takeOver(query: SqlQuery, runId: string, status: RunStatus, clear: readonly string[]): Promise<Row> {
    const { rows } = await query(
      `UPDATE ${this.t.runs} SET status = $2, fencing_token = fencing_token + 1, lease_owner = NULL, lease_expires_at = NULL,
         ${clear.map((c) => `${c} = NULL, `).join("")}updated_at = ${this.nowSql}
       WHERE run_id = $1 RETURNING *`,
      [runId, status],
    );
    return requireRun(runId, rows[0]);
  }

  /** {@inheritDoc Journal.cancelRun} */
  async cancelRun(runId: string, by: string, reason?: string): Promise<RunRecord> {
    return this.change("cancel", runId, async (query, row) => {
      const run = requireRun(runId, row);
      if (ENDED_RUN_STATUSES.has(String(run.status) as RunStatus)) return runFromRow(run);
      const after = await this.takeOver(query, runId, "cancelled", ["waiting_for", "wake_at"]);
      await this.event(query, runId, "run_cancelled", {
        by,
        detail: reason,
        fencingToken: Number(after.fencing_token),
      });
      return runFromRow(after);
    });
  }

  /** {@inheritDoc Journal.resetRun} */
  async resetRun(runId: string, toSeq: number, by: string): Promise<RunRecord> {
    checkResetSeq(runId, toSeq);
    return this.change("reset", runId, async (query, row) => {
      requireRun(runId, row);
      await query(`DELETE FROM ${this.t.steps} WHERE run_id = $1 AND seq > $2`, [runId, toSeq]);
      const refs = await query(`DELETE FROM ${this.t.blobRefs} WHERE run_id = $1 AND seq > $2 RETURNING ref`, [
        runId,
        toSeq,
      ]);
      await runAsync(this.dropOrphans(refs.rows.map((r) => String(r.ref))), query);
      const after = await this.takeOver(query, runId, "pending", RESET_COLUMNS);
      await this.event(query, runId, "run_reset", { seq: toSeq, by, fencingToken: Number(after.fencing_token) });
      return runFromRow(after);
    });
  }

  /** {@inheritDoc Journal.retryRun} */
  async retryRun(runId: string, by: string): Promise<RunRecord> {
    return this.change("retry", runId, async (query, row) => {
      const run = requireRun(runId, row);
      const last = (
        await query(`SELECT seq, name, status FROM ${this.t.steps} WHERE run_id = $1 ORDER BY seq DESC LIMIT 1`, [
          runId,
        ])
      ).rows[0];
      const status = String(run.status) as RunStatus;
      if (!RETRYABLE_RUN_STATUSES.has(status)) throw retryRefused(runId, status, last ? Number(last.seq) : -1);
      const dropped = last?.status === "failed" ? { seq: Number(last.seq), name: String(last.name) } : undefined;
      if (dropped) {
        await query(`DELETE FROM ${this.t.steps} WHERE run_id = $1 AND seq = $2`, [runId, dropped.seq]);
        await this.dropStepRefs(query, runId, [dropped.seq]);
      }
      const after = await this.takeOver(query, runId, "pending", RESET_COLUMNS);
      await this.event(query, runId, "run_retried", { ...dropped, by, fencingToken: Number(after.fencing_token) });
      return runFromRow(after);
    });
  }

  /** Releases what the journal's driver opened (never an injected database or pool). Idempotent. */
  async close(): Promise<void> {
    await this.driver.close();
  }
}
