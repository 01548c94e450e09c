/**
 * The approvals a run waits on, as a person judges them (the tool and the
 * arguments of the call), and the one check every way of deciding one shares
 * — the library's {@link approve}/{@link reject}, `dumplings approve|reject`
 * and the web inspector's buttons: a decision for a tool call the run does not
 * wait on is refused with {@link ApprovalNotPendingError} and nothing is
 * recorded (it would be recorded for ever and never taken).
 *
 * @module
 */
import type { JsonValue } from "../core/json.js";
import { ApprovalConflictError, ApprovalNotPendingError, RunNotFoundError, SignalConflictError } from "./errors.js";
import type { Journal, RunRecord, SignalRecord, StepRecord } from "./journal.js";

/** Signal name of the approval of a tool call: `approval:<toolCallId>`. */
export function approvalSignalName(toolCallId: string): string {
  return `${APPROVAL_PREFIX}${toolCallId}`;
}

const APPROVAL_PREFIX = "approval:";

/**
 * Throws what a refused approval decision means: a {@link SignalConflictError} on an approval signal
 * becomes an {@link ApprovalConflictError} saying which decision was taken first (read back from the
 * journal); anything else is rethrown as it is. Shared by `approve`/`reject`, the CLI and the web inspector.
 *
 * @param journal - the run's journal
 * @param runId - the run
 * @param name - the signal's name (`approval:<toolCallId>` for a decision)
 * @param error - what sending it threw
 * @throws always
 */
export async function rethrowDecision(journal: Journal, runId: string, name: string, error: unknown): Promise<never> {
  if (!(error instanceof SignalConflictError) || !name.startsWith(APPROVAL_PREFIX)) throw error;
  const first = await journal.getSignal(runId, name).catch(() => undefined);
  const v = first?.value as { approved?: unknown; reason?: unknown } | null | undefined;
  const decision =
    v !== null && typeof v === "object" && typeof v.approved === "boolean"
      ? { approved: v.approved, ...(typeof v.reason === "string" ? { reason: v.reason } : {}) }
      : undefined;
  throw new ApprovalConflictError(runId, name, name.slice(APPROVAL_PREFIX.length), decision, first?.sentAt);
}

/** An approval a run waits on (or waited on and was decided, not yet resumed), as a person judges it. */
export interface ApprovalView {
  toolCallId: string;
  /** The tool the model asked to call; undefined when the journal does not say (a bare `waitForSignal`). */
  toolName?: string;
  /** The arguments of the call, as the model sent them. */
  input?: JsonValue;
  /** The decision, once `dumplings approve/reject` recorded it and before the run resumed. */
  decision?: { approved: boolean; reason?: string };
}

/**
 * The approval a run waits on, with the tool name and arguments of the call
 * (found in the run's steps: the `llm` step's tool calls, or a
 * `needs-approval:<tool>` step) and the decision already recorded, if any.
 *
 * @param run - the run
 * @param steps - its step records
 * @param signals - its signals (to see a decision recorded but not yet taken)
 * @returns the approvals (at most one today: a run waits on one call at a time), empty when it waits on none
 */
export function pendingApprovals(
  run: RunRecord,
  steps: readonly StepRecord[],
  signals: readonly SignalRecord[] = [],
): ApprovalView[] {
  if (run.status !== "waiting" || !run.waitingFor?.startsWith("approval:")) return [];
  const toolCallId = run.waitingFor.slice("approval:".length);
  const view: ApprovalView = { toolCallId, ...findToolCall(steps, toolCallId) };
  const sent = signals.find((x) => x.name === run.waitingFor);
  if (sent) {
    const v = sent.value as { approved?: unknown; reason?: unknown } | null;
    view.decision = {
      approved: v?.approved === true,
      ...(typeof v?.reason === "string" ? { reason: v.reason } : {}),
    };
  }
  return [view];
}

/** The tool name and arguments of a tool call: the newest step output holding it (the `llm` step's tool-call parts). */
function findToolCall(steps: readonly StepRecord[], id: string): { toolName?: string; input?: JsonValue } {
  for (let i = steps.length - 1; i >= 0; i--) {
    const found = searchCall(steps[i]?.output, id, 0);
    if (found) return found;
  }
  return {};
}

