/**
 * Typed errors of the workflow layer (checkpoints, runner, idempotency).
 *
 * Every class extends {@link DumplingsError} and carries a stable `code`; the
 * lost race of two resumes is a {@link ConflictError} (code `CONFLICT`) so a
 * caller handles it like any other compare-and-set loss.
 *
 * @module
 */
import {
  ConflictError,
  DumplingsError,
  LeaseHeldError,
  ReplayMismatchError,
  StaleFencingTokenError,
} from "../core/errors.js";

// Thrown by the checkpoint stores too (`durable/checkpoints/`): defined in core beside their kin.
export { BlobError, WorkflowConflictError, WorkflowStateError } from "../durable/checkpoints/errors.js";
// One class per concept, shared with durable runs (issue 22): the canonical names, beside the deprecated aliases below.
export { LeaseHeldError, ReplayMismatchError, StaleFencingTokenError };

/** A snapshot's schema version has no registered migration path to the current version. */
export class WorkflowMigrationError extends DumplingsError {
  readonly workflowId: string;
  readonly stepIndex: number;
  /** Version recorded in the snapshot. */
  readonly fromVersion: number;
  /** Version the store expects. */
  readonly toVersion: number;
  constructor(workflowId: string, stepIndex: number, fromVersion: number, toVersion: number, reason: string) {
    super(
      "WORKFLOW_MIGRATION",
      `[dumplings:workflow] workflow ${JSON.stringify(workflowId)} step ${stepIndex}: cannot upgrade snapshot from schema version ${fromVersion} to ${toVersion}: ${reason}`,
    );
    this.workflowId = workflowId;
    this.stepIndex = stepIndex;
    this.fromVersion = fromVersion;
    this.toVersion = toVersion;
  }
}

/** No checkpoint is stored for the workflow (or for the requested step). */
export class WorkflowNotFoundError extends DumplingsError {
  readonly workflowId: string;
  readonly stepIndex: number | undefined;
  constructor(workflowId: string, stepIndex?: number) {
    super(
      "WORKFLOW_NOT_FOUND",
      `[dumplings:workflow] no checkpoint for workflow ${JSON.stringify(workflowId)}${stepIndex === undefined ? "" : ` at step ${stepIndex}`}`,
    );
    this.workflowId = workflowId;
    this.stepIndex = stepIndex;
  }
}

/** A node returned (or a state names) a node that the runner does not know. */
export class UnknownNodeError extends DumplingsError {
  readonly workflowId: string;
  readonly stepIndex: number;
  /** The unknown node name. */
  readonly node: string;
  /** Names the runner knows. */
  readonly known: readonly string[];
  constructor(workflowId: string, stepIndex: number, node: string, known: readonly string[]) {
    super(
      "WORKFLOW_UNKNOWN_NODE",
      `[dumplings:workflow] workflow ${JSON.stringify(workflowId)} step ${stepIndex}: unknown node ${JSON.stringify(node)}; known nodes: ${known.join(", ")}`,
    );
    this.workflowId = workflowId;
    this.stepIndex = stepIndex;
    this.node = node;
    this.known = known;
  }
}

/**
 * A node threw. The last good checkpoint is left in place; the error is
 * recorded with the step (see `CheckpointStore.errors`). `cause` is the node's error.
 */
export class NodeFailedError extends DumplingsError {
  readonly workflowId: string;
  /** Step index of the checkpoint the node started from. */
  readonly stepIndex: number;
  readonly node: string;
  constructor(workflowId: string, stepIndex: number, node: string, cause: unknown) {
    const text = cause instanceof Error ? cause.message : String(cause);
    super(
      "WORKFLOW_NODE_FAILED",
      `[dumplings:workflow] workflow ${JSON.stringify(workflowId)} step ${stepIndex}: node ${JSON.stringify(node)} failed: ${text}`,
      { cause },
    );
    this.workflowId = workflowId;
    this.stepIndex = stepIndex;
    this.node = node;
  }
}

/**
 * `resume()` was called on a workflow that is not waiting for input — most
 * often because another resume won the race. A {@link ConflictError}
 * (code `CONFLICT`): the value was not delivered.
 */
export class WorkflowNotWaitingError extends ConflictError {
  readonly workflowId: string;
  /** The status found (`running`, `finished`, `failed`). */
  readonly status: string;
  constructor(workflowId: string, stepIndex: number, status: string) {
    super(workflowId, null, stepIndex, "workflow");
    this.message = `[dumplings:workflow] workflow ${JSON.stringify(workflowId)} is not waiting for input (status ${status} at step ${stepIndex}); was it already resumed?`;
    this.workflowId = workflowId;
    this.status = status;
  }
}

/**
 * Another worker holds the workflow's lease.
 *
 * @deprecated use {@link LeaseHeldError} (the same class, code `LEASE_HELD`); removed in 0.3
 */
export const WorkflowLeaseHeldError = LeaseHeldError;
/** @deprecated use {@link LeaseHeldError}; removed in 0.3 */
export type WorkflowLeaseHeldError = LeaseHeldError;

/**
 * A write carried a fencing token that is no longer the workflow's lease.
 *
 * @deprecated use {@link StaleFencingTokenError} (the same class, code `STALE_FENCING_TOKEN`); removed in 0.3
 */
export const WorkflowLeaseLostError = StaleFencingTokenError;
/** @deprecated use {@link StaleFencingTokenError}; removed in 0.3 */
export type WorkflowLeaseLostError = StaleFencingTokenError;

/**
 * A guarded side effect was started but its finish was never recorded (the
 * process died in between) and no `reconcile` function was supplied to decide
 * whether it happened. Nothing is re-run blindly.
 */
export class UnknownSideEffectError extends DumplingsError {
  /** The idempotency key. */
  readonly key: string;
  /** When the start was recorded, ms since the epoch. */
  readonly startedAt: number;
  constructor(key: string, startedAt: number) {
    super(
      "SIDE_EFFECT_UNKNOWN",
      `[dumplings:workflow] side effect ${JSON.stringify(key)} was started at ${new Date(startedAt).toISOString()} but never recorded as finished; pass a reconcile function to decide whether it happened`,
    );
    this.key = key;
    this.startedAt = startedAt;
  }
}

/**
 * A node's n-th guarded call has a different name on replay than when it was recorded.
 *
 * @deprecated use {@link ReplayMismatchError} (the same class; its code is now `REPLAY_MISMATCH`, was
 *   `WORKFLOW_NONDETERMINISM`); removed in 0.3
 */
export const NondeterminismError = ReplayMismatchError;
/** @deprecated use {@link ReplayMismatchError}; removed in 0.3 */
export type NondeterminismError = ReplayMismatchError;
