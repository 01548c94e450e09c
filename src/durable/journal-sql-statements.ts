/**
 * The SQL journal's statements and their helpers (`SqlJournal` in `journal-sql.ts` runs them): the
 * texts of every write, the step-record parameters, the transaction bodies written once for SQLite's
 * synchronous and PostgreSQL's awaited driver, and the row checks.
 *
 * @module
 */
import type { SqlQuery, SqlResult, SqlRunSync } from "../drivers/sql.js";
import { RunNotFoundError, StaleFencingTokenError } from "./errors.js";
import { type JournalRow, outputBytes, outputColumn, type StepRecord } from "./journal.js";

type Row = JournalRow;

/**
 * @internal What {@link SqlJournal.stepHead} reads: the run's highest seq (undefined without records)
 * and its newest record of a name prefix (undefined without one).
 */
export interface StepHead {
  lastSeq: number | undefined;
  newest: { seq: number; name: string; status: string } | undefined;
}

/** The rows of the head statement ({@link SqlJournal.stepHead}) as a {@link StepHead}. */
export function headOf(rows: readonly Row[]): StepHead {
  const last = rows.find((r) => Number(r.k) === 0)?.seq;
  const newest = rows.find((r) => Number(r.k) === 1);
  return {
    lastSeq: last === null || last === undefined ? undefined : Number(last),
    newest: newest && { seq: Number(newest.seq), name: String(newest.name), status: String(newest.status) },
  };
}

/** A statement of a {@link SqlSteps} body: its text and values. */
export type SqlStatement = [text: string, values: unknown[]];

/**
 * A transaction's body written once for both kinds of driver: it yields each statement and is given back
 * its result, by {@link runSync} (the statements run synchronously, SQLite) or {@link runAsync} (awaited).
 */
export type SqlSteps<T> = Generator<SqlStatement, T, SqlResult>;

/** Runs a {@link SqlSteps} body with a synchronous runner. */
export function runSync<T>(body: SqlSteps<T>, run: SqlRunSync): T {
  let next = body.next();
  while (!next.done) next = body.next(run(next.value[0], next.value[1]));
  return next.value;
}

/** Runs a {@link SqlSteps} body, awaiting each statement. */
export async function runAsync<T>(body: SqlSteps<T>, query: SqlQuery): Promise<T> {
  let next = body.next();
  while (!next.done) next = body.next(await query(next.value[0], next.value[1]));
  return next.value;
}

/** The step record's columns, in the order of the values of {@link sqlTexts}' step statements (`$1`…`$12`). */
export const STEP_COLUMNS =
  "run_id, seq, name, input_hash, status, output_json, error_json, attempt, started_at, finished_at, fencing_token, snapshot";

/** The columns a step record's rewrite replaces. */
export const STEP_UPDATE = `input_hash = excluded.input_hash, status = excluded.status,
           output_json = excluded.output_json, error_json = excluded.error_json, attempt = excluded.attempt,
           started_at = excluded.started_at, finished_at = excluded.finished_at, fencing_token = excluded.fencing_token,
           snapshot = excluded.snapshot`;

/**
 * The texts of the statements of every write (`t`: the quoted table names, `now`: the clock expression).
 * Step statements take `$1`…`$12`: run id, seq, name, input hash, status, output, error, attempt,
 * started at, finished at, token, snapshot.
 */
