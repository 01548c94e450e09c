/**
 * Typed errors of the durable-execution layer (journal, steps, signals,
 * leases, workers). Each extends {@link DumplingsError} with a stable `code`.
 *
 * @module
 */
import { DumplingsError } from "../core/errors.js";
import type { JsonObject } from "../core/json.js";

// The lease and replay errors are shared with the workflow runner: one class per concept, in core.
// A side channel that no longer holds what was asked: a FormatError, so it lives with it (exported from the root entry).
export { LeaseHeldError, ReplayMismatchError, RunStreamError, StaleFencingTokenError } from "../core/errors.js";

/** A second signal was sent for a name that already has one: exactly one signal is taken per wait. */
export class SignalConflictError extends DumplingsError {
  readonly runId: string;
  readonly signalName: string;
  constructor(runId: string, signalName: string) {
    super(
      "SIGNAL_CONFLICT",
      `[dumplings:durable] signal "${signalName}" of run "${runId}" was already sent; only the first one is taken`,
    );
    this.runId = runId;
    this.signalName = signalName;
  }
}

/**
 * An approval or rejection of a tool call that was already decided (a second
 * reviewer, or a race between two): the first decision stands and nothing
 * was recorded. Says which decision that was. A {@link SignalConflictError}
 * (code `SIGNAL_CONFLICT`), so code that catches that still does.
 */
export class ApprovalConflictError extends SignalConflictError {
  /** The tool call's id. */
  readonly toolCallId: string;
  /**
   * The decision taken first (`{ approved, note?, args? }`; `reason`, deprecated, holds the same text as
   * `note`), when it could be read.
   */
  readonly decision: { approved: boolean; note?: string; args?: JsonObject; reason?: string } | undefined;
  /** When the first decision was recorded (epoch ms, store clock), when it could be read. */
  readonly decidedAt: number | undefined;
  constructor(
    runId: string,
    signalName: string,
    toolCallId: string,
    decision: { approved: boolean; note?: string; args?: JsonObject; reason?: string } | undefined,
    decidedAt: number | undefined,
  ) {
    super(runId, signalName);
    const note = decision?.note ?? decision?.reason;
    const what =
      decision === undefined
        ? "already decided"
        : `already ${decision.approved ? "approved" : "rejected"}${decision.args ? ` with corrected arguments ${JSON.stringify(decision.args)}` : ""}${note ? ` (${JSON.stringify(note)})` : ""}${decidedAt === undefined ? "" : ` at ${new Date(decidedAt).toISOString()}`}`;
    this.message = `[dumplings:durable] tool call "${toolCallId}" of run "${runId}" was ${what}; only the first decision is taken, and nothing was recorded`;
    this.toolCallId = toolCallId;
    this.decision = decision;
    this.decidedAt = decidedAt;
  }
}

/**
 * Thrown inside a workflow to unwind it when it must wait (signal or timer);
 * {@link runDurable} catches it and checkpoints the run as `waiting`. Do not
 * swallow it in workflow code (rethrow it from `catch` blocks).
 */
export class RunWaitingError extends DumplingsError {
  readonly runId: string;
  /** What the run waits for. */
  readonly waitingFor: { kind: "signal"; name: string } | { kind: "timer"; name: string; wakeAt: number };
  constructor(runId: string, waitingFor: RunWaitingError["waitingFor"]) {
    super(
      "RUN_WAITING",
      waitingFor.kind === "signal"
        ? `[dumplings:durable] run "${runId}" waits for signal "${waitingFor.name}"`
        : `[dumplings:durable] run "${runId}" sleeps (timer "${waitingFor.name}") until ${new Date(waitingFor.wakeAt).toISOString()}`,
    );
    this.runId = runId;
    this.waitingFor = waitingFor;
  }
}

/** A step's body failed on every attempt (or failed before, and replay reproduces the failure). */
export class StepFailedError extends DumplingsError {
  readonly runId: string;
  readonly seq: number;
  readonly stepName: string;
  readonly attempts: number;
  /** The recorded error (`{ name, message, code? }`). */
  readonly recordedError: { name: string; message: string; code?: string };
  constructor(
    runId: string,
    seq: number,
    stepName: string,
    attempts: number,
    recordedError: { name: string; message: string; code?: string },
    cause?: unknown,
  ) {
    super(
      "STEP_FAILED",
      `[dumplings:durable] step "${stepName}" (#${seq}) of run "${runId}" failed after ${attempts} attempt(s): ${recordedError.name}: ${recordedError.message}`,
      { cause },
    );
    this.runId = runId;
    this.seq = seq;
    this.stepName = stepName;
    this.attempts = attempts;
    this.recordedError = recordedError;
  }
}

