/**
 * Starting and replaying a durable run: {@link runDurable} takes the run's
 * lease (a new fencing token), replays the workflow function against the
 * journal, keeps the lease alive while it runs, and records the outcome:
 * `completed` with the JSON output, `waiting` for a signal or timer (the
 * process may exit), `failed` with the error, or `blocked` when the program
 * diverged from the journal (a deploy changed the steps under the run). An
 * operator's {@link cancel} stops it.
 *
 * @module
 */
import { hostname, userInfo } from "node:os";
import { DumplingsError, InvalidOptionError } from "../core/errors.js";
import { assertJson, type JsonValue } from "../core/json.js";
import { checkOptions, optionKeys } from "../core/options.js";
import { defaultOwner, leaseMs } from "../core/owner.js";
import { cancellationOf } from "./cancellation.js";
import { type RunContext, withRunContext } from "./context.js";
import {
  JournalIntegrityError,
  LeaseHeldError,
  ReplayMismatchError,
  RunCancelledError,
  RunInputMismatchError,
  RunNotFoundError,
  RunWaitingError,
  StaleFencingTokenError,
} from "./errors.js";
import {
  assertJournalOption,
  ENDED_RUN_STATUSES,
  hashInput,
  type Journal,
  type RecordedError,
  type RunRecord,
  recordError,
} from "./journal.js";
import { RunLease } from "./lease.js";
import type { RunEventStream } from "./stream-contract.js";

const CANCEL_OPTIONS = optionKeys<CancelOptions>({ journal: true, by: true, reason: true });
const CANCEL_POSITIONAL_OPTIONS = optionKeys<Omit<CancelOptions, "journal">>({ by: true, reason: true });
/** The keys of {@link RunDurableOptions}: any other is an `InvalidOptionError`. */
const RUN_OPTIONS = optionKeys<RunDurableOptions<unknown>>({
  journal: true,
  input: true,
  attach: true,
  workflow: true,
  owner: true,
  leaseTtlMs: true,
  cancelCheckMs: true,
  leaseWaitMs: true,
  stream: true,
  inlineSleepMaxMs: true,
});

/**
 * A workflow function: ordinary async code calling durable primitives.
 * `I` is the run's input type: any type whose values are JSON at run time
 * (e.g. `{ messages: ModelMessage[] }`); the input is checked when the run is
 * created ({@link NonJsonValueError} names the first non-JSON path).
 */
export type WorkflowFn<I = JsonValue, O = JsonValue> = (input: I) => Promise<O>;

/**
 * A workflow function of any input type, as {@link DurableWorker} registers
 * them by name (the input arrives from the journal).
 */
export type AnyWorkflowFn = (input: never) => Promise<unknown>;

/** Options of {@link runDurable}; `I` is the workflow's input type. */
export interface RunDurableOptions<I = JsonValue> {
  /** The journal (source of truth). */
  journal: Journal;
  /**
   * Input of the run. A run that does not exist is created with it; a run that
   * exists must have been created with the same input (compared by
   * {@link hashInput}), else {@link RunInputMismatchError} — unless `attach`.
   * Omitted: the run must exist ({@link RunNotFoundError} otherwise, and
   * nothing is created) and resumes with its stored input.
   */
  input?: I;
  /**
   * Resume an existing run with its stored input even when `input` differs
   * (the offered input is ignored). @default false
   */
  attach?: boolean;
  /** Workflow name stored with a new run. @default the function's name, or "workflow" */
  workflow?: string;
  /**
   * Lease owner id, shown as the holder (`leaseOwner`, {@link LeaseHeldError}). The lease belongs to
   * this call's execution, not to the id: another call under the same id (another worker slot, a
   * restarted process) waits for it like any other taker (or gets `LeaseHeldError`), so a step never
   * runs twice at once. @default `<hostname>:<pid>:<random>`
   */
  owner?: string;
  /**
   * Lease duration (ms); renewed every third of it while the run executes. A
   * refused renewal (a cancellation, a takeover) aborts the running step. @default 30000
   */
  leaseTtlMs?: number;
  /**
   * How often (ms) the executor reads the run's status while a step runs, so an
   * operator's `cancel` (from any process) aborts the running step's
   * `currentStep().signal` within about this long: one small read per interval
   * per running run. `0` (or a value ≥ `leaseTtlMs / 3`): only the lease
   * renewals notice it, within a third of the lease. @default 1000
   */
  cancelCheckMs?: number;
  /**
   * When another live execution holds the lease (under any owner id, this one's included): wait up
   * to this many ms for it to be released or to expire (`0`: throw {@link LeaseHeldError} at once).
   * @default 2 × leaseTtlMs
   */
  leaseWaitMs?: number;
  /** Side channel for tokens and progress events. */
  stream?: RunEventStream;
  /** Durable timers with at most this much time left (ms) are slept in-process. @default 1000 */
  inlineSleepMaxMs?: number;
}

