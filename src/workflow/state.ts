/**
 * The workflow state: a zod schema (strict), its inferred type, the builder
 * of a fresh state, and schema migrations for snapshots written by an older
 * version of an application's state.
 *
 * A user extends the state with their own zod schema for `sharedMemory`
 * ({@link defineWorkflowState}); everything else is fixed by the runner.
 * Loading validates strictly (unknown fields are refused) and a mismatch is a
 * {@link WorkflowStateError} naming the workflow, the step and the field path.
 *
 * @module
 */
import { z } from "zod";
import { assertJson, type JsonObject, type JsonValue, joinPath, MAX_JSON_DEPTH } from "../core/json.js";
// The pseudo-nodes are named where stored checkpoints are read (a stored `current_node` names them).
import { END, START } from "../durable/checkpoints/original.js";
import { WorkflowMigrationError, WorkflowStateError } from "./errors.js";

export { END, START };

/**
 * True when `v` is a JSON value as `z.json()` defines one (but for an object property that is
 * `undefined`: left out, as `JSON.stringify` does): a string, a finite
 * number, a boolean, null, an array of JSON values without holes, or a plain
 * object of them, nested at most `MAX_JSON_DEPTH` levels. One walk without
 * allocations: `z.json()` tries a six-way union at every node and copies every
 * object (about 0.7 ms for a 100 KB state, most of a checkpoint's CPU).
 */
function isJsonValue(v: unknown, depth = 1): boolean {
  switch (typeof v) {
    case "string":
    case "boolean":
      return true;
    case "number":
      return Number.isFinite(v);
    case "object": {
      if (v === null) return true;
      if (depth > MAX_JSON_DEPTH) return false;
      if (Array.isArray(v)) {
        for (let i = 0; i < v.length; i++) if (!(i in v) || !isJsonValue(v[i], depth + 1)) return false;
        return true;
      }
      const proto = Object.getPrototypeOf(v);
      if (proto !== Object.prototype && proto !== null) return false;
      for (const key in v) {
        // an undefined property is left out by JSON.stringify (and accepted by assertJson): the save drops it
        const child = (v as Record<string, unknown>)[key];
        if (child !== undefined && !isJsonValue(child, depth + 1)) return false;
      }
      return true;
    }
    default:
      return false;
  }
}

/**
 * A JSON value (zod; see `isJsonValue` above). Values are additionally checked with `assertJson`
 * before they are saved, which names the path of a value that is not JSON.
 */
export const JsonValueSchema: z.ZodType<JsonValue> = z.custom<JsonValue>((v) => isJsonValue(v), {
  message: "not a JSON value",
});

/**
 * A JSON object (zod), the default shape of `sharedMemory`. A property whose value is `undefined` is
 * accepted and left out of the snapshot (as `JSON.stringify` and `assertJson` treat it), at any depth:
 * a first run and its replay (which reads the snapshot back) see the same state. Checked in place: the
 * parsed value is the object given (zod's `z.record` would rebuild it by assignment, and a key named
 * `"__proto__"`, legal JSON, would set the copy's prototype instead of being kept). An offending value
 * is reported at its top-level key, as `z.record` did.
 */
export const JsonObjectSchema: z.ZodType<JsonObject> = z
  .custom<JsonObject>((v) => {
    if (v === null || typeof v !== "object" || Array.isArray(v)) return false;
    const proto = Object.getPrototypeOf(v);
    return proto === Object.prototype || proto === null;
  }, "expected a JSON object")
  .superRefine((v, ctx) => {
    for (const key of Object.keys(v)) {
      const child = (v as Record<string, unknown>)[key];
      if (child !== undefined && !isJsonValue(child))
        ctx.addIssue({ code: "custom", message: "not a JSON value", path: [key] });
    }
  });

/** One tool execution record kept in `historyRecords`. */
export const HistoryRecordSchema = z.strictObject({
  toolName: z.string().min(1),
  arguments: JsonValueSchema,
  result: JsonValueSchema,
  /** Duration of the call, ms. */
  latencyMs: z.number().nonnegative(),
  /** When the call finished, ms since the epoch. */
  timestamp: z.number().int().nonnegative(),
});
/** One tool execution record. */
export type HistoryRecord = z.infer<typeof HistoryRecordSchema>;

/** Lifecycle of a workflow: `waiting` = paused by `interrupt()` until `resume()`. */
export const WorkflowStatusSchema = z.enum(["running", "waiting", "finished"]);
/** Lifecycle of a workflow. */
export type WorkflowStatus = z.infer<typeof WorkflowStatusSchema>;