/** `step`, `sleep` or `waitForSignal` was called outside {@link runDurable}. */
export class NoRunContextError extends DumplingsError {
  constructor(what: string) {
    super(
      "NO_RUN_CONTEXT",
      `[dumplings:durable] ${what} was called outside a durable run (wrap the code in runDurable)`,
    );
  }
}

/** No run with this id exists in the journal. */
export class RunNotFoundError extends DumplingsError {
  readonly runId: string;
  /**
   * @param runId - the id looked up
   * @param hint - what to do about it, appended to the message (e.g. "pass `input` to start it")
   */
  constructor(runId: string, hint?: string) {
    super("RUN_NOT_FOUND", `[dumplings:durable] no run "${runId}" in the journal${hint ? `; ${hint}` : ""}`);
    this.runId = runId;
  }
}

/**
 * A run id was reused with another input: the run exists and was created with
 * an input whose hash differs from the one offered. Nothing was run or changed;
 * the stored result is never returned as the answer to a different request.
 * Pass `attach: true` to `runDurable` to resume the existing run with its
 * stored input on purpose.
 *
 * @example
 * try { await runDurable("order-38", wf, { journal, input: { amount: 500 } }); }
 * catch (e) { if (e instanceof RunInputMismatchError) console.log(e.storedHash, e.offeredHash); }
 */
export class RunInputMismatchError extends DumplingsError {
  readonly runId: string;
  /** sha256 (hex) of the canonical JSON of the input the run was created with. */
  readonly storedHash: string;
  /** sha256 (hex) of the canonical JSON of the input offered now. */
  readonly offeredHash: string;
  constructor(runId: string, storedHash: string, offeredHash: string) {
    super(
      "RUN_INPUT_MISMATCH",
      `[dumplings:durable] run "${runId}" exists with another input (stored input hash ${storedHash.slice(0, 12)}…, offered ${offeredHash.slice(0, 12)}…); use another run id, or pass attach: true to resume the existing run with its stored input`,
    );
    this.runId = runId;
    this.storedHash = storedHash;
    this.offeredHash = offeredHash;
  }
}

/**
 * The run was cancelled by an operator (`cancel()`, `dumplings runs cancel`):
 * the reason of the step signal's abort, and what a step started after the
 * cancellation throws. `runDurable` returns `{ status: "cancelled" }` instead
 * of throwing it.
 */
export class RunCancelledError extends DumplingsError {
  readonly runId: string;
  /** Who cancelled it, when recorded. */
  readonly by: string | undefined;
  /** Why, when given. */
  readonly reason: string | undefined;
  constructor(runId: string, by?: string, reason?: string) {
    super(
      "RUN_CANCELLED",
      `[dumplings:durable] run "${runId}" was cancelled${by ? ` by ${by}` : ""}${reason ? `: ${reason}` : ""}; it takes no more steps`,
    );
    this.runId = runId;
    this.by = by;
    this.reason = reason;
  }
}

/**
 * Thrown by user code in a step body for an error that no retry can fix (a
 * declined card, a refused request): the step fails at once, whatever its
 * `retry.maxAttempts`.
 *
 * @example
 * await step("charge", async () => {
 *   const res = await payments.charge(order);
 *   if (res.declined) throw new NonRetryableError(`card declined: ${res.reason}`);
 *   return res.id;
 * }, { retry: { maxAttempts: 5 } });
 */
export class NonRetryableError extends DumplingsError {
  /**
   * @param message - what failed
   * @param options - `cause`: the underlying error
   */
  constructor(message: string, options?: { cause?: unknown }) {
    super("NON_RETRYABLE", message, options);
  }
}

/**
 * A step's retry budget was spent by attempts that never finished: on resume,
 * its journal record shows that `attempts` attempts were started (the budget,
 * `retry.maxStartedAttempts`, default `max(maxAttempts, 3)`) and the last one
 * was interrupted (its process died — OOM, SIGKILL, a deploy — or lost its
 * lease during it). The body is not run again; this is the step's recorded
 * error, and the run fails with it.
 */