/** Outcome of {@link runDurable}. */
export type RunResult =
  | { runId: string; status: "completed"; output: JsonValue }
  | { runId: string; status: "failed"; error: RecordedError }
  | {
      runId: string;
      status: "waiting";
      waitingFor: { kind: "signal"; name: string } | { kind: "timer"; name: string; wakeAt: number };
    }
  /**
   * The program diverged from the journal (`error`: the {@link ReplayMismatchError}); the run is
   * recorded `blocked`. Resume it with the program it was recorded with, or after a fix (a
   * `patched()` guard), or after an operator's `retryRun`/`resetRun`.
   */
  | { runId: string; status: "blocked"; error: RecordedError }
  /** An operator cancelled the run: nothing ran. */
  | { runId: string; status: "cancelled" };

/** Whether `fn` is a class (which cannot be called without `new`: a run of it would fail for good). */
function isClass(fn: unknown): boolean {
  return /^class[\s{]/.test(Function.prototype.toString.call(fn));
}

/** A default lease-owner id for this process (see `core/owner.ts`). */
export { defaultOwner };

function finished(run: RunRecord): RunResult | undefined {
  if (run.status === "completed") return { runId: run.runId, status: "completed", output: run.output ?? null };
  if (run.status === "failed") {
    return { runId: run.runId, status: "failed", error: run.error ?? { name: "Error", message: "failed" } };
  }
  if (run.status === "cancelled") return { runId: run.runId, status: "cancelled" };
  return undefined;
}

/**
 * Finds or creates the run `runId`, enforcing run identity: a run id names
 * one request. With `input`, a missing run is created and an existing one must
 * have been created with the same input (its {@link hashInput}), unless
 * `attach`. Without `input`, the run must exist.
 *
 * @param journal - the journal
 * @param init - `runId`, `workflow` (stored with a new run), `input` (JSON, optional), `attach` (default false)
 * @returns `created: true` with the new run, or `created: false` with the stored one
 * @throws {RunNotFoundError} when `input` is omitted and the run does not exist (nothing is created)
 * @throws {RunInputMismatchError} when the run exists with another input and `attach` is not set
 * @throws {NonJsonValueError} when `input` is not JSON
 * @example
 * const { created } = await ensureRun(journal, { runId: "order-38", workflow: "charge", input: { amount: 5 } });
 */
export async function ensureRun(
  journal: Journal,
  init: { runId: string; workflow: string; input?: unknown; attach?: boolean },
): Promise<{ created: boolean; run: RunRecord }> {
  const { runId, input } = init;
  if (input === undefined) {
    const run = await journal.getRun(runId);
    if (!run) throw new RunNotFoundError(runId, "pass `input` to start a new run");
    return { created: false, run };
  }
  assertJson(input, "run input");
  const { created, run } = await journal.createRun({ runId, workflow: init.workflow, input });
  if (!created && !init.attach) {
    const storedHash = hashInput(run.input, "stored run input");
    const offeredHash = hashInput(input, "run input");
    if (storedHash !== offeredHash) throw new RunInputMismatchError(runId, storedHash, offeredHash);
  }
  return { created, run };
}

/** Whether `error` is `reason` or wraps it (its `cause` chain, a few levels deep). */
function causedBy(error: unknown, reason: unknown): boolean {
  let e = error;
  for (let depth = 0; depth < 8 && e !== undefined && e !== null; depth++) {
    if (e === reason) return true;
    e = (e as { cause?: unknown }).cause;
  }
  return false;
}

/** Rejects with `signal`'s reason once it is aborted (never settles otherwise). */
function rejectOnAbort(signal: AbortSignal): Promise<never> {
  return new Promise((_, reject) => {
    if (signal.aborted) reject(signal.reason);
    else signal.addEventListener("abort", () => reject(signal.reason), { once: true });
  });
}

/** Who is acting, for operator records: `<user>@<host>`. */
function defaultActor(): string {
  try {
    return `${userInfo().username}@${hostname()}`;
  } catch {
    return `pid ${process.pid}@${hostname()}`;
  }
}

/** Options of {@link cancel}. */
export interface CancelOptions {
  /** The run's journal (in the `cancel(runId, { journal })` form, as `approve`/`signal` take it). */
  journal?: Journal;
  /** Who cancels. @default `<user>@<host>` */
  by?: string;
  /** Why (free text, recorded in the journal). */
  reason?: string;
}

/**
 * Operator: cancels the run. It ends `cancelled` and takes no more steps; a
 * run waiting for a signal or a timer is released; the executor running it
 * loses its lease at its next renewal (within a third of its lease TTL), its
 * steps' `currentStep().signal` is aborted with a {@link RunCancelledError},
 * and its `runDurable` returns `{ status: "cancelled" }`. Recorded in the
 * journal as a `run_cancelled` event with `by` and the reason. A run that has
 * already ended (completed, failed, cancelled) is left as it is.
 *
 * Two forms: `cancel(runId, { journal, by?, reason? })`, as `approve` and
 * `signal` take their arguments, and `cancel(journal, runId, { by?, reason? })`.
 *
 * @returns the run as it is after the call
 * @throws {RunNotFoundError} when the run does not exist
 * @throws {InvalidOptionError} for an unknown option, or when no journal is given
 * @example
 * await cancel("chat-1", { journal, by: "alice", reason: "customer withdrew the request" });
 */
export function cancel(runId: string, options: CancelOptions & { journal: Journal }): Promise<RunRecord>;
export function cancel(journal: Journal, runId: string, options?: Omit<CancelOptions, "journal">): Promise<RunRecord>;
export function cancel(
  first: Journal | string,
  second: string | CancelOptions,
  third: Omit<CancelOptions, "journal"> = {},
): Promise<RunRecord> {
  if (typeof first === "string") {
    const options = (second ?? {}) as CancelOptions;
    checkOptions("cancel", options, CANCEL_OPTIONS);
    const journal = options.journal;
    if (journal === undefined || typeof journal.cancelRun !== "function") {
      throw new InvalidOptionError("cancel", "journal", "is required: cancel(runId, { journal })");
    }
    return journal.cancelRun(first, options.by ?? defaultActor(), options.reason);
  }
  checkOptions("cancel", third, CANCEL_POSITIONAL_OPTIONS);
  if (typeof first?.cancelRun !== "function" || typeof second !== "string") {
    throw new InvalidOptionError("cancel", "journal", "expected cancel(runId, { journal }) or cancel(journal, runId)");
  }
  return first.cancelRun(second, third.by ?? defaultActor(), third.reason);
}

/** An error that means "this executor must stop": the run was cancelled or taken over. */
const isStop = (error: unknown) => error instanceof StaleFencingTokenError || error instanceof RunCancelledError;

/**
 * Runs (first time) or resumes (replays) the durable run `runId`.
 *
 * Steps already in the journal return their recorded output without running;
 * execution continues from the first unrecorded step. A finished run returns
 * its recorded outcome without calling `workflowFn`; a cancelled one returns
 * `{ status: "cancelled" }`. Replay matches recorded steps by position and
 * name: a changed step input is used as drift (recorded result, `step_drift`
 * event); another step name at a recorded position blocks the run (recorded
 * `blocked` with the {@link ReplayMismatchError}, returned as
 * `{ status: "blocked", error }`). A blocked run is tried again by the next
 * `runDurable` (with the fixed program it continues), or after an operator's
 * `retryRun`/`resetRun`.
 *
 * @param runId - run id (any non-empty string; use a stable id to make starting idempotent)
 * @param workflowFn - the workflow; called with the run's JSON input
 * @param options - `journal` (required), `input` (omitted: the run must exist), `attach`, `workflow` name,
 *   `owner`, `leaseTtlMs` (30000), `leaseWaitMs` (2 × ttl), `stream`, `inlineSleepMaxMs` (1000)
 * @returns `{ status: "completed", output }`, `{ status: "waiting", waitingFor }`, `{ status: "failed", error }`,
 *   `{ status: "blocked", error }` or `{ status: "cancelled" }`
 * @throws {RunNotFoundError} when `input` is omitted and no run `runId` exists (nothing is created)
 * @throws {RunInputMismatchError} when the run exists with another input (and `attach` is not set)
 * @throws {StaleFencingTokenError} when another executor took the run over while this one ran
 * @throws {LeaseHeldError} when another execution (of any owner, this one's included) holds the run longer
 *   than `leaseWaitMs`
 * @throws {NonJsonValueError} when a new run's input is not JSON
 * @throws {InvalidOptionError} for an unknown option, when `options` or its `journal` is missing, when
 *   `workflowFn` is not a function or is a class (nothing is created), or for a `leaseTtlMs` outside
 *   100…2^31−1 ms (`leaseWaitMs` 0…2^31−1)
 * @example
 * const result = await runDurable("order-42", async (input) => {
 *   const quote = await step("quote", () => pricing.quote(input), { input });
 *   await waitForSignal("approval");
 *   return step("charge", () => payments.charge(quote), { input: quote });
 * }, { journal: new SqliteJournal({ path: "runs.db" }), input: { sku: "x" } });
 * // later, in any process: resume it (its stored input is used)
 * await runDurable("order-42", workflow, { journal });
 */
export function runDurable<I = JsonValue, O = JsonValue>(
  runId: string,
  workflowFn: WorkflowFn<I, O>,
  options: RunDurableOptions<NoInfer<I>>,
): Promise<RunResult> {
  return executeRun(runId, workflowFn, options, undefined);
}

/**
 * How a shutting-down executor (a closing `DurableWorker`) stops a run: `drain` lets the step in
 * progress finish and record, then no durable call starts (it throws `drain.reason`); `abort` stops at
 * once (the step's signal is aborted, its late result is refused, and the call throws `abort.reason`
 * without waiting for a body that ignores the signal). Either way the lease is released and the run
 * stays resumable: a step started and not finished is run again by the next executor, within its
 * retry budget (see `step`).
 */
export interface ExecutorStop {
  drain: AbortSignal;
  abort: AbortSignal;
}

/** {@link runDurable}, stoppable by its caller (see {@link ExecutorStop}). */
export async function executeRun<I = JsonValue, O = JsonValue>(
  runId: string,
  workflowFn: WorkflowFn<I, O>,
  options: RunDurableOptions<NoInfer<I>>,
  stop: ExecutorStop | undefined,
): Promise<RunResult> {
  if (options === null || typeof options !== "object") {
    throw new InvalidOptionError(
      "runDurable",
      "journal",
      "is required: runDurable(runId, fn, { journal, input }) (input for a new run; omit it to resume one)",
    );
  }
  checkOptions("runDurable", options, RUN_OPTIONS);
  assertJournalOption(
    "runDurable",
    options.journal,
    "runDurable(runId, fn, { journal, input }) with a SqliteJournal, PostgresJournal or RedisJournal",
  );
  if (typeof runId !== "string" || runId.length === 0 || runId.length > 512) {
    throw new DumplingsError("INVALID_RUN_ID", `invalid run id ${JSON.stringify(runId)}`);
  }
  if (typeof workflowFn !== "function" || isClass(workflowFn)) {
    // before the run is created: a run created with no program would be recorded as failed for good
    throw new InvalidOptionError(
      "runDurable",
      "workflowFn",
      `must be the workflow function (runDurable(runId, async (input) => …, { journal })), got ${workflowFn === null ? "null" : typeof workflowFn === "function" ? "a class" : typeof workflowFn}`,
    );
  }
  const { journal } = options;
  const ttl = leaseMs("runDurable", "leaseTtlMs", options.leaseTtlMs, 30_000);
  const owner = options.owner ?? defaultOwner();
  const waitBudget = leaseMs("runDurable", "leaseWaitMs", options.leaseWaitMs, 2 * ttl, 0);
  const { run } = await ensureRun(journal, {
    runId,
    workflow: options.workflow ?? (workflowFn.name || "workflow"),
    ...(options.input !== undefined ? { input: options.input } : {}),
    ...(options.attach ? { attach: true } : {}),
  });
  const done = finished(run);
  if (done) return done;

  // take the lease (waiting for a live holder to release it or to expire); renewed while the run executes
  let ended: RunResult | undefined;
  const lease = await RunLease.take(journal, runId, {
    owner,
    ttlMs: ttl,
    waitMs: waitBudget,
    cancelCheckMs: options.cancelCheckMs ?? 1000,
    stopWaiting: async () => {
      const now = await journal.getRun(runId);
      ended = now && finished(now);
      return ended !== undefined;
    },
  });
  if (!lease) return ended as RunResult;
  const token = lease.fencingToken;
  const leased = lease.status;
  const abort = { signal: stop ? AbortSignal.any([lease.signal, stop.abort]) : lease.signal };
  try {
    // The steps are read while the run's row is checked and marked running (they are read under this
    // executor's lease: no other executor writes them now, and an operator's change fences this one off).
    const steps = journal.readSteps(runId);
    steps.catch(() => undefined); // awaited below, unless the run turns out to have ended
    // The run may have ended before the lease was taken: the lease says how it stood (a journal that does
    // not tell, or an ended run, is read).
    const current = leased !== undefined && !ENDED_RUN_STATUSES.has(leased) ? undefined : await journal.getRun(runId);
    const over = current && finished(current);
    if (over) return over;
    await journal.updateRun(token, runId, { status: "running" });
    const stored = current?.input ?? run.input;
    const ctx: RunContext = {
      runId,
      journal,
      fencingToken: token,
      records: await steps,
      nextSeq: 0,
      stream: options.stream,
      inlineSleepMaxMs: options.inlineSleepMaxMs ?? 1000,
      abortSignal: abort.signal,
      ...(stop ? { drainSignal: stop.drain } : {}),
      writeChain: Promise.resolve(),
    };
    let output: O;
    try {
      const running = withRunContext(ctx, () => workflowFn(stored as I));
      if (stop) running.catch(() => undefined); // a body left behind by an abort ends unobserved
      // A stopped executor does not wait for a body that ignores its signal (the body's result is refused).
      output = stop ? await Promise.race([running, rejectOnAbort(stop.abort)]) : await running;
    } catch (error) {
      if (error instanceof RunWaitingError) return { runId, status: "waiting", waitingFor: error.waitingFor };
      // the drain stopped the workflow (the error, or what it wraps): not the workflow's failure
      if (stop?.drain.aborted && causedBy(error, stop.drain.reason)) throw stop.drain.reason;
      if (isStop(error) || abort.signal.aborted) throw abort.signal.aborted ? abort.signal.reason : error;
      if (error instanceof ReplayMismatchError) {
        // a structural divergence: the run cannot continue as the program stands, and says why
        const reason = recordError(error);
        await journal.updateRun(token, runId, { status: "blocked", error: reason });
        await options.stream?.append(runId, { type: "run-end", status: "blocked" });
        return { runId, status: "blocked", error: reason };
      }
      if (
        error instanceof JournalIntegrityError ||
        (error instanceof DumplingsError && error.code === "BACKEND_ERROR")
      ) {
        throw error; // not the workflow's failure: leave the run resumable
      }
      const recorded = recordError(error);
      await journal.updateRun(token, runId, { status: "failed", error: recorded });
      await options.stream?.append(runId, { type: "run-end", status: "failed" });
      return { runId, status: "failed", error: recorded };
    }
    const value = output === undefined ? null : output;
    assertJson(value, "workflow output");
    await ctx.writeChain;
    await journal.updateRun(token, runId, { status: "completed", output: value });
    await options.stream?.append(runId, { type: "run-end", status: "completed" });
    return { runId, status: "completed", output: JSON.parse(JSON.stringify(value)) as JsonValue };
  } catch (error) {
    // a refused write: when an operator cancelled the run, that is the outcome
    if (isStop(error) && (await cancellationOf(journal, runId))) {
      await options.stream?.append(runId, { type: "run-end", status: "cancelled" }).catch(() => undefined);
      return { runId, status: "cancelled" };
    }
    throw error;
  } finally {
    await lease.release();
  }
}
