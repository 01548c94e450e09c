/**
 * Why a run stopped when an operator cancelled it: the one reading of a
 * cancellation, shared by the step context (`context.ts`: a refused write of a
 * cancelled run), the lease (`lease.ts`: a lost lease) and `runDurable`.
 *
 * @module
 */
import { RunCancelledError } from "./errors.js";
import type { Journal } from "./journal.js";

/**
 * @internal The {@link RunCancelledError} of a cancelled run (with who and why, from its
 * `run_cancelled` event), or undefined when the run is not cancelled.
 */
export async function cancellationOf(journal: Journal, runId: string): Promise<RunCancelledError | undefined> {
  const run = await journal.getRun(runId);
  if (run?.status !== "cancelled") return undefined;
  const events = await journal.readEvents(runId).catch(() => []);
  const event = events.filter((e) => e.type === "run_cancelled").pop();
  return new RunCancelledError(runId, event?.by, event?.detail ?? run.error?.message);
}