export function sqlTexts(t: { runs: string; steps: string; events: string }, now: string, output = "$6") {
  return {
    /** `$1` run id: increments the run's event counter, returns it. */
    countEvent: `UPDATE ${t.runs} SET event_count = event_count + 1 WHERE run_id = $1 RETURNING event_count`,
    /** `$1` run id, `$2` token: increments the run's event counter where the token matches, returns it. */
    countStepEvent: `UPDATE ${t.runs} SET event_count = event_count + 1 WHERE run_id = $1 AND fencing_token = $2
         RETURNING event_count`,
    /** `$1`…`$9`: run id, idx, type, seq, name, attempt, token, by, detail. */
    insertEvent: `INSERT INTO ${t.events} (run_id, idx, type, at, seq, name, attempt, fencing_token, by_name, detail)
         VALUES ($1, $2, $3, ${now}, $4, $5, $6, $7, $8, $9) ON CONFLICT (run_id, idx) DO NOTHING`,
    /**
     * Writes a step record (checked by the caller); a record at its seq is replaced only when it has the
     * same name and is not completed, else no row changes (a writer whose check read before another
     * writer's commit: PostgreSQL's READ COMMITTED snapshot may miss a record written meanwhile).
     */
    upsertStep: `INSERT INTO ${t.steps} (${STEP_COLUMNS})
         VALUES ($1, $2, $3, $4, $5, ${output}, $7, $8, $9, $10, $11, $12)
         ON CONFLICT (run_id, seq) DO UPDATE SET ${STEP_UPDATE}
         WHERE ${t.steps}.name = excluded.name AND ${t.steps}.status <> 'completed'`,
    /**
     * Writes a step record only where it is the next one (no record at or after `seq`, and `seq` is 0 or
     * the record at `seq - 1` exists: the highest seq + 1) or replaces a record of the same name that is
     * not completed: one row changed, else none.
     */
    /** Writes a new step record (checked by the caller); a record already at its seq is never replaced: no row changes. */
    createStep: `INSERT INTO ${t.steps} (${STEP_COLUMNS})
         VALUES ($1, $2, $3, $4, $5, ${output}, $7, $8, $9, $10, $11, $12)
         ON CONFLICT (run_id, seq) DO NOTHING`,
    insertNextStep: `INSERT INTO ${t.steps} (${STEP_COLUMNS})
         SELECT $1, $2, $3, $4, $5, ${output}, $7, $8, $9, $10, $11, $12
         WHERE ${nextOrExisting(t.steps, "$1", "$2")}
         ON CONFLICT (run_id, seq) DO UPDATE SET ${STEP_UPDATE}
         WHERE ${t.steps}.name = excluded.name AND ${t.steps}.status <> 'completed'`,
  };
}

/**
 * The SQL condition under which a step record may be written at `seq` (besides its name and status):
 * a record is there (a rewrite), or it is the run's next seq (its highest + 1; 0 with no records), so a
 * pruned run's holes are never filled. Index probes on `(run_id, seq)` only.
 */
export function nextOrExisting(steps: string, runId: string, seq: string): string {
  return `(EXISTS (SELECT 1 FROM ${steps} WHERE run_id = ${runId} AND seq = ${seq})
           OR (NOT EXISTS (SELECT 1 FROM ${steps} WHERE run_id = ${runId} AND seq >= ${seq})
               AND (${seq} = 0 OR EXISTS (SELECT 1 FROM ${steps} WHERE run_id = ${runId} AND seq = ${seq} - 1))))`;
}

export const what = (verb: string, runId: string) => `cannot ${verb} run ${JSON.stringify(runId)}`;

/** Values bound per statement built from a list (far below both databases' limits). */
export const BLOB_CHUNK = 500;

/** `$from, $from+1, …` for `count` values. */
export const placeholders = (count: number, from = 1): string =>
  Array.from({ length: count }, (_, i) => `$${from + i}`).join(", ");

export function chunks<T>(items: readonly T[], size: number): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < items.length; i += size) out.push(items.slice(i, i + size));
  return out;
}

/** The same bytes as a Buffer (both drivers bind a Buffer as a blob/bytea), not copied. */
export const asBuffer = (b: Uint8Array): Buffer =>
  Buffer.isBuffer(b) ? b : Buffer.from(b.buffer, b.byteOffset, b.byteLength);

/** Step records a prune deletes per transaction. */
export const PRUNE_BATCH = 1000;

/** Columns a reset or a retry clears (besides the lease). */
export const RESET_COLUMNS = ["output_json", "error_json", "waiting_for", "wake_at"] as const;

export function requireRun(runId: string, row: Row | undefined): Row {
  if (!row) throw new RunNotFoundError(runId);
  return row;
}

export function requireToken(runId: string, token: number, row: Row | undefined): Row {
  const run = requireRun(runId, row);
  const current = Number(run.fencing_token);
  if (current !== token) throw new StaleFencingTokenError(runId, token, current);
  return run;
}

/**
 * @internal The parameters `$1`…`$12` of a step record's row, in the column order every SQL step
 * statement uses: run id, seq, name, input hash, status, output text, error text, attempt, started
 * at, finished at (ms), fencing token, snapshot (1 or NULL). With `bytes`, an output attached as UTF-8
 * bytes ({@link outputBytes}) is given as those bytes (a Buffer), for a statement that casts them to text.
 *
 * @throws {NonJsonValueError} when the output is not JSON
 */
export function stepRecordValues(token: number, record: StepRecord, snapshot = false, bytes = false): unknown[] {
  const utf8 = bytes ? outputBytes(record) : undefined;
  return [
    record.runId,
    record.seq,
    record.name,
    record.inputHash,
    record.status,
    utf8 === undefined ? outputColumn(record) : asBuffer(utf8),
    record.error === undefined ? null : JSON.stringify(record.error),
    record.attempt,
    record.startedAt,
    record.finishedAt ?? null,
    token,
    snapshot ? 1 : null,
  ];
}