/** The question a paused workflow is waiting on. */
export const PendingInterruptSchema = z.strictObject({
  /** Stable id of this interrupt call: `{workflowId}:{nodeStartStep}:{node}:{index}`; the same on every replay. */
  id: z.string(),
  /** Node that asked. */
  node: z.string(),
  /** 0-based index of the `interrupt()` call within the node's run. */
  index: z.number().int().nonnegative(),
  reason: z.string(),
  payload: JsonValueSchema,
});
/** The question a paused workflow is waiting on. */
export type PendingInterrupt = z.infer<typeof PendingInterruptSchema>;

/**
 * A node run that was interrupted and is being resumed: the step it started
 * from (fixes the idempotency keys of its side effects) and the answers given
 * so far, one per `interrupt()` call in order — returned on replay instead of asking again.
 */
export const NodeRunSchema = z.strictObject({
  node: z.string(),
  startStep: z.number().int().nonnegative(),
  answers: z.array(z.strictObject({ id: z.string(), value: JsonValueSchema })),
});
/** An interrupted node run. */
export type NodeRun = z.infer<typeof NodeRunSchema>;

/**
 * Builds the strict zod schema of a workflow state whose `sharedMemory` has the given shape.
 *
 * @param sharedMemory - zod schema of `sharedMemory` (must describe a JSON object)
 * @returns a strict zod object schema
 * @example
 * const MyState = defineWorkflowState(z.strictObject({ age: z.number().int().optional() }));
 * type MyState = z.infer<typeof MyState>;
 */
export function defineWorkflowState<M extends z.ZodType<JsonObject>>(sharedMemory: M) {
  return z.strictObject({
    workflowId: z.string().min(1),
    sessionId: z.string(),
    /** The node to run next (`START` before the first node, `END` when finished). */
    currentNode: z.string().min(1).default(START),
    /** 0-based; +1 per checkpoint (node finished, interrupt, resume, state update). */
    stepIndex: z.number().int().nonnegative(),
    sharedMemory,
    historyRecords: z.array(HistoryRecordSchema).default([]),
    isFinished: z.boolean().default(false),
    /** ms since the epoch. */
    updatedAt: z.number().int().nonnegative(),
    status: WorkflowStatusSchema.default("running"),
    /** Version of the application's state schema that wrote the snapshot. */
    schemaVersion: z.number().int().positive().default(1),
    pendingInterrupt: PendingInterruptSchema.nullable().default(null),
    nodeRun: NodeRunSchema.nullable().default(null),
    /** The workflow and step this one was forked from by `resumeFrom`, else null. */
    parent: z
      .strictObject({ workflowId: z.string(), stepIndex: z.number().int().nonnegative() })
      .nullable()
      .default(null),
  });
}

/** The workflow state schema with a free-form JSON object as `sharedMemory`. */
export const WorkflowStateSchema = defineWorkflowState(JsonObjectSchema);

/** A workflow state (free-form `sharedMemory`); use `z.infer<typeof YourSchema>` for your own. */
export type WorkflowState = z.infer<typeof WorkflowStateSchema>;

/** Any zod schema produced by {@link defineWorkflowState}. */
export type AnyWorkflowStateSchema = z.ZodType<WorkflowState, unknown>;

/**
 * Builds step 0 of a new workflow.
 *
 * @param init - `workflowId` (required), `sessionId` (default: the workflow id), `sharedMemory` (default `{}`),
 *   `schemaVersion` (default 1), `now` (ms, default `Date.now()`)
 * @returns a valid state at step 0, node `START`, status `running`
 * @throws {NonJsonValueError} when `sharedMemory` is not JSON
 * @example
 * const s = createWorkflowState({ workflowId: "order-42", sharedMemory: { orderId: 42 } });
 */
export function createWorkflowState(init: {
  workflowId: string;
  sessionId?: string;
  sharedMemory?: JsonObject;
  schemaVersion?: number;
  now?: number;
}): WorkflowState {
  const sharedMemory = init.sharedMemory ?? {};
  assertJson(sharedMemory, "sharedMemory");
  return {
    workflowId: init.workflowId,
    sessionId: init.sessionId ?? init.workflowId,
    currentNode: START,
    stepIndex: 0,
    sharedMemory,
    historyRecords: [],
    isFinished: false,
    updatedAt: init.now ?? Date.now(),
    status: "running",
    schemaVersion: init.schemaVersion ?? 1,
    pendingInterrupt: null,
    nodeRun: null,
    parent: null,
  };
}

