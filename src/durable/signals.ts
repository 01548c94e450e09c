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
 * unrelated signal never re-dispatches a running step (case PB-21).
 *
 * @module
 */
import type { JsonValue } from "../core/json.js";
import { checkOptions, optionKeys } from "../core/options.js";
import { approvalSignalName, assertAwaitsApproval, rethrowDecision } from "./approvals.js";
import { assertJournalOption, type Journal, type RunRecord } from "./journal.js";

export { approvalSignalName } from "./approvals.js";

/** The keys of {@link SignalOptions}: any other is an `InvalidOptionError`. */
const SIGNAL_OPTIONS = optionKeys<SignalOptions>({ journal: true, wake: true });
/** The keys of `approve`/`reject` options: {@link SignalOptions} and `reason`. */
const DECISION_OPTIONS = optionKeys<SignalOptions & { reason?: string }>({ journal: true, wake: true, reason: true });

/** The options `signal` takes, from those of `approve`/`reject`. */
function withoutReason({ reason: _reason, ...options }: SignalOptions & { reason?: string }): SignalOptions {
  return options;
}

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
 * @param runId - the run
 * @param name - signal name, e.g. `approval:call_1`
 * @param value - JSON value returned by the run's `waitForSignal(name)`
 * @param options - `journal`, optional `wake(runId)`
 * @returns `{ run, wakes }`
 * @throws {SignalConflictError} when this signal was already sent (exactly one is taken)
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
  const run = await options.journal.sendSignal(runId, name, value);
  const wakes = run.status === "waiting" && run.waitingFor === name;
  if (wakes && options.wake) await options.wake(runId);
  return { run, wakes };
}

/** Value of an approval signal. */
export interface ApprovalDecision {
  approved: boolean;
  /** Why (sent to the model on a rejection). */
  reason?: string;
}

/**
 * Approves a tool call a durable agent waits on. As `dumplings approve`, a call the run does not wait on right
 * now is refused and nothing is recorded (to record a decision ahead of time on purpose, use {@link signal}
 * with {@link approvalSignalName}).
 *
 * @param runId - the run
 * @param toolCallId - the waiting tool call's id (`dumplings runs` lists them)
 * @param options - `journal`, `wake`, optional `reason`
 * @throws {ApprovalConflictError} (a `SignalConflictError`) when the call was already approved or rejected:
 *   says which
 * @throws {ApprovalNotPendingError} when the run does not wait on this call (finished, busy, or waiting on
 *   another one: the message names it); nothing was recorded
 * @throws {RunNotFoundError}
 * @example
 * await approve("agent-1", "call_abc", { journal });
 */
export async function approve(
  runId: string,
  toolCallId: string,
  options: SignalOptions & { reason?: string },
): Promise<SignalResult> {
  checkOptions("approve", options, DECISION_OPTIONS);
  assertJournalOption("approve", options?.journal, "approve(runId, toolCallId, { journal })");
  await assertAwaitsApproval(options.journal, runId, toolCallId, "approve");
  const decision: ApprovalDecision = { approved: true, ...(options.reason ? { reason: options.reason } : {}) };
  return decide(runId, toolCallId, { ...decision }, options);
}

/** Records a decision; a second one is an {@link ApprovalConflictError} saying what the first was. */
async function decide(
  runId: string,
  toolCallId: string,
  decision: { approved: boolean; reason?: string },
  options: SignalOptions & { reason?: string },
): Promise<SignalResult> {
  const name = approvalSignalName(toolCallId);
  try {
    return await signal(runId, name, decision, withoutReason(options));
  } catch (error) {
    return rethrowDecision(options.journal, runId, name, error);
  }
}

/**
 * Rejects a tool call a durable agent waits on: the tool does not run and the
 * model receives a refusal (`execution-denied` with the reason).
 *
 * @param runId - the run
 * @param toolCallId - the waiting tool call's id
 * @param options - `journal`, `wake`, optional `reason`
 * @throws {ApprovalConflictError} (a `SignalConflictError`) when the call was already approved or rejected:
 *   says which
 * @throws {ApprovalNotPendingError} when the run does not wait on this call (as {@link approve}); nothing was
 *   recorded
 * @throws {RunNotFoundError}
 */
export async function reject(
  runId: string,
  toolCallId: string,
  options: SignalOptions & { reason?: string },
): Promise<SignalResult> {
  checkOptions("reject", options, DECISION_OPTIONS);
  assertJournalOption("reject", options?.journal, "reject(runId, toolCallId, { journal, reason })");
  await assertAwaitsApproval(options.journal, runId, toolCallId, "reject");
  return decide(
    runId,
    toolCallId,
    { approved: false, reason: options.reason ?? "rejected by a human reviewer" },
    options,
  );
}