export class RetryBudgetExhaustedError extends DumplingsError {
  readonly runId: string;
  readonly seq: number;
  readonly stepName: string;
  /** Attempts started (from the journal). */
  readonly attempts: number;
  /** The budget: the step's `retry.maxStartedAttempts` (default `max(maxAttempts, 3)`). */
  readonly budget: number;
  /** How many of those attempts were interrupted (their process died or lost the lease) rather than throwing. */
  readonly interrupted: number;
  constructor(
    runId: string,
    seq: number,
    stepName: string,
    attempts: number,
    budget: number,
    interrupted: number,
    lastError?: { name: string; message: string },
  ) {
    super(
      "RETRY_BUDGET_EXHAUSTED",
      `[dumplings:durable] step "${stepName}" (#${seq}) of run "${runId}": retry budget spent, ${attempts} attempt(s) started of ${budget} allowed (retry.maxStartedAttempts), ${interrupted} of them interrupted by a crash (the process died or lost its lease before the attempt finished); not running it again${lastError ? `; last error: ${lastError.name}: ${lastError.message}` : ""}`,
    );
    this.runId = runId;
    this.seq = seq;
    this.stepName = stepName;
    this.attempts = attempts;
    this.budget = budget;
    this.interrupted = interrupted;
  }
}

/**
 * A journal write broke the journal's invariants (a gap in sequence numbers, or a rewrite of a completed
 * step), or the journal lost part of a run (Redis evicted its keys: `createRun` of a run the journal
 * knew, a lease on a run whose step records vanished). Nothing was written, and no step ran again.
 */
export class JournalIntegrityError extends DumplingsError {
  readonly runId: string;
  /** The step at fault; -1 when the fault is the whole run's (its keys vanished). */
  readonly seq: number;
  constructor(runId: string, seq: number, message: string) {
    super("JOURNAL_INTEGRITY", `[dumplings:durable] run "${runId}"${seq < 0 ? "" : ` step #${seq}`}: ${message}`);
    this.runId = runId;
    this.seq = seq;
  }
}

/**
 * An operator action the run's status does not allow, e.g. `retryRun` on a
 * `completed` or `running` run (only `failed` and `blocked` runs are retried).
 * Code `RUN_STATE`; the journal is unchanged.
 */
export class RunStateError extends DumplingsError {
  readonly runId: string;
  /** The run's status when the action was refused. */
  readonly status: string;
  /** The refused action, e.g. `retry`. */
  readonly action: string;
  constructor(runId: string, status: string, action: string, message: string) {
    super("RUN_STATE", `[dumplings:durable] run "${runId}" is ${status}: ${message}`);
    this.runId = runId;
    this.status = status;
    this.action = action;
  }
}

/** A run's workflow name has no registered function on this worker. */
export class UnknownWorkflowError extends DumplingsError {
  readonly workflow: string;
  constructor(workflow: string, known: readonly string[]) {
    super(
      "UNKNOWN_WORKFLOW",
      `[dumplings:durable] no workflow named "${workflow}" is registered on this worker; known: ${known.join(", ") || "(none)"}`,
    );
    this.workflow = workflow;
  }
}

/**
 * `approve`/`reject` (the library functions, `dumplings approve|reject` and the web inspector) of a tool call
 * the run does not wait on: a mistyped or stale id, a run that waits for something else or is busy, or a
 * finished run. A decision recorded there would never be taken, so nothing was recorded. Code
 * `APPROVAL_NOT_PENDING` (the CLI exits 2). To record a decision ahead of time on purpose, send the signal
 * yourself: `signal(runId, approvalSignalName(toolCallId), { approved: true }, { journal })`.
 */
export class ApprovalNotPendingError extends DumplingsError {
  readonly runId: string;
  /** The tool call id that was decided. */
  readonly toolCallId: string;
  /** The run's status when the decision was refused. */
  readonly status: string;
  /** The tool call ids the run does wait on (empty when it waits on no approval). */
  readonly waitingOn: readonly string[];
  /**
   * @param runId - the run
   * @param toolCallId - the refused tool call id
   * @param status - the run's status
   * @param waitingOn - the calls it waits on
   * @param message - the whole message (built by `assertAwaitsApproval`)
   */
  constructor(runId: string, toolCallId: string, status: string, waitingOn: readonly string[], message: string) {
    super("APPROVAL_NOT_PENDING", message);
    this.runId = runId;
    this.toolCallId = toolCallId;
    this.status = status;
    this.waitingOn = waitingOn;
  }
}
