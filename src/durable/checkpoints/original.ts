/**
 * Reading workflow checkpoints written in the original design's layout (the
 * workflow-snapshot article, Python): the same `workflow_snapshots` table and
 * Redis key `agent:state:{workflowId}`, but
 *
 * - `state_json` is the snake_case state (`workflow_id`, `session_id`,
 *   `current_node`, `step_index`, `shared_memory`, `history_records` with
 *   `tool_name`/`latency_ms`, `is_finished`, `updated_at`);
 * - times are float seconds since the epoch (`updated_at`, a record's
 *   `timestamp`), and `created_at` may be float seconds or SQLite's
 *   `CURRENT_TIMESTAMP` text (`2025-03-14 09:26:53`, UTC);
 * - the pseudo-nodes are named `START` and `END` (here `__start__`/`__end__`);
 * - there is no summary row in `workflows`;
 * - the Redis entry is a plain string holding the state JSON (here a hash).
 *
 * This module maps such a snapshot onto the current state (read only); the
 * store then writes every new checkpoint in the current layout and never
 * rewrites or deletes an original row.
 *
 * @module
 */

import { isJsonObject, type JsonObject, type JsonValue } from "../../core/json.js";
import { WorkflowStateError } from "./errors.js";

/** Name of the pseudo-node a new workflow starts at (the runner then runs its entry node). */
export const START = "__start__";
/** Name of the pseudo-node a node returns as `next` to finish the workflow. */
export const END = "__end__";

/** Name of the first pseudo-node in the original layout (`START` here is `__start__`). */
export const ORIGINAL_START = "START";
/** Name of the final pseudo-node in the original layout (`END` here is `__end__`). */
export const ORIGINAL_END = "END";

/** Times below this are seconds since the epoch (1e11 s is year 5138; 1e11 ms is 1973). */
const SECONDS_LIMIT = 1e11;

/**
 * A stored time as ms since the epoch: integer ms (this package), float or
 * integer seconds (the original design's `time.time()`), a numeric string
 * (PostgreSQL's BIGINT), or date text (`2025-03-14 09:26:53`, read as UTC, or ISO-8601).
 *
 * @param value - the stored value
 * @returns ms since the epoch (an integer), or `NaN` when it is no time
 * @example
 * storedTimeMs(1741944413.5)          // 1741944413500
 * storedTimeMs(1741944413500)         // 1741944413500
 * storedTimeMs("2025-03-14 09:26:53") // 1741944413000
 */
export function storedTimeMs(value: unknown): number {
  let n: number;
  if (typeof value === "number") n = value;
  else if (typeof value === "bigint") n = Number(value);
  else if (typeof value === "string" && /^\s*-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?\s*$/.test(value)) n = Number(value);
  else if (typeof value === "string") {
    const text = value.trim();
    // SQLite's CURRENT_TIMESTAMP (and Python's str(datetime)) without an offset is UTC.
    const iso = /^\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?$/.test(text)
      ? `${text.replace(" ", "T")}Z`
      : text;
    return Date.parse(iso);
  } else return Number.NaN;
  if (!Number.isFinite(n) || n < 0) return Number.NaN;
  return Math.round(n < SECONDS_LIMIT ? n * 1000 : n);
}

/**
 * True when a parsed snapshot is in the original layout (snake_case `workflow_id`, no `workflowId`).
 *
 * @param raw - the parsed `state_json` (or Redis value)
 * @returns whether {@link fromOriginalSnapshot} applies
 */
export function isOriginalSnapshot(raw: JsonObject): boolean {
  return !Object.hasOwn(raw, "workflowId") && Object.hasOwn(raw, "workflow_id");
}

/** Maps an original pseudo-node name to this package's. */
export function fromOriginalNode(name: string): string {
  return name === ORIGINAL_START ? START : name === ORIGINAL_END ? END : name;
}

const STATE_KEYS = new Set([
  "workflow_id",
  "session_id",
  "current_node",
  "step_index",
  "shared_memory",
  "history_records",
  "is_finished",
  "updated_at",
]);
const RECORD_KEYS: ReadonlyMap<string, string> = new Map([
  ["tool_name", "toolName"],
  ["arguments", "arguments"],
  ["result", "result"],
  ["latency_ms", "latencyMs"],
  ["timestamp", "timestamp"],
]);

