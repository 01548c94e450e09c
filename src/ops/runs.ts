/**
 * Durable runs as the operator tools (the `dumplings` command and the web
 * inspector) show and act on them: what a run waits for, its audit notes, who
 * an operator is, and sending a decision or signal (re-enqueuing the run on a
 * BullMQ queue when asked). The command and the inspector call the same
 * functions, so both say and do the same.
 *
 * @module
 */
import { hostname, userInfo } from "node:os";
import type { JsonValue } from "../core/json.js";
import { type ApprovalView, describeCall, rethrowDecision } from "../durable/approvals.js";
import { CHECKPOINT_STEP } from "../durable/checkpoints/journal-store.js";
import { type ApprovalConflictError, RunNotFoundError } from "../durable/errors.js";
import { ENDED_RUN_STATUSES, type Journal, type JournalEvent, type RunRecord } from "../durable/journal.js";
import { type SignalResult, signal } from "../durable/signals.js";
import { UsageError } from "./errors.js";
import { when } from "./format.js";

/**
 * What a run waits for, in words: `approval of call_1 (dumplings approve R call_1)`, `signal "go"`, `timer until …`.
 * With the run's `approvals` (`pendingApprovals` of `durable/approvals.ts`), an approval names the tool and its arguments,
 * and a decision already recorded reads `approved call_1 …, pending resume`.
 *
 * @param run - the run
 * @param approvals - its approvals from `pendingApprovals` (optional: without them, no tool is named)
 * @returns one line, empty for a run that waits for nothing
 * @example
 * describeWait(run, pendingApprovals(run, steps, signals))
 * // 'approval of call_7: refund_payment {"orderId":"A-1009"} (dumplings approve run-c call_7)'
 */
export function describeWait(run: RunRecord, approvals?: readonly ApprovalView[]): string {
  if (run.status === "blocked")
    return `blocked: ${run.error?.message ?? "no reason recorded"} (fix, then dumplings retry ${run.runId})`;
  if (run.status === "cancelled") return run.error ? `cancelled: ${run.error.message}` : "cancelled";
  if (run.status === "failed") {
    return `failed: ${run.error?.message ?? "no reason recorded"} (dumplings retry ${run.runId} runs it again)`;
  }
  if (run.status !== "waiting") return "";
  if (run.waitingFor?.startsWith("approval:")) {
    const id = run.waitingFor.slice("approval:".length);
    const a = approvals?.find((x) => x.toolCallId === id);
    if (a?.decision) {
      const call = a.toolName !== undefined ? `: ${describeCall(a, 40)}` : "";
      return `${a.decision.approved ? "approved" : "rejected"} ${id}${call}, pending resume (its worker, runDurable, or --queue)`;
    }
    const what = a?.toolName !== undefined ? `: ${describeCall(a, 40)}` : "";
    return `approval of ${id}${what} (dumplings approve ${run.runId} ${id})`;
  }
  if (run.waitingFor !== undefined) return `signal ${JSON.stringify(run.waitingFor)}`;
  if (run.wakeAt !== undefined) return `timer until ${when(run.wakeAt)}`;
  return "";
}

/**
 * Renders what an operator needs beside the journal: drift (steps whose input
 * changed since they were recorded, the recorded result being used) and
 * operator actions, from the run's audit events.
 *
 * @param events - the run's events
 * @returns lines of text (empty when there is nothing to say)
 */
export function renderNotes(events: JournalEvent[]): string[] {
  const lines: string[] = [];
  for (const e of events) {
    if (e.type === "step_drift")
      lines.push(`drift at step ${e.seq} (${e.name ?? "?"}): ${e.detail ?? "input changed"}`);
    else if (e.type === "run_blocked") lines.push(`blocked: ${e.detail ?? "no reason recorded"}`);
    else if (e.type === "run_error")
      lines.push(`worker error at ${when(e.at)} (job attempt ${e.attempt ?? "?"}): ${e.detail ?? "?"}`);
    else if (e.type === "run_cancelled" || e.type === "run_reset" || e.type === "run_retried") {
      const what = e.type === "run_reset" ? `reset to step ${e.seq}` : e.type.slice("run_".length);
      lines.push(`${what} by ${e.by ?? "?"} at ${when(e.at)}${e.detail ? `: ${e.detail}` : ""}`);
    }
  }
  return lines;
}

/** Who an operator action is recorded as: `user@host`. */
export function operatorName(): string {
  let user = "unknown";
  try {
    user = userInfo().username;
  } catch {
    // no passwd entry (containers): keep "unknown"
  }
  return `${user}@${hostname()}`;
}

