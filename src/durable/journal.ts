/**
 * The journal contract of durable execution: the single source of truth of
 * what a run did. A run has a row (status, input, output, lease and fencing
 * token), an append-only list of step records indexed by sequence number, the
 * signals sent to it, and an append-only audit log of events.
 *
 * Every operation that changes a run on behalf of its executor carries the
 * run's fencing token; a store refuses a stale token with
 * {@link StaleFencingTokenError} and writes nothing (Kleppmann, "How to do
 * distributed locking", 2016: the storage checks the token, not the lock).
 * Each operation is atomic (one SQL transaction or one Lua script).
 *
 * Time comes from the store, never from the caller's `Date.now()`: lease
 * expiry is judged, and `expiresAt`, `createdAt`, `updatedAt`, event `at` and
 * signal `sentAt` are stamped, by the store's clock inside the operation
 * itself (PostgreSQL `statement_timestamp()`, Redis `TIME` inside the Lua
 * script, the host's clock as SQLite reads it). A worker whose clock runs
 * ahead can therefore not take over a live lease (case pb-32). Step records'
 * `startedAt`/`finishedAt` are the executor's (they describe, they decide
 * nothing).
 *
 * One implementation per file (`journal-sqlite.ts`, `journal-postgres.ts`,
 * `journal-redis.ts`); all pass one conformance suite
 * (`src/testing/journal-conformance.ts`, public as `runJournalConformance` in
 * `dumplings-ai/testing`).
 *
 * @module
 */
import { createHash } from "node:crypto";
import { InvalidOptionError } from "../core/errors.js";
import { assertJson, type JsonValue } from "../core/json.js";
import { checkOptions, optionKeys, shownValue } from "../core/options.js";
import { JournalIntegrityError, RunStateError, StaleFencingTokenError } from "./errors.js";
import type {
  AcquireLeaseOptions,
  JournalEvent,
  JournalEventInput,
  LeaseResult,
  ListRunsFilter,
  RecordedError,
  RunRecord,
  RunStatus,
  SignalRecord,
  StepRecord,
} from "./journal-types.js";

export { type CheckedListRuns, checkListRuns, RUN_STATUSES, runCursor, sqlListRuns } from "./journal-list.js";
export {
  eventFromRow,
  type JournalRow,
  parseJournalJson,
  parseStored,
  runFromRow,
  signalFromRow,
  stepFromRow,
} from "./journal-rows.js";
// The records and statuses of the contract are declared in `journal-types.ts` (which imports none of the
// journal's modules, so the row parsers, the listing and the lease share them without a circle).
export type {
  AcquireLeaseOptions,
  JournalEvent,
  JournalEventInput,
  JournalEventType,
  LeaseResult,
  ListRunsFilter,
  RecordedError,
  RunRecord,
  RunStatus,
  SignalRecord,
  StepRecord,
  StepStatus,
} from "./journal-types.js";

/** Filter of {@link Journal.readSteps}: every field narrows the records returned (seq order kept). */
export interface StepQuery {
  /** Only records whose seq is at least this (an integer ≥ 0). */
  fromSeq?: number;
  /** Only records whose name starts with this (case-sensitive; `""` matches every name). */
  namePrefix?: string;
  /** Of the matching records, only the `last` newest (highest seqs; an integer ≥ 1). */
  last?: number;
  /**
   * `false`: the caller needs no `output` and `error`: a store that keeps them apart from the rest
   * of the record (the SQL journals) does not read them, so the records come without them; a store
   * that keeps a record whole (Redis) may still return them. @default true
   */
  outputs?: boolean;
}

/** The keys of {@link StepQuery}: any other is an `InvalidOptionError`. */
const STEP_QUERY_KEYS = optionKeys<StepQuery>({ fromSeq: true, namePrefix: true, last: true, outputs: true });

/**
 * Checks a {@link StepQuery} (shared by the stores) and returns it normalised:
 * `undefined` when it filters nothing (the plain read of every record).
 * @throws {InvalidOptionError} on an unknown key, `fromSeq` not an integer ≥ 0, `namePrefix` not a string,
 *   `last` not an integer ≥ 1
 */
