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
import { z } from "zod";
import { InvalidOptionError } from "../core/errors.js";
import { isJsonObject, type JsonObject, type JsonValue } from "../core/json.js";
import { checkOptions, optionKeys } from "../core/options.js";
import { ApprovalConflictError, ApprovalNotPendingError, RunNotFoundError, SignalConflictError } from "./errors.js";
import type { Journal, RunRecord, SignalRecord, StepRecord } from "./journal.js";

/**
 * What the model receives when a tool call is rejected without a note: the `reason` of its
 * `execution-denied` tool result (OpenAI-compatible providers send it as the tool message's text).
 */
export const DEFAULT_REJECTION = "rejected by a human reviewer";

/**
 * The value of an approval signal (`approval:<toolCallId>`), as `approve`/`reject`, `dumplings
 * approve|reject`, the web inspector and a raw `signal` record it.
 */
export interface ApprovalDecision {
  approved: boolean;
  /**
   * What the reviewer said. On a rejection the model receives it as the refusal's reason (without one:
   * {@link DEFAULT_REJECTION}); on an approval it is added to the tool's result the model receives.
   */
  note?: string;
  /**
   * Corrected arguments of the call (approvals only): the tool runs with them instead of the model's.
   * Only for a tool listed in `DurableAgent({ editableArgs })`, checked against its schema when sent.
   */
  args?: JsonObject;
  /** @deprecated the name `note` had before 0.2 (read as `note`; give one of the two). */
  reason?: string;
}

/** The keys an approval signal's value may hold: any other is refused, never dropped. */
const DECISION_KEYS = optionKeys<ApprovalDecision>({ approved: true, note: true, args: true, reason: true });

/**
 * Checks the value of an approval signal before anything is recorded: an object `{ approved, note?,
 * args? }` (`reason` the deprecated name of `note`); an unknown key, a wrong type, both `note` and
 * `reason`, or `args` on a rejection is refused.
 *
 * @param component - who checks, for the message (`signal`, `approve`, `dumplings approve`…)
 * @param value - the value as given
 * @returns the value, typed
 * @throws {InvalidOptionError} (`option` names the key at fault, `value` for the whole value)
 */
export function checkDecision(component: string, value: unknown): ApprovalDecision {
  const shape = "an approval signal's value is { approved: boolean, note?: string, args?: { …corrected arguments } }";
  if (!isJsonObject(value)) {
    throw new InvalidOptionError(
      component,
      "value",
      `${shape}, got ${value === null ? "null" : Array.isArray(value) ? "an array" : typeof value}`,
    );
  }
  checkOptions(component, value, DECISION_KEYS);
  if (typeof value.approved !== "boolean") {
    throw new InvalidOptionError(
      component,
      "approved",
      `must be true or false, got ${JSON.stringify(value.approved) ?? "undefined"}; ${shape}`,
    );
  }
  for (const key of ["note", "reason"] as const) {
    if (value[key] !== undefined && typeof value[key] !== "string") {
      throw new InvalidOptionError(component, key, `must be a string, got ${typeof value[key]}`);
    }
  }
  if (value.note !== undefined && value.reason !== undefined) {
    throw new InvalidOptionError(component, "reason", "give note or reason (its old name), not both");
  }
  if (value.args !== undefined) {
    if (!isJsonObject(value.args)) {
      throw new InvalidOptionError(
        component,
        "args",
        `must be an object of the tool's arguments, got ${Array.isArray(value.args) ? "an array" : value.args === null ? "null" : typeof value.args}`,
      );
    }
    if (value.approved !== true) {
      throw new InvalidOptionError(
        component,
        "args",
        "corrected arguments go with an approval (approved: true), not a rejection",
      );
    }
  }
  return value as unknown as ApprovalDecision;
}

/**
 * A recorded approval decision as the agent and the views read it: `note` (or the old `reason`), and
 * `args` when they are an object. Never throws: a value recorded by an older release reads as it did.
 *
 * @param value - the signal's value
 * @returns `{ approved, note?, args? }`
 */
export function readDecision(value: JsonValue | undefined): { approved: boolean; note?: string; args?: JsonObject } {
  const v = isJsonObject(value) ? value : {};
  const note = typeof v.note === "string" ? v.note : typeof v.reason === "string" ? v.reason : undefined;
  return {
    approved: v.approved === true,
    ...(note !== undefined ? { note } : {}),
    ...(isJsonObject(v.args) ? { args: v.args as JsonObject } : {}),
  };
}

/**
 * What the wait of an approval records beside the signal's name when the tool takes corrected
 * arguments: `argsSchema`, the JSON Schema of the tool's input (as the model was sent it), so that
 * `approve` in any process can check corrected arguments before anything is recorded.
 */
export interface ApprovalWait {
  signal: string;
  argsSchema?: JsonObject;
}

