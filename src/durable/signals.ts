/**
 * Sending signals to runs from any process: the general {@link signal} and
 * the approval helpers {@link approve} / {@link reject} used by the durable
 * agent's `needsApproval` tools and by `dumplings approve`.
 *
 * A signal is recorded in the journal (at most one per name: a second one is a
 * {@link SignalConflictError}); when the run is suspended waiting for exactly
 * that signal, the optional `wake` callback (e.g. a worker queue) resumes it.
 * A signal for a run that is busy or waits for something else is only
 * recorded, and consumed when the workflow reaches its `waitForSignal` — an
 * unrelated signal never re-dispatches a running step (case PB-21). A run
 * that has ended (completed, failed, cancelled) takes no signal: sending one
 * is a `RunStateError`, and nothing is recorded.
 *
 * @module
 */
import type { JsonObject, JsonValue } from "../core/json.js";
import { checkOptions, optionKeys } from "../core/options.js";
import {
  approvalSignalName,
  assertAwaitsApproval,
  checkCorrectedArgs,
  checkDecision,
  decisionValue,
  rethrowDecision,
} from "./approvals.js";
import { assertJournalOption, type Journal, type RunRecord } from "./journal.js";

export { type ApprovalDecision, approvalSignalName } from "./approvals.js";

/** The keys of {@link SignalOptions}: any other is an `InvalidOptionError`. */
const SIGNAL_OPTIONS = optionKeys<SignalOptions>({ journal: true, wake: true });
/** The options of `approve`. */
type ApproveOptions = SignalOptions & { note?: string; args?: JsonObject; reason?: string };
/** The options of `reject`. */
type RejectOptions = SignalOptions & { note?: string; reason?: string };
const APPROVE_OPTIONS = optionKeys<ApproveOptions>({ journal: true, wake: true, note: true, args: true, reason: true });
const REJECT_OPTIONS = optionKeys<RejectOptions>({ journal: true, wake: true, note: true, reason: true });

/** Options of {@link signal}. */
export interface SignalOptions {
  journal: Journal;
  /** Called when the run waits for this signal (resume it: enqueue it, or call runDurable). */
  wake?: (runId: string) => Promise<void>;
}

/** Result of {@link signal}. */
export interface SignalResult {
  /** The run as it was when the signal was recorded. */
  run: RunRecord;
  /** True when the run was waiting for this signal (and `wake` was called, if given). */
  wakes: boolean;
}

/**
 * Sends the signal `name` with a JSON `value` to a run.
 *
 * The value of an approval signal (`approval:<toolCallId>`) is checked before anything is recorded: it
 * is `{ approved: boolean, note?: string, args?: object }` (see {@link approve}); an unknown key or a
 * wrong type is refused, never dropped. Corrected `args` need the run to wait on that call (the tool's
 * schema is known then) and are checked as `approve` checks them; a decision without them may be
 * recorded ahead of the wait on purpose.
 *
 * @param runId - the run
 * @param name - signal name, e.g. `approval:call_1`
 * @param value - JSON value returned by the run's `waitForSignal(name)`
 * @param options - `journal`, optional `wake(runId)`
 * @returns `{ run, wakes }`
 * @throws {SignalConflictError} when this signal was already sent (exactly one is taken)
 * @throws {RunStateError} (code `RUN_STATE`) when the run has ended (completed, failed or cancelled): it waits for
 *   nothing; nothing was recorded
 * @throws {InvalidOptionError} when an approval's value is not `{ approved, note?, args? }`, or its `args` are
 *   refused (see {@link approve}); nothing was recorded
 * @throws {ApprovalNotPendingError} when an approval carries `args` and the run does not wait on that call
 * @throws {RunNotFoundError} @throws {NonJsonValueError}
 * @example
 * await signal("order-42", "approval", { approved: true }, { journal, wake: (id) => worker.wake(id) });
 */
export async function signal(
  runId: string,
  name: string,
  value: JsonValue,
  options: SignalOptions,
): Promise<SignalResult> {
  checkOptions("signal", options, SIGNAL_OPTIONS);
  assertJournalOption("signal", options?.journal, "signal(runId, name, value, { journal })");
  if (name.startsWith(APPROVAL_PREFIX)) {
    const decision = checkDecision(`signal ${name}`, value);
    if (decision.args !== undefined) {
      const toolCallId = name.slice(APPROVAL_PREFIX.length);
      await assertAwaitsApproval(options.journal, runId, toolCallId, "approve");
      await checkCorrectedArgs(options.journal, runId, toolCallId, decision.args, `signal ${name}`);
    }
  }
  const run = await options.journal.sendSignal(runId, name, value);
  const wakes = run.status === "waiting" && run.waitingFor === name;
  if (wakes && options.wake) await options.wake(runId);
  return { run, wakes };
}