export function checkStepQuery(
  store: string,
  query: StepQuery | undefined,
): { fromSeq: number; namePrefix: string; last: number | undefined; outputs: boolean } | undefined {
  if (query === undefined) return undefined;
  const component = `${store} readSteps`;
  if (query === null || typeof query !== "object") {
    throw new InvalidOptionError(component, "query", "must be an object { fromSeq?, namePrefix?, last? }");
  }
  checkOptions(component, query, STEP_QUERY_KEYS);
  const { fromSeq = 0, namePrefix = "", last, outputs = true } = query;
  if (typeof outputs !== "boolean") {
    throw new InvalidOptionError(component, "outputs", `must be true or false, got ${String(outputs)}`);
  }
  if (!Number.isSafeInteger(fromSeq) || fromSeq < 0) {
    throw new InvalidOptionError(component, "fromSeq", `must be an integer ≥ 0, got ${String(fromSeq)}`);
  }
  if (typeof namePrefix !== "string") {
    throw new InvalidOptionError(component, "namePrefix", `must be a string, got ${typeof namePrefix}`);
  }
  if (last !== undefined && (!Number.isSafeInteger(last) || last < 1)) {
    throw new InvalidOptionError(component, "last", `must be an integer ≥ 1, got ${String(last)}`);
  }
  if (fromSeq === 0 && namePrefix === "" && last === undefined && outputs) return undefined;
  return { fromSeq, namePrefix, last, outputs };
}

/** Fields {@link Journal.updateRun} may change. */
export interface RunPatch {
  /** New status; with `blocked`, `error` carries the reason. */
  status: RunStatus;
  output?: JsonValue;
  error?: RecordedError;
  /** With `status: "waiting"`: the signal waited for. */
  waitingFor?: string;
  /** With `status: "waiting"`: the timer's wake-up time (epoch ms). */
  wakeAt?: number;
}

/**
 * Options of {@link Journal.writeStep}.
 *
 * `step` writes an attempt's `started` record with `sync: false` (unless its
 * retry policy's `maxStartedAttempts` is 1) and every other record synced:
 * the `started` record only counts attempts interrupted by a crash of the
 * executing process, which it survives either way, and the step's `completed`
 * (or `failed`) record, synced, makes it durable with it.
 */
export interface WriteStepOptions {
  /**
   * `false`: the record must survive a crash of the writing process, not
   * necessarily one of the store's host until the next synced write (SQLite:
   * the commit is not fsynced, as with `synchronous = NORMAL`; PostgreSQL:
   * `synchronous_commit = off` for its transaction; Redis: ignored, its
   * persistence is the server's). @default true
   */
  sync?: boolean;
  /**
   * The record holds a whole state (a graph's checkpoint): the run's steps before it are not needed to
   * go on from it, and {@link Journal.pruneRuns} may delete them. Stored with the record and read back as
   * {@link StepRecord.snapshot} (the record's own `snapshot` field is not read: this option decides).
   * @default false
   */
  snapshot?: boolean;
  /**
   * Payloads the record's output refers to, stored once and shared: reference → bytes, the reference
   * being the sha256 (64 lowercase hex digits) of the bytes, which the store verifies. Written in the
   * record's own transaction (script); a blob already stored is not written again. Every key is also
   * one of the record's {@link blobRefs}.
   */
  blobs?: ReadonlyMap<string, Uint8Array>;
  /**
   * Every blob reference the record's output holds, new ({@link blobs}) or already stored. A blob is
   * deleted with its last reference: when the records holding it are deleted ({@link Journal.deleteRun},
   * {@link Journal.pruneRuns}, {@link Journal.resetRun}, {@link Journal.retryRun}) or rewritten at the same
   * seq without it. A reference neither stored nor given in `blobs` is a `JournalIntegrityError`.
   */
  blobRefs?: readonly string[];
  /**
   * `true`: the record must be new: a record already at its seq, even one of the same name that is not
   * completed (which a write may otherwise replace: a step's next attempt), is a `JournalIntegrityError`,
   * nothing written. Two writers that read the same next seq and both mean to start something (a side
   * effect guarded without a lease) then get one record between them. @default false
   */
  create?: boolean;
}

/** The keys of {@link WriteStepOptions}: any other is an `InvalidOptionError`. */
const WRITE_STEP_OPTIONS = optionKeys<WriteStepOptions>({
  sync: true,
  snapshot: true,
  blobs: true,
  blobRefs: true,
  create: true,
});

/**
 * Whether a step write may only create its record ({@link WriteStepOptions.create}).
 * @throws {InvalidOptionError} when `create` is given and not a boolean
 */
export function createOnlyWrite(options: WriteStepOptions | undefined): boolean {
  const create = options?.create;
  if (create !== undefined && typeof create !== "boolean") {
    throw new InvalidOptionError("writeStep", "create", `must be true or false, got ${shownValue(create)}`);
  }
  return create === true;
}