/**
 * Maps a snapshot of the original layout onto the current state shape (then
 * validated strictly by the store, as every snapshot is). Nothing is dropped:
 * an unknown key is an error naming it.
 *
 * - `START`/`END` become `__start__`/`__end__`; `END` means finished;
 * - `updated_at` and each record's `timestamp` become integer ms;
 * - `status` is `finished` or `running`; `schemaVersion` 1 (registered
 *   migrations then apply); no pending interrupt, no parent;
 * - a missing `session_id` is the workflow id.
 *
 * @param raw - the parsed original snapshot
 * @param where - workflow id and step, for errors
 * @returns the snapshot in the current (camelCase) shape
 * @throws {WorkflowStateError} naming the unknown or malformed field
 * @example
 * fromOriginalSnapshot({ workflow_id: "w1", session_id: "s", current_node: "plan", step_index: 2,
 *   shared_memory: {}, history_records: [], is_finished: false, updated_at: 1741944413.5 }, { workflowId: "w1", stepIndex: 2 })
 */
export function fromOriginalSnapshot(raw: JsonObject, where: { workflowId: string; stepIndex: number }): JsonObject {
  const fail = (path: string, problem: string): never => {
    throw new WorkflowStateError({ ...where, path, problem: `${problem} (a snapshot in the original layout)` });
  };
  for (const key of Object.keys(raw)) if (!STATE_KEYS.has(key)) fail(key, "unknown field");
  const time = (path: string, value: JsonValue | undefined): number => {
    const ms = storedTimeMs(value);
    if (Number.isNaN(ms)) fail(path, `not a time: ${JSON.stringify(value)}`);
    return ms;
  };
  const node = raw.current_node === undefined ? ORIGINAL_START : raw.current_node;
  if (typeof node !== "string") fail("current_node", "not a string");
  const currentNode = fromOriginalNode(node as string);
  const finished = raw.is_finished === true || currentNode === END;
  const records = raw.history_records ?? [];
  if (!Array.isArray(records)) fail("history_records", "not an array");
  const historyRecords = (records as JsonValue[]).map((r, i) => {
    if (!isJsonObject(r)) return fail(`history_records[${i}]`, "not an object");
    const out: JsonObject = {};
    for (const [key, value] of Object.entries(r)) {
      const name = RECORD_KEYS.get(key);
      if (name === undefined) fail(`history_records[${i}].${key}`, "unknown field");
      out[name as string] = key === "timestamp" ? time(`history_records[${i}].timestamp`, value) : value;
    }
    return out;
  });
  const out: JsonObject = {
    workflowId: raw.workflow_id as JsonValue,
    sessionId: (raw.session_id ?? raw.workflow_id) as JsonValue,
    currentNode,
    stepIndex: raw.step_index as JsonValue,
    sharedMemory: (raw.shared_memory ?? {}) as JsonValue,
    historyRecords,
    isFinished: finished,
    updatedAt: time("updated_at", raw.updated_at),
    status: finished ? "finished" : "running",
    schemaVersion: 1,
    pendingInterrupt: null,
    nodeRun: null,
    parent: null,
  };
  return out;
}

/**
 * What a workflow's summary needs from the newest snapshot of a workflow
 * written in the original layout (which has no summary row). Lenient: a
 * malformed snapshot is reported when it is loaded, not here.
 *
 * @param raw - the newest checkpoint's state, parsed
 * @returns `{ sessionId, currentNode, finished }`, or `undefined` when it is not an original-layout snapshot
 */
export function originalSummaryFields(
  raw: JsonObject,
): { sessionId: string; currentNode: string; finished: boolean } | undefined {
  if (!isOriginalSnapshot(raw) || typeof raw.workflow_id !== "string") return undefined;
  const node = fromOriginalNode(typeof raw.current_node === "string" ? raw.current_node : ORIGINAL_START);
  const finished = raw.is_finished === true || node === END;
  return {
    sessionId: typeof raw.session_id === "string" ? raw.session_id : raw.workflow_id,
    currentNode: finished ? END : node,
    finished,
  };
}

/**
 * `created_at` of a stored snapshot row as ms: this package's integer ms as
 * they are; the original layout's float seconds or date text converted.
 *
 * @param createdAt - the column's value
 * @param stateJson - the row's state (tells an original row whose `created_at` is whole seconds)
 * @returns ms since the epoch
 */
export function rowCreatedAtMs(createdAt: unknown, stateJson: string): number {
  const n = Number(createdAt);
  if (Number.isInteger(n) && (n >= SECONDS_LIMIT || !stateJson.includes('"workflow_id"'))) return n;
  return storedTimeMs(createdAt);
}