function zodPath(path: readonly PropertyKey[]): string {
  let out = "";
  for (const k of path) out = joinPath(out, typeof k === "number" ? k : String(k));
  return out;
}

/**
 * Validates a state strictly against a schema.
 *
 * @param schema - the state schema (from {@link defineWorkflowState})
 * @param value - the candidate state (parsed JSON)
 * @param where - workflow id and step for the error message
 * @returns the parsed state (defaults filled)
 * @throws {WorkflowStateError} naming the workflow, step and field path of the first problem
 */
export function parseWorkflowState<S extends AnyWorkflowStateSchema>(
  schema: S,
  value: unknown,
  where: { workflowId?: string; stepIndex?: number } = {},
): z.infer<S> {
  const result = schema.safeParse(value);
  if (result.success) return result.data as z.infer<S>;
  const issue = result.error.issues[0]!;
  let path = zodPath(issue.path);
  let problem = issue.message;
  if (issue.code === "unrecognized_keys") {
    path = joinPath(path, issue.keys[0] ?? "");
    problem = `unknown field (strict schema); unknown keys: ${issue.keys.join(", ")}`;
  }
  throw new WorkflowStateError({ ...where, path, problem, cause: result.error });
}

/** A migration: takes a raw snapshot object of version `from`, returns one of version `to`. */
export type StateMigration = (snapshot: JsonObject) => JsonObject;

/**
 * Registry of schema migrations. A snapshot with `schemaVersion` v below the
 * current version is upgraded step by step (v → next registered `to`) on load;
 * the stored row is not rewritten (history is never edited).
 *
 * @example
 * const m = new MigrationRegistry(2);
 * m.register(1, 2, (s) => ({ ...s, sharedMemory: { ...s.sharedMemory as object, tags: [] } }));
 */
export class MigrationRegistry {
  private readonly steps = new Map<number, { to: number; fn: StateMigration }>();

  /**
   * @param currentVersion - the version new snapshots are written with. @default 1
   */
  constructor(readonly currentVersion = 1) {
    if (!Number.isInteger(currentVersion) || currentVersion < 1) {
      throw new RangeError(`schemaVersion must be a positive integer, got ${currentVersion}`);
    }
  }

  /**
   * Registers the upgrade from version `from` to version `to` (`from < to <= currentVersion`).
   *
   * @throws {RangeError} on bad versions or a second migration from the same version
   */
  register(from: number, to: number, fn: StateMigration): void {
    if (!Number.isInteger(from) || !Number.isInteger(to) || from < 1 || to <= from || to > this.currentVersion) {
      throw new RangeError(`migration ${from} -> ${to} is invalid (current schema version is ${this.currentVersion})`);
    }
    if (this.steps.has(from)) throw new RangeError(`a migration from schema version ${from} is already registered`);
    this.steps.set(from, { to, fn });
  }

  /**
   * Upgrades a raw snapshot to the current version.
   *
   * @param raw - parsed JSON of the stored state
   * @param where - workflow id and step, for errors
   * @returns the upgraded raw object (`schemaVersion` set to the current version)
   * @throws {WorkflowMigrationError} when no path exists, or the snapshot is newer than this code
   */
  upgrade(raw: JsonObject, where: { workflowId: string; stepIndex: number }): JsonObject {
    const recorded = raw.schemaVersion ?? 1;
    if (typeof recorded !== "number" || !Number.isInteger(recorded) || recorded < 1) {
      throw new WorkflowStateError({ ...where, path: "schemaVersion", problem: `not a positive integer: ${recorded}` });
    }
    if (recorded > this.currentVersion) {
      throw new WorkflowMigrationError(
        where.workflowId,
        where.stepIndex,
        recorded,
        this.currentVersion,
        "the snapshot was written by a newer schema version; upgrade the application",
      );
    }
    let version = recorded;
    let value = raw;
    while (version < this.currentVersion) {
      const step = this.steps.get(version);
      if (!step) {
        throw new WorkflowMigrationError(
          where.workflowId,
          where.stepIndex,
          recorded,
          this.currentVersion,
          `no migration registered from version ${version}`,
        );
      }
      value = { ...step.fn(value), schemaVersion: step.to };
      version = step.to;
    }
    return value;
  }
}