/** The blobs of one {@link Journal.writeStep}, checked ({@link blobWrite}). */
export interface BlobWrite {
  /** New bytes by reference. */
  bytes: ReadonlyMap<string, Uint8Array>;
  /** Every reference of the record, unique, sorted. */
  refs: string[];
}

const SHA256_HEX = /^[0-9a-f]{64}$/;

/**
 * The blobs of a {@link Journal.writeStep} (shared by the stores), checked: `undefined` when it has none.
 * @throws {InvalidOptionError} when `blobs` is not a Map of sha256 references to the bytes they hash,
 *   or `blobRefs` not an array of sha256 references
 */
export function blobWrite(store: string, options: WriteStepOptions | undefined): BlobWrite | undefined {
  if (options?.blobs === undefined && options?.blobRefs === undefined) return undefined;
  const component = `${store} writeStep`;
  const refs = new Set<string>();
  const { blobs = new Map<string, Uint8Array>(), blobRefs = [] } = options;
  if (!(blobs instanceof Map)) throw new InvalidOptionError(component, "blobs", "must be a Map of reference → bytes");
  if (!Array.isArray(blobRefs)) throw new InvalidOptionError(component, "blobRefs", "must be an array of references");
  for (const ref of blobRefs) {
    if (typeof ref !== "string" || !SHA256_HEX.test(ref)) {
      throw new InvalidOptionError(
        component,
        "blobRefs",
        `${JSON.stringify(ref)} is not a sha256 (64 lowercase hex digits)`,
      );
    }
    refs.add(ref);
  }
  for (const [ref, bytes] of blobs) {
    if (!(bytes instanceof Uint8Array)) {
      throw new InvalidOptionError(component, "blobs", `the value of ${JSON.stringify(ref)} is not a Uint8Array`);
    }
    const hash = createHash("sha256").update(bytes).digest("hex");
    if (ref !== hash) {
      throw new InvalidOptionError(
        component,
        "blobs",
        `reference ${JSON.stringify(ref)} is not the sha256 of its ${bytes.byteLength} bytes (${hash})`,
      );
    }
    refs.add(ref);
  }
  return { bytes: blobs, refs: [...refs].sort() };
}

/**
 * Whether a {@link Journal.writeStep} must be synced (shared by the stores).
 * @throws {InvalidOptionError} on an unknown option
 */
export function syncedWrite(store: string, options: WriteStepOptions | undefined): boolean {
  if (options === undefined) return true;
  checkOptions(`${store} writeStep`, options, WRITE_STEP_OPTIONS);
  return options.sync !== false;
}

/** Whether a {@link Journal.writeStep} writes a snapshot step (options already checked by {@link syncedWrite}). */
export function snapshotWrite(options: WriteStepOptions | undefined): boolean {
  return options?.snapshot === true;
}

/**
 * Options of {@link Journal.pruneRuns}: which finished records go, by their `finishedAt` (epoch ms on the
 * store's clock): those before a cutoff — relative (`olderThanMs`) or absolute (`finishedBefore`), exactly
 * one of them — and, with `finishedFrom`, not before that time (a window: one month of records, say).
 */
export interface PruneOptions {
  /** Only steps that finished (`finishedAt`) more than this many ms before the store's now (a number ≥ 0). Not with `finishedBefore`. */
  olderThanMs?: number;
  /** Only steps that finished before this time (epoch ms, a number). Not with `olderThanMs`. */
  finishedBefore?: number;
  /** Only steps that finished at or after this time (epoch ms, a number). @default no lower bound */
  finishedFrom?: number;
  /** How many of each run's newest snapshot steps stay with everything after them (an integer ≥ 1). @default 1 */
  keepLast?: number;
  /**
   * Space given back after the deletes: SQLite runs `PRAGMA incremental_vacuum` (`"incremental"`, the
   * default; it frees pages of a file created with incremental auto-vacuum) or `VACUUM` (`"full"`, which
   * rewrites the file); PostgreSQL runs `VACUUM` on the journal's tables with `"full"` (autovacuum otherwise);
   * Redis frees memory as it deletes. @default "incremental"
   */
  vacuum?: "incremental" | "full";
}

/** Result of {@link Journal.pruneRuns}. */
export interface PruneResult {
  /** Step records deleted. */
  deletedSteps: number;
  /** Blobs deleted (no record references them any more). */
  deletedBlobs: number;
}

/** The keys of {@link PruneOptions}: any other is an `InvalidOptionError`. */
const PRUNE_KEYS = optionKeys<PruneOptions>({
  olderThanMs: true,
  finishedBefore: true,
  finishedFrom: true,
  keepLast: true,
  vacuum: true,
});

