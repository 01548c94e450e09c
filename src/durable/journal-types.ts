/**
 * The records and statuses of the journal contract (`journal.ts`): runs, step
 * records, signals, audit events, a lease's result and the filter of a
 * listing. Declared apart from the contract so that its row parsers
 * (`journal-rows.ts`), its listing order (`journal-list.ts`) and the lease
 * (`lease.ts`) share them without importing the contract back: this module
 * imports none of the journal's modules. Every name is exported from
 * `journal.ts` as well.
 *
 * @module
 */
import type { JsonValue } from "../core/json.js";

/** Status of one step record. */
export type StepStatus = "started" | "completed" | "failed" | "waiting";
/**
 * Status of a run:
 * - `pending`: created (or reset/retried by an operator), not started yet;
 * - `running`: an executor holds (or held) its lease;
 * - `waiting`: suspended on a signal or a timer;
 * - `blocked`: it cannot continue as the program stands (a structural replay
 *   divergence after a deploy): `error` says why; resumable once fixed
 *   (`retryRun`, `resetRun`);
 * - `completed`, `failed`: ended (`failed` can be retried by an operator);
 * - `cancelled`: ended by an operator; takes no more steps.
 */
export type RunStatus = "pending" | "running" | "waiting" | "blocked" | "completed" | "failed" | "cancelled";

/** An error as stored in the journal (JSON). */
export interface RecordedError {
  /** Error class name, e.g. `TypeError`. */
  name: string;
  /** Error message. */
  message: string;
  /** `code` of a {@link DumplingsError} (or of a Node error), when it has one. */
  code?: string;
}

/**
 * One step record. `(runId, seq)` is unique. The seqs of a durable run have
 * no gaps; a run whose steps were pruned ({@link Journal.pruneRuns}) has
 * holes before its kept snapshot steps, and its next seq is its highest + 1.
 */
export interface StepRecord {
  runId: string;
  /** 0-based position of the step in the run. */
  seq: number;
  /** Step name, e.g. `llm`, `tool:search`, `signal:approval:call_1`, `sleep:cooldown`. */
  name: string;
  /** sha256 (hex) of the canonical JSON of the step input (see {@link hashInput}). */
  inputHash: string;
  status: StepStatus;
  /** JSON output (`completed`), or wait details (`waiting`). */
  output?: JsonValue;
  /** Error of the last failed attempt (`failed`, or a `started` record being retried). */
  error?: RecordedError;
  /** 1-based attempt number of the latest attempt. */
  attempt: number;
  /** Epoch ms at which the latest attempt started. */
  startedAt: number;
  /** Epoch ms at which the record reached `completed`/`failed`/`waiting`. */
  finishedAt?: number;
  /** Fencing token of the executor that wrote the record. */
  fencingToken: number;
  /**
   * Set when the record was written with {@link WriteStepOptions.snapshot}: it holds a whole state, so
   * the steps before it may be pruned ({@link Journal.pruneRuns}).
   */
  snapshot?: true;
}

/** A run's row. */
export interface RunRecord {
  runId: string;
  /** Name of the workflow function that executes the run (for workers and the CLI). */
  workflow: string;
  status: RunStatus;
  /** JSON input the run was created with. */
  input: JsonValue;
  /** Workflow result (`completed`). */
  output?: JsonValue;
  /** Workflow error (`failed`). */
  error?: RecordedError;
  /** Signal name the run waits for (`waiting` on a signal). */
  waitingFor?: string;
  /** Epoch ms the run sleeps until (`waiting` on a timer). */
  wakeAt?: number;
  /** Current fencing token: 0 before the first lease, +1 per lease taken. */
  fencingToken: number;
  /** Owner of the current lease (worker id), if any. */
  leaseOwner?: string;
  /** Epoch ms (store clock) at which the current lease expires (absent: no lease). */
  leaseExpiresAt?: number;
  /** Epoch ms (store clock). */
  createdAt: number;
  /** Epoch ms (store clock) of the last change of status, lease or input. */
  updatedAt: number;
  /**
   * Set only by `listRuns` on a run whose stored JSON (`input_json`, `output_json`, `error_json`) cannot be
   * read (an edited or corrupted journal): the run is listed with what could be read (`input` is then `null`)
   * and why, instead of one bad row failing the whole listing. `getRun` throws the `FormatError` instead.
   */
  readError?: { code: string; message: string };
}