/**
 * Sends a signal the way `dumplings approve/reject/signal` do, re-enqueuing
 * the run on `queue` when it was waiting for it.
 *
 * @param journal - the journal
 * @param runId - the run
 * @param name - signal name
 * @param value - JSON value
 * @param queue - BullMQ queue name (needs Redis at `REDIS_URL`), optional
 * @returns the signal result
 * @throws {SignalConflictError} when the signal was already sent ({@link ApprovalConflictError}, saying which
 *   decision was first, for an approval)
 * @throws {RunStateError} when the run has ended (completed, failed, cancelled); nothing was recorded
 * @throws {InvalidOptionError} when an approval's value is not `{ approved, note?, args? }` (see `signal`)
 * @throws {RunNotFoundError}
 */
export async function sendDecision(
  journal: Journal,
  runId: string,
  name: string,
  value: JsonValue,
  queue?: string,
): Promise<SignalResult & { queued: boolean }> {
  // A finished run will never wait again: the journal refuses a signal to it (RunStateError), atomically.
  try {
    // A workflow graph's nodes live in its program: no DurableWorker can run it, so it is never queued (the
    // next runOrResume of its runner continues it with the answer).
    if (!queue || (await isGraphRun(journal, runId))) {
      return { ...(await signal(runId, name, value, { journal })), queued: false };
    }
    const { DurableQueue } = await import("../durable/worker.js");
    const q = new DurableQueue({ journal, queueName: queue });
    try {
      return { ...(await q.signal(runId, name, value)), queued: true };
    } finally {
      await q.close();
    }
  } catch (error) {
    return rethrowDecision(journal, runId, name, error); // a second decision says which was first
  }
}

/** Whether a run is a workflow graph's (its steps are checkpoints): only its program's runner continues it. */
async function isGraphRun(journal: Journal, runId: string): Promise<boolean> {
  return (await journal.readSteps(runId, { namePrefix: CHECKPOINT_STEP, last: 1, outputs: false })).length > 0;
}

/**
 * Puts a run back on a BullMQ queue after an operator made it pending again.
 *
 * @param journal - the journal
 * @param runId - the run
 * @param queue - BullMQ queue name (needs Redis at `REDIS_URL`); none: nothing is done
 * @returns whether the run was queued
 */
export async function requeue(journal: Journal, runId: string, queue: string | undefined): Promise<boolean> {
  if (!queue) return false;
  const { DurableQueue } = await import("../durable/worker.js");
  const q = new DurableQueue({ journal, queueName: queue });
  try {
    await q.wake(runId);
    return true;
  } finally {
    await q.close();
  }
}

/** An operator's action on a run: `cancel` it, `reset` it to a step, or `retry` it. */
export type OperatorAction = "cancel" | "reset" | "retry";

/**
 * Cancels, resets or retries a run, after the checks both operator tools make: the run exists, a cancel
 * is not of an ended run (the journal would leave it as it is), a reset keeps fewer steps than the run has.
 *
 * @param journal - the journal
 * @param runId - the run
 * @param action - what to do
 * @param options - `by` (who acts, recorded), `reason` (a cancel's), `toSeq` (a reset's last kept step, ≥ -1)
 * @returns the run after the action
 * @throws {RunNotFoundError} when the journal holds no such run
 * @throws {UsageError} for a cancel of an ended run, or a reset that would keep every step
 */
export async function operatorAction(
  journal: Journal,
  runId: string,
  action: OperatorAction,
  options: { by: string; reason?: string | undefined; toSeq?: number },
): Promise<RunRecord> {
  const before = await journal.getRun(runId);
  if (!before) throw new RunNotFoundError(runId);
  if (action === "cancel" && ENDED_RUN_STATUSES.has(before.status)) {
    // cancelRun leaves an ended run as it is: say so instead of reporting a cancel.
    throw new UsageError(`run ${JSON.stringify(runId)} is ${before.status}; there is nothing to cancel`);
  }
  if (action === "cancel") return journal.cancelRun(runId, options.by, options.reason);
  if (action === "retry") return journal.retryRun(runId, options.by);
  const toSeq = options.toSeq ?? -1;
  const steps = (await journal.readSteps(runId, { outputs: false })).length;
  if (toSeq >= steps) {
    throw new UsageError(
      `run ${JSON.stringify(runId)} has ${steps} step(s) (0..${steps - 1}); resetting to step ${toSeq} would keep them all`,
    );
  }
  return journal.resetRun(runId, toSeq, options.by);
}