/** {@link PruneOptions} checked, with the cutoff resolved against the store's clock. */
export interface PruneWindow {
  /** Records that finished before this time (epoch ms) may go. */
  before: number;
  /** …and at or after this one (epoch ms; `Number.MIN_SAFE_INTEGER` without a lower bound). */
  from: number;
  keepLast: number;
  vacuum: "incremental" | "full";
}

/**
 * Checks the options of {@link Journal.pruneRuns} (shared by the stores), fills in the defaults and
 * resolves the window against `now` (the store's clock, read once).
 * @throws {InvalidOptionError} on an unknown key, neither or both of `olderThanMs` (a finite number ≥ 0)
 *   and `finishedBefore` (a finite number), `finishedFrom` not a finite number, `keepLast` not an
 *   integer ≥ 1, `vacuum` neither `"incremental"` nor `"full"`
 */
export async function checkPruneOptions(
  store: string,
  options: PruneOptions,
  now: () => Promise<number>,
): Promise<PruneWindow> {
  const component = `${store} pruneRuns`;
  if (options === null || typeof options !== "object") {
    throw new InvalidOptionError(component, "options", "must be an object { olderThanMs, keepLast?, vacuum? }");
  }
  checkOptions(component, options, PRUNE_KEYS);
  const { olderThanMs, finishedBefore, finishedFrom, keepLast = 1, vacuum = "incremental" } = options;
  if (olderThanMs === undefined && finishedBefore === undefined) {
    throw new InvalidOptionError(
      component,
      "olderThanMs",
      "give olderThanMs (ms before now) or finishedBefore (epoch ms)",
    );
  }
  if (olderThanMs !== undefined && finishedBefore !== undefined) {
    throw new InvalidOptionError(component, "finishedBefore", "give olderThanMs or finishedBefore, not both");
  }
  if (
    olderThanMs !== undefined &&
    (typeof olderThanMs !== "number" || !Number.isFinite(olderThanMs) || olderThanMs < 0)
  ) {
    throw new InvalidOptionError(component, "olderThanMs", `must be a number of ms ≥ 0, got ${String(olderThanMs)}`);
  }
  for (const [key, v] of [
    ["finishedBefore", finishedBefore],
    ["finishedFrom", finishedFrom],
  ] as const) {
    if (v !== undefined && (typeof v !== "number" || !Number.isFinite(v))) {
      throw new InvalidOptionError(component, key, `must be a time in epoch ms, got ${String(v)}`);
    }
  }
  if (!Number.isSafeInteger(keepLast) || keepLast < 1) {
    throw new InvalidOptionError(component, "keepLast", `must be an integer ≥ 1, got ${String(keepLast)}`);
  }
  if (vacuum !== "incremental" && vacuum !== "full") {
    throw new InvalidOptionError(
      component,
      "vacuum",
      `expected "incremental" or "full", got ${JSON.stringify(vacuum)}`,
    );
  }
  // Times are whole ms: `finishedAt < x` is `finishedAt < ceil(x)`, `finishedAt >= x` is `finishedAt >= ceil(x)`
  // (and PostgreSQL's BIGINT columns take integers only).
  const whole = (x: number) => Math.min(Number.MAX_SAFE_INTEGER, Math.max(Number.MIN_SAFE_INTEGER, Math.ceil(x)));
  const before = whole(finishedBefore ?? (await now()) - (olderThanMs as number));
  return { before, from: whole(finishedFrom ?? Number.MIN_SAFE_INTEGER), keepLast, vacuum };
}

/** Result of {@link Journal.updateRun}. */
export type UpdateRunResult =
  | { ok: true }
  /** The run was to wait for a signal that has already arrived: it was not suspended. */
  | { ok: false; signal: SignalRecord };

/**
 * A durable-execution journal. All methods are atomic per call.
 *
 * @example
 * const journal = new SqliteJournal({ path: "runs.db" });
 * await journal.createRun({ runId: "r1", workflow: "agent", input: { q: "hi" } });
 * const lease = await journal.acquireLease("r1", "worker-a", 30_000);
 */