/** The JSON Schema the run's wait on `approval:<toolCallId>` recorded, or undefined (the tool takes no corrected arguments). */
function argsSchemaOf(steps: readonly StepRecord[], toolCallId: string): JsonObject | undefined {
  const name = `signal:${approvalSignalName(toolCallId)}`;
  for (let i = steps.length - 1; i >= 0; i--) {
    const s = steps[i] as StepRecord;
    if (s.name !== name) continue;
    const out = s.output as Partial<ApprovalWait> | undefined;
    return s.status === "waiting" && isJsonObject(out) && isJsonObject(out.argsSchema) ? out.argsSchema : undefined;
  }
  return undefined;
}

/**
 * Checks corrected arguments for the call a run waits on: the tool must take them (`DurableAgent({
 * editableArgs })`, recorded with the wait) and they must match the tool's JSON Schema, recorded with it.
 *
 * @param journal - the run's journal
 * @param runId - the run (waiting on `approval:<toolCallId>`: check that first)
 * @param toolCallId - the call
 * @param args - the corrected arguments
 * @param component - who checks, for the message
 * @throws {InvalidOptionError} (`option: "args"`) when the tool takes no corrected arguments, or they do not
 *   match its schema (each problem as `path: message`); nothing was recorded
 */
export async function checkCorrectedArgs(
  journal: Journal,
  runId: string,
  toolCallId: string,
  args: JsonObject,
  component: string,
): Promise<void> {
  const steps = await journal.readSteps(runId, { namePrefix: `signal:${approvalSignalName(toolCallId)}` });
  const schema = argsSchemaOf(steps, toolCallId);
  if (schema === undefined) {
    const tool = findToolCall(await journal.readSteps(runId), toolCallId).toolName;
    throw new InvalidOptionError(
      component,
      "args",
      `the tool${tool ? ` "${tool}"` : ""} of call ${JSON.stringify(toolCallId)} does not take corrected arguments (list it in new DurableAgent({ editableArgs: [${JSON.stringify(tool ?? "tool")}] })); approve it as it is, or reject it with a note; nothing was recorded`,
    );
  }
  let validator: z.ZodType | undefined;
  try {
    validator = z.fromJSONSchema(schema as Parameters<typeof z.fromJSONSchema>[0]);
  } catch {
    // a schema zod cannot read: the agent checks the arguments against the tool's own schema when the run resumes
    return;
  }
  const result = validator.safeParse(args);
  if (!result.success) {
    const problems = result.error.issues.map((i) => `${i.path.map(String).join(".") || "(root)"}: ${i.message}`);
    throw new InvalidOptionError(
      component,
      "args",
      `do not match the schema of the tool's input: ${problems.join("; ")}; nothing was recorded`,
    );
  }
}

/**
 * The value a decision records, after every check `approve`/`reject`, `dumplings approve|reject` and the web
 * inspector share: the run waits on the call ({@link assertAwaitsApproval}), the note is a string, and
 * corrected arguments are taken by the tool and match its schema ({@link checkCorrectedArgs}).
 *
 * @param journal - the run's journal
 * @param runId - the run
 * @param toolCallId - the decided call
 * @param decision - `{ approved, note?, args? }` (`reason`: the old name of `note`)
 * @param component - who decides, for the messages (`approve`, `reject`, `dumplings approve`…)
 * @returns the JSON value to send as the signal `approval:<toolCallId>` (only what was given: no default note)
 * @throws {InvalidOptionError} @throws {ApprovalNotPendingError} @throws {ApprovalConflictError} @throws {RunNotFoundError}
 */
export async function decisionValue(
  journal: Journal,
  runId: string,
  toolCallId: string,
  decision: ApprovalDecision,
  component: string,
): Promise<JsonObject> {
  const checked = checkDecision(component, decision);
  await assertAwaitsApproval(journal, runId, toolCallId, checked.approved ? "approve" : "reject");
  if (checked.args !== undefined) await checkCorrectedArgs(journal, runId, toolCallId, checked.args, component);
  const note = checked.note ?? checked.reason;
  return {
    approved: checked.approved,
    ...(note !== undefined && note !== "" ? { note } : {}),
    ...(checked.args !== undefined ? { args: checked.args } : {}),
  };
}

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
  const v = first?.value;
  const decision = isJsonObject(v) && typeof v.approved === "boolean" ? decisionView(v) : undefined;
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
  decision?: DecisionView;
  /** True when the tool takes corrected arguments (`approve(…, { args })`, `dumplings approve --args`). */
  editableArgs?: true;
}

/**
 * A recorded decision as the views and {@link ApprovalConflictError} show it: `note` (and the same text
 * as the deprecated `reason`) and the corrected `args`, when given.
 */
export interface DecisionView {
  approved: boolean;
  note?: string;
  args?: JsonObject;
  /** @deprecated the same text as `note` (its name before 0.2) */
  reason?: string;
}

/** A recorded decision as {@link DecisionView}. */
function decisionView(value: JsonValue | undefined): DecisionView {
  const d = readDecision(value);
  return { ...d, ...(d.note !== undefined ? { reason: d.note } : {}) };
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
  if (argsSchemaOf(steps, toolCallId) !== undefined) view.editableArgs = true;
  const sent = signals.find((x) => x.name === run.waitingFor);
  if (sent) view.decision = decisionView(sent.value);
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