const APPROVAL_PREFIX = approvalSignalName("");

/**
 * Approves a tool call a durable agent waits on, with what the reviewer said. As `dumplings approve`, a call
 * the run does not wait on right now is refused and nothing is recorded (to record a decision ahead of time on
 * purpose, use {@link signal} with {@link approvalSignalName}). The decision is journaled as given: `{ approved:
 * true, note?, args? }`.
 *
 * - `note`: the model receives it with the tool's result (a `text` result gets a last paragraph
 *   `Approved by a human reviewer. Reviewer's note: …`; a `json` result becomes `{ result, review }`).
 * - `args`: corrected arguments; the tool runs with them instead of the model's, and the model is told
 *   (in the same line). Only for a tool listed in `DurableAgent({ editableArgs })`; checked against the
 *   tool's JSON Schema (recorded when the run paused) before anything is recorded.
 *
 * @param runId - the run
 * @param toolCallId - the waiting tool call's id (`dumplings runs` lists them)
 * @param options - `journal`, `wake`, optional `note` (string), `args` (object); `reason`: the deprecated name of
 *   `note`
 * @throws {ApprovalConflictError} (a `SignalConflictError`) when the call was already approved or rejected:
 *   says which
 * @throws {ApprovalNotPendingError} when the run does not wait on this call (finished, cancelled, busy, or
 *   waiting on another one: the message names it); nothing was recorded
 * @throws {InvalidOptionError} (`option: "args"`) when the tool takes no corrected arguments or they do not
 *   match its schema; (`note`) when the note is not a string; nothing was recorded
 * @throws {RunNotFoundError}
 * @example
 * await approve("agent-1", "call_abc", { journal, note: "max 40 for this customer", args: { amount: 40 } });
 */
export async function approve(runId: string, toolCallId: string, options: ApproveOptions): Promise<SignalResult> {
  checkOptions("approve", options, APPROVE_OPTIONS);
  assertJournalOption("approve", options?.journal, "approve(runId, toolCallId, { journal })");
  const { journal, wake, ...said } = options;
  const value = await decisionValue(journal, runId, toolCallId, { approved: true, ...said }, "approve");
  return decide(runId, toolCallId, value, { journal, ...(wake ? { wake } : {}) });
}

/** Records a decision; a second one is an {@link ApprovalConflictError} saying what the first was. */
async function decide(
  runId: string,
  toolCallId: string,
  decision: JsonObject,
  options: SignalOptions,
): Promise<SignalResult> {
  const name = approvalSignalName(toolCallId);
  try {
    return await signal(runId, name, decision, options);
  } catch (error) {
    return rethrowDecision(options.journal, runId, name, error);
  }
}

/**
 * Rejects a tool call a durable agent waits on: the tool does not run and the model receives a refusal (an
 * `execution-denied` tool result whose reason is the note, or, without one,
 * `"rejected by a human reviewer"`).
 *
 * @param runId - the run
 * @param toolCallId - the waiting tool call's id
 * @param options - `journal`, `wake`, optional `note` (why; `reason` is its deprecated name)
 * @throws {ApprovalConflictError} (a `SignalConflictError`) when the call was already approved or rejected:
 *   says which
 * @throws {ApprovalNotPendingError} when the run does not wait on this call (as {@link approve}); nothing was
 *   recorded
 * @throws {InvalidOptionError} when the note is not a string
 * @throws {RunNotFoundError}
 * @example
 * await reject("agent-1", "call_abc", { journal, note: "refunds over 100 need a manager" });
 */
export async function reject(runId: string, toolCallId: string, options: RejectOptions): Promise<SignalResult> {
  checkOptions("reject", options, REJECT_OPTIONS);
  assertJournalOption("reject", options?.journal, "reject(runId, toolCallId, { journal, note })");
  const { journal, wake, ...said } = options;
  const value = await decisionValue(journal, runId, toolCallId, { approved: false, ...said }, "reject");
  return decide(runId, toolCallId, value, { journal, ...(wake ? { wake } : {}) });
}