export interface Journal {
  /** Store name for messages, e.g. `sqlite`. */
  readonly name: string;
  /**
   * Creates a run (status `pending`, token 0) unless it exists.
   * @returns `created: false` and the stored run when the id was taken
   */
  createRun(init: { runId: string; workflow: string; input: JsonValue }): Promise<{ created: boolean; run: RunRecord }>;
  /** The run, or undefined. */
  getRun(runId: string): Promise<RunRecord | undefined>;
  /**
   * Runs, newest created first by `(createdAt, runId)` (both descending), optionally of one status and
   * one workflow, a page at a time: `after` is the {@link runCursor} of the last run of the previous page.
   * Both keys are fixed when a run is created, so a run keeps its place however often it changes: a walk
   * lists each run exactly once while runs are updated between its pages. A run created during the walk
   * sorts before its first page and is not listed by its later pages (never twice); a run deleted
   * during the walk is not listed by the pages read after the delete; with `status`, a run is listed
   * when it has that status as its page is read. (`updatedAt` is not an order: a run updated would move.)
   * @param filter - see {@link ListRunsFilter}
   * @throws {InvalidOptionError} on an unknown key, a `limit` that is not an integer ≥ 1, or an `after`
   *   that is not a cursor made by {@link runCursor} (a cursor of an earlier release, which listed by
   *   update time, included: list again from the first page)
   */
  listRuns(filter?: ListRunsFilter): Promise<RunRecord[]>;
  /**
   * Takes the run's lease for `owner` for `ttlMs` when it is free, expired, or
   * already `owner`'s (unless `options.reentrant` is `false`: then a live lease
   * is refused to `owner` too); taking it increments the fencing token. Expiry
   * is judged by the store's clock, and the new lease expires at store now +
   * `ttlMs` (the caller's clock plays no part).
   * @param options - see {@link AcquireLeaseOptions}
   * @throws {RunNotFoundError}
   * @throws {InvalidOptionError} on an unknown key or a `reentrant` that is not a boolean
   */
  acquireLease(runId: string, owner: string, ttlMs: number, options?: AcquireLeaseOptions): Promise<LeaseResult>;
  /**
   * Extends the lease held with `token` to store now + `ttlMs`.
   * @returns the new expiry (epoch ms, store clock)
   * @throws {StaleFencingTokenError} when `token` is not current
   */
  renewLease(runId: string, token: number, ttlMs: number): Promise<number>;
  /**
   * Drops the lease held with `token` (no-op when `token` is stale). A store
   * may write it unsynced (see {@link WriteStepOptions.sync}): a release lost
   * with the store's host only makes the next taker wait for the lease to
   * expire.
   */
  releaseLease(runId: string, token: number): Promise<void>;
  /**
   * The run's step records ordered by seq; with `query`, only those at or
   * after `fromSeq`, whose name starts with `namePrefix`, and of those the
   * `last` newest (e.g. a graph's newest checkpoint:
   * `{ namePrefix: "checkpoint:", last: 1 }`, read without the others' outputs).
   * @param query - see {@link StepQuery}; none: every record
   * @throws {InvalidOptionError} on an unknown key or a bad value in `query`
   */
  readSteps(runId: string, query?: StepQuery): Promise<StepRecord[]>;
  /**
   * Inserts the record at `record.seq` (which must be the next seq) or updates
   * a not-completed record at that seq with the same name.
   *
   * With `options.sync: false` the record must be in the store when the call
   * returns (a crash of the calling process never loses it) but the store may
   * skip its flush to disk: a crash of the store's host (power loss, OS or
   * database server crash) may lose it until the next synced write, which makes
   * it durable together with everything written before it. A store without
   * such a mode ignores the option (every write synced).
   * @param options - `sync` (default true): see above
   * @throws {StaleFencingTokenError} when `token` is not the run's current token
   * @throws {JournalIntegrityError} on a gap, a name change, or a rewrite of a completed record
   */
  writeStep(token: number, record: StepRecord, options?: WriteStepOptions): Promise<void>;
  /**
   * Changes the run's status and records `run_<status>`. With `status:
   * "waiting"` and `waitingFor`, the run is suspended only if that signal has
   * not arrived (checked atomically with {@link sendSignal}, so a wake-up is
   * never lost). With `status: "blocked"`, `error` is the reason and the
   * `run_blocked` event's `detail` its message. A store may write the change
   * to `running` unsynced (see {@link WriteStepOptions.sync}): the executor's
   * lease (synced) is what holds the run, and its next synced write makes the
   * status durable too; every other status is synced.
   * @throws {StaleFencingTokenError}
   */
  updateRun(token: number, runId: string, patch: RunPatch): Promise<UpdateRunResult>;
  /**
   * Records a signal (from any process, no token). A run that has ended (`completed`, `failed`,
   * `cancelled`) waits for nothing any more: a new signal to it is refused, atomically with the
   * status check (a signal is never recorded on a run that ended meanwhile). A `resetRun` makes
   * such a run `pending` again, and it takes signals again.
   * @returns the run as it was when the signal was recorded (its `status`/`waitingFor` say whether to wake it)
   * @throws {SignalConflictError} when a signal of that name was already sent (whatever the run's status)
   * @throws {RunStateError} (code `RUN_STATE`, `action: "signal"`) when the run has ended; nothing was recorded
   * @throws {RunNotFoundError}
   */
  sendSignal(runId: string, name: string, value: JsonValue): Promise<RunRecord>;
  /** The signal, or undefined. */
  getSignal(runId: string, name: string): Promise<SignalRecord | undefined>;
  /** All signals of the run, oldest first. */
  listSignals(runId: string): Promise<SignalRecord[]>;
  /** The run's audit log, oldest first. */
  readEvents(runId: string): Promise<JournalEvent[]>;
  /** Removes the run and everything recorded for it (blobs no other run references included). */
  deleteRun(runId: string): Promise<void>;
  /**
   * The bytes of a blob written with {@link WriteStepOptions.blobs}, or undefined when the store does
   * not hold it (never written, or deleted with its last reference).
   * @param ref - the blob's sha256 (hex)
   * @throws {BackendError} when the store cannot be reached
   */
  readBlob(ref: string): Promise<Uint8Array | undefined>;
  /**
   * Retention: in every run, deletes the step records that finished (`finishedAt`) before the store's
   * now − `olderThanMs` and lie before the run's `keepLast`-th newest snapshot step
   * ({@link WriteStepOptions.snapshot}), with their blob references; blobs no record references any more
   * are deleted. A run without snapshot steps loses no step (a replayed durable run needs them all); a
   * pruned run's seqs have holes, and its next seq stays its highest + 1. Works a run (and at most 1,000
   * records) per transaction, so no lock is held for long; then gives space back (see `vacuum`).
   * @returns how many records and blobs were deleted
   * @throws {InvalidOptionError} on a bad option (see {@link PruneOptions})
   */
  pruneRuns(options: PruneOptions): Promise<PruneResult>;
  /**
   * The store's clock, epoch ms: PostgreSQL `statement_timestamp()`, Redis
   * `TIME`, the host's clock for SQLite (one machine; read by SQLite, not
   * through the process's `Date.now()`). Leases and timers are judged by it,
   * so a worker whose clock is skewed can neither take over a live lease nor
   * fire a timer early.
   * @throws {BackendError} when the store cannot be reached
   */
  now(): Promise<number>;
  /**
   * Appends an audit event (no token: events describe, they never decide).
   * @throws {RunNotFoundError}
   */
  appendEvent(runId: string, event: JournalEventInput): Promise<void>;
  /**
   * Operator: ends the run as `cancelled` (from any status but `completed`,
   * `failed` and `cancelled`), increments the fencing token so the executor
   * holding the lease loses it (its next write is refused), clears the lease,
   * and records `run_cancelled` with `by` and `reason`.
   * @returns the run as it is after the call (unchanged when it had already ended)
   * @throws {RunNotFoundError}
   */
  cancelRun(runId: string, by: string, reason?: string): Promise<RunRecord>;
  /**
   * Operator: keeps the step records `0..toSeq` and deletes every later one,
   * sets the run `pending` (clearing output, error, wait and lease), increments
   * the fencing token, and records `run_reset` with `seq: toSeq` and `by`.
   * `toSeq = -1` drops every step (the run starts over). Allowed from any
   * status: a `completed`, `failed` or `cancelled` run re-runs from step
   * `toSeq + 1` on its next resume; a running executor is fenced off.
   * Signals already sent are kept (a dropped wait is satisfied by them again).
   * @throws {RunNotFoundError}
   * @throws {InvalidOptionError} when `toSeq` is not an integer ≥ -1
   */
  resetRun(runId: string, toSeq: number, by: string): Promise<RunRecord>;
  /**
   * Operator: a `failed` or `blocked` run becomes `pending` again. The failed
   * step record at the end of the journal (if any) is deleted, so the step runs
   * again with a fresh retry budget. Increments the fencing token; records
   * `run_retried` with `by`.
   * @throws {RunNotFoundError}
   * @throws {RunStateError} (code `RUN_STATE`) when the run is neither failed nor blocked; nothing changes
   */
  retryRun(runId: string, by: string): Promise<RunRecord>;
  /** Releases connections the journal created (never injected clients). */
  close(): Promise<void>;
}

