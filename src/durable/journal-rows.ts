/**
 * Reading a journal's stored rows (shared by the SQL and Redis journals, whose rows and hashes use
 * the same snake_case fields): JSON columns parsed with a typed error naming the column, rows mapped
 * to {@link RunRecord}, {@link StepRecord}, {@link JournalEvent} and {@link SignalRecord}.
 *
 * @module
 */
import { FormatError } from "../core/errors.js";
import type { JsonValue } from "../core/json.js";
import type {
  JournalEvent,
  JournalEventType,
  RecordedError,
  RunRecord,
  RunStatus,
  SignalRecord,
  StepRecord,
} from "./journal-types.js";

/**
 * Parses a stored JSON text (internal helper of the stores).
 *
 * @param text - the stored text; `null`/`undefined` when the value is absent
 * @param label - names the value for the error, e.g. `output_json of step #2 of run "r1"`
 * @returns the value, or undefined when absent
 * @throws {FormatError} when the text is not JSON (an edited or corrupted journal), naming `label`
 */
export function parseStored<T>(text: string | null | undefined, label: string): T | undefined {
  return text === null || text === undefined ? undefined : parseJournalJson<T>(text, label);
}

/**
 * Parses a JSON text read from a journal store (internal helper of the stores).
 *
 * @param text - the stored text
 * @param label - names the value for the error, e.g. `input_json of run "r1"`
 * @returns the value
 * @throws {FormatError} when the text is not JSON (an edited or corrupted journal), naming `label`
 */
export function parseJournalJson<T>(text: string, label: string): T {
  try {
    return JSON.parse(text) as T;
  } catch (cause) {
    throw new FormatError(
      `journal: ${label} is not valid JSON (an edited or corrupted journal): ${(cause as Error).message}`,
      { cause },
    );
  }
}

// ---- row mapping shared by the journal stores (SQL rows and Redis hashes use the same snake_case fields) ----

/** A stored row or hash: snake_case field names. */
export type JournalRow = Record<string, unknown>;

const num = (v: unknown): number | undefined => (v === null || v === undefined ? undefined : Number(v));
const str = (v: unknown): string | undefined => (v === null || v === undefined ? undefined : String(v));

/**
 * Maps a run row of any SQL store (or a Redis run hash) to a {@link RunRecord}.
 *
 * @param r - the row
 * @param tolerant - a listing's read: a JSON column that cannot be read is left out and named in
 *   {@link RunRecord.readError} instead of thrown
 * @throws {FormatError} for a JSON column that cannot be read (unless `tolerant`)
 */
export function runFromRow(r: JournalRow, tolerant = false): RunRecord {
  const runId = String(r.run_id);
  const of = `of run ${JSON.stringify(runId)}`;
  let readError: RunRecord["readError"];
  const json = <T>(read: () => T | undefined): T | undefined => {
    if (!tolerant) return read();
    try {
      return read();
    } catch (e) {
      if (!(e instanceof FormatError)) throw e;
      readError ??= { code: e.code, message: e.message };
      return undefined;
    }
  };
  const run: RunRecord = {
    runId,
    workflow: String(r.workflow),
    status: String(r.status) as RunStatus,
    input: json(() => parseJournalJson<JsonValue>(String(r.input_json), `input_json ${of}`)) ?? null,
    fencingToken: Number(r.fencing_token),
    createdAt: Number(r.created_at),
    updatedAt: Number(r.updated_at),
  };
  const output = json(() => parseStored<JsonValue>(str(r.output_json), `output_json ${of}`));
  if (output !== undefined) run.output = output;
  const error = json(() => parseStored<RecordedError>(str(r.error_json), `error_json ${of}`));
  if (error !== undefined) run.error = error;
  if (readError !== undefined) run.readError = readError;
  if (str(r.waiting_for) !== undefined) run.waitingFor = String(r.waiting_for);
  if (num(r.wake_at) !== undefined) run.wakeAt = Number(r.wake_at);
  if (str(r.lease_owner) !== undefined) run.leaseOwner = String(r.lease_owner);
  if (num(r.lease_expires_at) !== undefined) run.leaseExpiresAt = Number(r.lease_expires_at);
  return run;
}

/** Maps a step row of any SQL store to a {@link StepRecord} (`runId`: the run's id when the row does not carry it). */
export function stepFromRow(r: JournalRow, runId?: string): StepRecord {
  const step: StepRecord = {
    runId: runId ?? String(r.run_id),
    seq: Number(r.seq),
    name: String(r.name),
    inputHash: String(r.input_hash),
    status: String(r.status) as StepRecord["status"],
    attempt: Number(r.attempt),
    startedAt: Number(r.started_at),
    fencingToken: Number(r.fencing_token),
  };
  const of = `of step #${step.seq} of run ${JSON.stringify(step.runId)}`;
  const output = parseStored<JsonValue>(str(r.output_json), `output_json ${of}`);
  if (output !== undefined) step.output = output;
  const error = parseStored<RecordedError>(str(r.error_json), `error_json ${of}`);
  if (error !== undefined) step.error = error;
  if (num(r.finished_at) !== undefined) step.finishedAt = Number(r.finished_at);
  if (r.snapshot !== null && r.snapshot !== undefined && Number(r.snapshot) !== 0) step.snapshot = true;
  return step;
}

/** Maps an event row of any SQL store to a {@link JournalEvent}. */
export function eventFromRow(r: JournalRow): JournalEvent {
  const e: JournalEvent = {
    runId: String(r.run_id),
    index: Number(r.idx),
    type: String(r.type) as JournalEventType,
    at: Number(r.at),
  };
  if (num(r.seq) !== undefined) e.seq = Number(r.seq);
  if (str(r.name) !== undefined) e.name = String(r.name);
  if (num(r.attempt) !== undefined) e.attempt = Number(r.attempt);
  if (num(r.fencing_token) !== undefined) e.fencingToken = Number(r.fencing_token);
  if (str(r.by_name) !== undefined) e.by = String(r.by_name);
  if (str(r.detail) !== undefined) e.detail = String(r.detail);
  return e;
}

/** Maps a signal row of any SQL store to a {@link SignalRecord}. */
export function signalFromRow(r: JournalRow): SignalRecord {
  return {
    runId: String(r.run_id),
    name: String(r.name),
    value: parseJournalJson<JsonValue>(
      String(r.value_json),
      `value_json of signal ${JSON.stringify(String(r.name))} of run ${JSON.stringify(String(r.run_id))}`,
    ),
    sentAt: Number(r.sent_at),
  };
}