/** Depth-first search of a JSON value for `{ toolCallId: id, toolName, input }` (an AI SDK tool-call part). */
function searchCall(
  value: JsonValue | undefined,
  id: string,
  depth: number,
): { toolName: string; input?: JsonValue } | undefined {
  if (value === null || typeof value !== "object" || depth > 8) return undefined;
  if (Array.isArray(value)) {
    for (const v of value) {
      const found = searchCall(v, id, depth + 1);
      if (found) return found;
    }
    return undefined;
  }
  if (value.toolCallId === id && typeof value.toolName === "string") {
    return { toolName: value.toolName, input: value.input ?? value.args };
  }
  for (const v of Object.values(value)) {
    const found = searchCall(v, id, depth + 1);
    if (found) return found;
  }
  return undefined;
}

/**
 * A JSON value on one line, cut to `max` characters with `…`.
 *
 * @param value - the value (undefined gives "")
 * @param max - longest result, in characters @default 60
 * @returns the JSON text
 */
export function previewJson(value: JsonValue | undefined, max = 60): string {
  if (value === undefined) return "";
  const text = JSON.stringify(value);
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}

/**
 * One approval in words: `send_email {"to":"a@b"}`.
 *
 * @param a - the approval
 * @param max - longest shown arguments, in characters (cut with `…`) @default 80
 * @returns the tool and its arguments, or a note that the journal does not name the tool
 */
export function describeCall(a: ApprovalView, max = 80): string {
  if (a.toolName === undefined) return "tool call not found in the journal";
  return `${a.toolName} ${previewJson(a.input ?? null, max)}`;
}

/**
 * Refuses a decision (`approve` or `reject`) of a tool call the run does not wait on right now, before anything
 * is recorded: the check `approve`, `reject`, `dumplings approve|reject` and the web inspector share.
 *
 * @param journal - the run's journal
 * @param runId - the run
 * @param toolCallId - the decided tool call
 * @param verb - `approve` or `reject` (for the message's hint)
 * @returns the run, waiting on `approval:<toolCallId>`
 * @throws {RunNotFoundError} when there is no such run
 * @throws {ApprovalConflictError} when the call was decided already (the run may have moved on since): says
 *   which decision was taken, and when; nothing was recorded
 * @throws {ApprovalNotPendingError} when the run is finished, busy, or waits on something else (the message
 *   names the call it waits on, with its tool and arguments); nothing was recorded
 */
export async function assertAwaitsApproval(
  journal: Journal,
  runId: string,
  toolCallId: string,
  verb: "approve" | "reject",
): Promise<RunRecord> {
  const name = approvalSignalName(toolCallId);
  const run = await journal.getRun(runId);
  if (!run) throw new RunNotFoundError(runId);
  if (run.status === "waiting" && run.waitingFor === name) return run;
  // Decided already (and the run moved on): the late reviewer learns which decision was taken, and when.
  const decided = await journal.getSignal(runId, name).catch(() => undefined);
  if (decided !== undefined) await rethrowDecision(journal, runId, name, new SignalConflictError(runId, name));
  if (run.status === "completed" || run.status === "failed" || run.status === "cancelled") {
    throw new ApprovalNotPendingError(
      runId,
      toolCallId,
      run.status,
      [],
      `[dumplings:durable] run ${JSON.stringify(runId)} is ${run.status}; it waits for nothing, so ${name} was not recorded`,
    );
  }
  const approvals = pendingApprovals(run, await journal.readSteps(runId), await journal.listSignals(runId));
  const waits =
    approvals.length > 0
      ? `it waits on: ${approvals.map((a) => `${a.toolCallId} (${describeCall(a, 60)})`).join(", ")}`
      : `it waits on no approval (${run.status}${run.waitingFor ? `, waiting for ${JSON.stringify(run.waitingFor)}` : ""})`;
  throw new ApprovalNotPendingError(
    runId,
    toolCallId,
    run.status,
    approvals.map((a) => a.toolCallId),
    `[dumplings:durable] run ${JSON.stringify(runId)} does not wait on tool call ${JSON.stringify(toolCallId)}; ${waits}; nothing was recorded` +
      ` (to record a decision ahead of time, send the signal yourself: signal(${JSON.stringify(runId)}, ${JSON.stringify(name)}, { approved: ${verb === "approve"} }, { journal })` +
      ` or dumplings signal ${runId} ${name} '{"approved":${verb === "approve"}}')`,
  );
}