/**
 * Canonical JSON: object keys sorted (by UTF-16 code units), no whitespace.
 *
 * @param value - a JSON value
 * @returns canonical text
 * @throws {NonJsonValueError} when `value` is not JSON
 */
export function canonicalJson(value: unknown, path = "input"): string {
  assertJson(value, path);
  const walk = (v: JsonValue): string => {
    if (v === null || typeof v !== "object") return JSON.stringify(v);
    if (Array.isArray(v)) return `[${v.map(walk).join(",")}]`;
    const keys = Object.keys(v)
      .filter((k) => v[k] !== undefined)
      .sort();
    return `{${keys.map((k) => `${JSON.stringify(k)}:${walk(v[k] as JsonValue)}`).join(",")}}`;
  };
  return walk(value);
}

/**
 * The input hash of a step: sha256 (hex) of {@link canonicalJson} of the input.
 *
 * @param input - step input (JSON)
 * @returns 64 hex characters
 * @throws {NonJsonValueError}
 * @example
 * hashInput({ b: 1, a: 2 }) === hashInput({ a: 2, b: 1 }) // true
 */
export function hashInput(input: unknown, path = "input"): string {
  if (input === null) return NULL_INPUT_HASH; // most steps have no input: hashed once
  return createHash("sha256").update(canonicalJson(input, path)).digest("hex");
}

