/**
 * Typed errors of the workflow layer (checkpoints, runner, idempotency).
 *
 * Every class extends {@link DumplingsError} and carries a stable `code`; the
 * lost race of two resumes is a {@link ConflictError} (code `CONFLICT`) so a
 * caller handles it like any other compare-and-set loss.
 *
 * @module
 */
import { ConflictError, DumplingsError } from "../core/errors.js";

/**
 * A stored snapshot (or a state about to be saved) does not match the
 * workflow state schema. Names the workflow, the step and the field path.
 *
 * @example
 * // WorkflowStateError: [dumplings:workflow] workflow "w1" step 3: invalid state at sharedMemory.age: expected number
 */
export class WorkflowStateError extends DumplingsError {
  /** Workflow id, when known. */
  readonly workflowId: string | undefined;
  /** Step index of the offending snapshot, when known. */
  readonly stepIndex: number | undefined;
  /** Dotted path of the offending field, e.g. `sharedMemory.items[2].id`; `""` for the root. */
  readonly path: string;
  /**
   * @param details - `workflowId`, `stepIndex`, field `path`, the problem text, the `cause`
   */
  constructor(details: { workflowId?: string; stepIndex?: number; path: string; problem: string; cause?: unknown }) {
    const where = [
      details.workflowId === undefined ? undefined : `workflow ${JSON.stringify(details.workflowId)}`,
      details.stepIndex === undefined ? undefined : `step ${details.stepIndex}`,
    ]
      .filter((x) => x !== undefined)
      .join(" ");
    super(
      "WORKFLOW_INVALID_STATE",
      `[dumplings:workflow] ${where ? `${where}: ` : ""}invalid state at ${details.path || "(root)"}: ${details.problem}`,
      { cause: details.cause },
    );
    this.workflowId = details.workflowId;
    this.stepIndex = details.stepIndex;
    this.path = details.path;
  }
}

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
 * A node's n-th guarded call has a different name on replay than when it was
 * recorded: the node is not deterministic in the order of its side effects,
 * so replaying recorded results would hand the wrong result to the wrong call.
 */
export class NondeterminismError extends DumplingsError {
  readonly key: string;
  constructor(key: string, recorded: string, now: string) {
    super(
      "WORKFLOW_NONDETERMINISM",
      `[dumplings:workflow] side effect ${JSON.stringify(key)} was recorded as ${JSON.stringify(recorded)} but is now called as ${JSON.stringify(now)}; guarded calls must happen in the same order on every run of a node`,
    );
    this.key = key;
  }
}

/** A blob referenced by a snapshot is missing or its bytes do not match its content hash. */
export class BlobError extends DumplingsError {
  readonly ref: string;
  constructor(ref: string, message: string, options?: { cause?: unknown }) {
    super("WORKFLOW_BLOB", `[dumplings:workflow] blob ${ref}: ${message}`, options);
    this.ref = ref;
  }
}
