/**
 * Typed errors of the durable-execution layer (journal, steps, signals,
 * leases, workers). Each extends {@link DumplingsError} with a stable `code`.
 *
 * @module
 */
import { DumplingsError } from "../core/errors.js";

/**
 * Replay diverged from the journal: at position `seq` the program asks for a
 * different step (name or input hash) than the one recorded. The program was
 * changed incompatibly while runs were in flight; the stored journal is untouched.
 */
export class ReplayMismatchError extends DumplingsError {
  readonly runId: string;
  /** 0-based position of the step in the run. */
  readonly seq: number;
  /** What the journal holds at `seq`. */
  readonly recorded: { name: string; inputHash: string };
  /** What the program asked for at `seq`. */
  readonly requested: { name: string; inputHash: string };
  constructor(
    runId: string,
    seq: number,
    recorded: { name: string; inputHash: string },
    requested: { name: string; inputHash: string },
  ) {
    const what =
      recorded.name !== requested.name
        ? `the journal holds step "${recorded.name}" but the program asked for step "${requested.name}"`
        : `step "${requested.name}" was recorded with input hash ${recorded.inputHash.slice(0, 12)}… but is now called with input hash ${requested.inputHash.slice(0, 12)}…`;
    super("REPLAY_MISMATCH", `[dumplings:durable] replay of run "${runId}" diverged at step #${seq}: ${what}`);
    this.runId = runId;
    this.seq = seq;
    this.recorded = recorded;
    this.requested = requested;
  }
}

/** A journal write carried a fencing token older than the run's current one: another worker took the run over. Nothing was written. */
export class StaleFencingTokenError extends DumplingsError {
  readonly runId: string;
  readonly token: number;
  readonly currentToken: number;
  constructor(runId: string, token: number, currentToken: number) {
    super(
      "STALE_FENCING_TOKEN",
      `[dumplings:durable] write to run "${runId}" refused: fencing token ${token} is stale (current token is ${currentToken}); another worker holds the run`,
    );
    this.runId = runId;
    this.token = token;
    this.currentToken = currentToken;
  }
}

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

/** The run is leased by another live owner (the caller did not wait, or waited too long). */
export class LeaseHeldError extends DumplingsError {
  readonly runId: string;
  readonly owner: string;
  /** Epoch ms at which the current lease expires. */
  readonly expiresAt: number;
  constructor(runId: string, owner: string, expiresAt: number) {
    super(
      "LEASE_HELD",
      `[dumplings:durable] run "${runId}" is held by "${owner}" until ${new Date(expiresAt).toISOString()}`,
    );
    this.runId = runId;
    this.owner = owner;
    this.expiresAt = expiresAt;
  }
}

/** No run with this id exists in the journal. */
export class RunNotFoundError extends DumplingsError {
  readonly runId: string;
  constructor(runId: string) {
    super("RUN_NOT_FOUND", `[dumplings:durable] no run "${runId}" in the journal`);
    this.runId = runId;
  }
}

/** A journal write broke the journal's invariants (a gap in sequence numbers, or a rewrite of a completed step). Nothing was written. */
export class JournalIntegrityError extends DumplingsError {
  readonly runId: string;
  readonly seq: number;
  constructor(runId: string, seq: number, message: string) {
    super("JOURNAL_INTEGRITY", `[dumplings:durable] run "${runId}" step #${seq}: ${message}`);
    this.runId = runId;
    this.seq = seq;
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