/** {@link hashInput} of `null`. */
const NULL_INPUT_HASH = createHash("sha256").update("null").digest("hex");

/**
 * The JSON text of a record's output, when the code that built the record had it (see {@link withOutputJson}):
 * the text, or its UTF-8 bytes with a way to decode them when a store asks for the text.
 */
const outputTexts = new WeakMap<StepRecord, string | { bytes: Uint8Array; text: () => string }>();

/**
 * @internal Attaches to `record` the JSON text of its `output`, already
 * validated by the caller ({@link assertJson}) and such that
 * `JSON.parse(text)` is `record.output`: a store writes it as is instead of
 * validating and serialising the output again ({@link outputColumn}). Only
 * for a record built by the caller and never changed after.
 *
 * @returns `record`
 */
export function withOutputJson(record: StepRecord, text: string): StepRecord {
  outputTexts.set(record, text);
  return record;
}

/**
 * @internal {@link withOutputJson} with the text's UTF-8 bytes (a checkpoint's state, serialised
 * once as bytes): a store that can write the bytes as the text takes them ({@link outputBytes}),
 * another decodes them, once, through `text` (which must return the same text).
 *
 * @returns `record`
 */
export function withOutputBytes(record: StepRecord, bytes: Uint8Array, text: () => string): StepRecord {
  let decoded: string | undefined;
  outputTexts.set(record, {
    bytes,
    text: () => {
      decoded ??= text();
      return decoded;
    },
  });
  return record;
}

/** @internal The UTF-8 bytes of a record's output text attached by {@link withOutputBytes}, if any. */
export function outputBytes(record: StepRecord): Uint8Array | undefined {
  const attached = outputTexts.get(record);
  return typeof attached === "object" ? attached.bytes : undefined;
}

/**
 * The stored text of a step record's output (shared by the stores): the
 * text attached by {@link withOutputJson}, else the output validated and
 * serialised; `null` when the record has none.
 *
 * @throws {NonJsonValueError} when the output is not JSON
 */
export function outputColumn(record: StepRecord): string | null {
  const text = outputTexts.get(record);
  if (text !== undefined) return typeof text === "string" ? text : text.text();
  if (record.output === undefined) return null;
  return jsonColumn(record.output, `step "${record.name}" output`);
}

/**
 * Converts a thrown value to its stored form.
 *
 * @param error - anything thrown
 * @returns `{ name, message, code? }`
 */
export function recordError(error: unknown): RecordedError {
  if (error instanceof Error) {
    const code = (error as { code?: unknown }).code;
    return { name: error.name, message: error.message, ...(typeof code === "string" ? { code } : {}) };
  }
  return { name: "Error", message: String(error) };
}

/** A lease duration as the stores write it: whole milliseconds (rounded up), at least 1. */
export function leaseMs(ttlMs: number): number {
  return Math.max(1, Math.ceil(ttlMs));
}

/** Statuses {@link Journal.cancelRun} leaves as they are (the run has ended). */
export const ENDED_RUN_STATUSES: ReadonlySet<RunStatus> = new Set<RunStatus>(["completed", "failed", "cancelled"]);