/** A signal sent to a run (at most one per name). */
export interface SignalRecord {
  runId: string;
  name: string;
  value: JsonValue;
  /** Epoch ms (store clock). */
  sentAt: number;
}

/** Kinds of audit events. */
export type JournalEventType =
  | "run_created"
  | "lease_acquired"
  | "step_started"
  | "step_completed"
  | "step_failed"
  | "step_waiting"
  | "signal_received"
  | "run_running"
  | "run_waiting"
  | "run_completed"
  | "run_failed"
  /** A run could not continue (`blocked`); `detail` says why. */
  | "run_blocked"
  /** An operator cancelled the run; `by` says who. */
  | "run_cancelled"
  /** An operator dropped the journal after a step (`seq`); `by` says who. */
  | "run_reset"
  /** An operator retried a failed or blocked run; `by` says who (`seq`, `name`: the failed step dropped, if any). */
  | "run_retried"
  /** A replayed step's input differs from the recorded one; the recorded result was used (`seq`, `name`, `detail`). */
  | "step_drift"
  /** A worker's job met an error that left the run resumable, e.g. a storage error (`attempt`: the job's, `detail`: code and message). */
  | "run_error";

/** One audit event (append-only, per run, 0-based `index`). */
export interface JournalEvent {
  runId: string;
  index: number;
  type: JournalEventType;
  /** Epoch ms (store clock). */
  at: number;
  /** Step seq, for step events. */
  seq?: number;
  /** Step or signal name. */
  name?: string;
  /** Attempt number, for step events. */
  attempt?: number;
  /** Fencing token of the writer (lease and step events), or the token an operator event set (`run_cancelled`, `run_reset`, `run_retried`). */
  fencingToken?: number;
  /** Who did it, for operator events (`run_cancelled`, `run_reset`, `run_retried`), e.g. `alice@host`. */
  by?: string;
  /** Free text: a blocked reason, a drift description. */
  detail?: string;
}

/** Fields of an event appended by {@link Journal.appendEvent} (the store numbers it and stamps `at`). */
export type JournalEventInput = Omit<JournalEvent, "runId" | "index" | "at">;

/** Result of {@link Journal.acquireLease}. */
export type LeaseResult =
  /**
   * `expiresAt`: epoch ms, store clock. `status`: the run's status as the
   * lease was taken (read in the same atomic operation), so the new holder
   * knows without another read whether the run has ended meanwhile; a
   * journal may leave it out (the caller then reads the run).
   */
  | { acquired: true; fencingToken: number; expiresAt: number; status?: RunStatus }
  /** The live holder and its lease's expiry (epoch ms, store clock). */
  | { acquired: false; owner: string; expiresAt: number };

/** Filter and page of {@link Journal.listRuns}. */
export interface ListRunsFilter {
  /** Only runs of this status. */
  status?: RunStatus;
  /** Only runs of this workflow ({@link RunRecord.workflow}). */
  workflow?: string;
  /** At most this many runs (an integer ≥ 1). @default 1000 */
  limit?: number;
  /**
   * The {@link runCursor} of the last run of the previous page: only runs created before it (see
   * {@link Journal.listRuns}). A cursor of an earlier release (update order) is an `InvalidOptionError`.
   */
  after?: string;
}

/** Options of a journal's `acquireLease` (`Journal.acquireLease`). */
export interface AcquireLeaseOptions {
  /**
   * Whether a live lease already held by the same `owner` id is taken back (with a new fencing
   * token, fencing the holder off). `true` suits a holder whose owner id names one execution (a
   * restarted worker with a stable name takes its lease back at once). `false`: a live lease is
   * refused to every taker, its own owner included, so the lease belongs to the one execution that
   * took it: `runDurable` (and so every `DurableWorker` slot) takes leases this way, and a second
   * execution of a live run under the same owner id waits or gets `LeaseHeldError` instead of
   * running a step whose first execution is still in progress. @default true
   */
  reentrant?: boolean;
}
