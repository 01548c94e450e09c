/**
 * Typed errors of stored checkpoints: a state that does not match its schema, a lost
 * compare-and-set on a workflow's latest step, a missing or corrupt blob. The workflow
 * entry (`dumplings-ai/workflow`) exports them.
 *
 * @module
 */
import { ConflictError, DumplingsError } from "../../core/errors.js";

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

/**
 * A checkpoint's compare-and-set on the workflow's latest step failed: another
 * writer advanced (or created, or deleted) the workflow since this one read
 * it. Nothing was written. A {@link ConflictError} (code `CONFLICT`) whose
 * `expectedRevision`/`actualRevision` are step indexes.
 *
 * @example
 * // [dumplings:sqlite] workflow "order-7": checkpoint conflict: this writer continues from step 3, but the
 * // latest stored step is 5 (another writer advanced the workflow); nothing was written …
 */
export class WorkflowConflictError extends ConflictError {
  readonly workflowId: string;
  /** The latest step the writer expected (`null`: it expected to create the workflow). */
  readonly expectedStep: number | null;
  /** The latest step stored (`null`: the workflow has no checkpoint, e.g. it was deleted). */
  readonly actualStep: number | null;
  /**
   * @param workflowId - the workflow
   * @param expectedStep - the latest step the writer expected (`null`: none, it creates the workflow)
   * @param actualStep - the latest step stored (`null`: none)
   * @param backend - the cold store's name (`sqlite`, `postgres`)
   */
  constructor(workflowId: string, expectedStep: number | null, actualStep: number | null, backend = "workflow") {
    super(workflowId, expectedStep, actualStep, backend);
    const wanted =
      expectedStep === null ? "this writer creates the workflow" : `this writer continues from step ${expectedStep}`;
    const found =
      actualStep === null
        ? "the workflow has no checkpoint (it was deleted meanwhile)"
        : expectedStep === null
          ? `it already exists (latest step ${actualStep}; another writer created it)`
          : `the latest stored step is ${actualStep} (another writer advanced the workflow)`;
    this.message = `[dumplings:${backend}] workflow ${JSON.stringify(workflowId)}: checkpoint conflict: ${wanted}, but ${found}; nothing was written. Load the latest checkpoint (runner.runOrResume) and continue from it`;
    this.workflowId = workflowId;
    this.expectedStep = expectedStep;
    this.actualStep = actualStep;
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