/**
 * The error of {@link Journal.sendSignal} on a run that has ended (shared by the stores).
 *
 * @param runId - the run
 * @param status - its status (`completed`, `failed` or `cancelled`)
 * @param name - the refused signal's name
 * @returns a {@link RunStateError} with `action: "signal"`
 */
export function signalRefused(runId: string, status: string, name: string): RunStateError {
  return new RunStateError(
    runId,
    status,
    "signal",
    `it waits for nothing, so signal ${JSON.stringify(name)} was not recorded (a reset run takes signals again)`,
  );
}

/** Statuses {@link Journal.retryRun} accepts. */
export const RETRYABLE_RUN_STATUSES: ReadonlySet<RunStatus> = new Set<RunStatus>(["failed", "blocked"]);

/**
 * Checks the `toSeq` of {@link Journal.resetRun} (shared by the stores).
 * @throws {InvalidOptionError} when it is not an integer ≥ -1
 */
export function checkResetSeq(runId: string, toSeq: number): void {
  if (!Number.isInteger(toSeq) || toSeq < -1) {
    throw new InvalidOptionError(
      "durable",
      "toSeq",
      `cannot reset run "${runId}" to step ${String(toSeq)}: give the seq of the last step to keep (an integer ≥ -1; -1 drops every step)`,
    );
  }
}

/**
 * The error of {@link Journal.retryRun} on a run that is neither failed nor
 * blocked (shared by the stores).
 *
 * @param lastSeq - seq of the run's last step record, -1 when it has none
 */
export function retryRefused(runId: string, status: string, lastSeq: number): RunStateError {
  const steps = lastSeq >= 0 ? `its last step is #${lastSeq}; ` : "";
  return new RunStateError(
    runId,
    status,
    "retry",
    `only a failed or blocked run can be retried (${steps}reset it to re-run steps)`,
  );
}

/** Serialises an optional JSON value for a TEXT column (validated first). */
export function jsonColumn(value: unknown, path: string): string | null {
  if (value === undefined) return null;
  assertJson(value, path);
  return JSON.stringify(value);
}

/**
 * Checks a step write against the stored state of the run (shared by the stores): `record.seq` must
 * hold a record of the same name that is not completed, or be the next seq (the highest + 1, 0 when the
 * run has none: a pruned run's holes are never filled).
 *
 * @param nextSeq - the run's highest seq + 1 (0 without steps)
 * @throws {StaleFencingTokenError} @throws {JournalIntegrityError}
 */
export function checkStepWrite(
  runId: string,
  token: number,
  currentToken: number,
  nextSeq: number,
  existing: { name: string; status: string } | undefined,
  record: StepRecord,
  create = false,
): void {
  if (token !== currentToken) throw new StaleFencingTokenError(runId, token, currentToken);
  if (create && existing) {
    throw new JournalIntegrityError(
      runId,
      record.seq,
      `step #${record.seq} exists ("${existing.name}", ${existing.status}): a create-only write never replaces a record`,
    );
  }
  if (!Number.isInteger(record.seq) || record.seq < 0 || (!existing && record.seq !== nextSeq)) {
    throw new JournalIntegrityError(
      runId,
      record.seq,
      `cannot write step #${record.seq}: the next one must be #${nextSeq} (the journal's highest seq + 1)`,
    );
  }
  if (existing) {
    if (existing.name !== record.name) {
      throw new JournalIntegrityError(
        runId,
        record.seq,
        `cannot overwrite step "${existing.name}" with a step named "${record.name}"`,
      );
    }
    if (existing.status === "completed") {
      throw new JournalIntegrityError(runId, record.seq, `step "${existing.name}" is already completed`);
    }
  }
}

/**
 * Refuses a missing or wrong `journal` option with a typed error instead of a `TypeError` at its first use.
 *
 * @param component - the function, for the message, e.g. `runDurable`
 * @param journal - the option as given
 * @param usage - how to call it, e.g. `runDurable(runId, fn, { journal, input })`
 * @throws {InvalidOptionError} (option `journal`) when it is not a journal (no `getRun`/`createRun` methods)
 */
export function assertJournalOption(component: string, journal: unknown, usage: string): asserts journal is Journal {
  const j = journal as Partial<Journal> | null | undefined;
  if (j === null || typeof j !== "object" || typeof j.getRun !== "function" || typeof j.createRun !== "function") {
    throw new InvalidOptionError(
      component,
      "journal",
      `${j === undefined ? "is required" : `must be a journal (SqliteJournal, PostgresJournal or RedisJournal), got ${j === null ? "null" : typeof j}`}: ${usage}`,
    );
  }
}
