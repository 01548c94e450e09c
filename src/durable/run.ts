/**
 * Starting and replaying a durable run: {@link runDurable} takes the run's
 * lease (a new fencing token), replays the workflow function against the
 * journal, keeps the lease alive while it runs, and records the outcome:
 * `completed` with the JSON output, `waiting` for a signal or timer (the
 * process may exit), or `failed` with the error.
 *
 * @module
 */
import { randomUUID } from "node:crypto";
import { hostname } from "node:os";
import { DumplingsError } from "../core/errors.js";
import { assertJson, type JsonValue } from "../core/json.js";
import { type RunContext, withRunContext } from "./context.js";
import {
  JournalIntegrityError,
  LeaseHeldError,
  ReplayMismatchError,
  RunWaitingError,
  StaleFencingTokenError,
} from "./errors.js";
import { type Journal, type RecordedError, type RunRecord, recordError } from "./journal.js";
import type { RunEventStream } from "./stream.js";

/** A workflow function: ordinary async code calling durable primitives. */
export type WorkflowFn<I extends JsonValue = JsonValue, O = JsonValue> = (input: I) => Promise<O>;

/** Options of {@link runDurable}. */
export interface RunDurableOptions {
  /** The journal (source of truth). */
  journal: Journal;
  /** Input of a new run (ignored when the run exists: its stored input is used). @default null */
  input?: JsonValue;
  /** Workflow name stored with a new run. @default the function's name, or "workflow" */
  workflow?: string;
  /** Lease owner id. @default `<hostname>:<pid>:<random>` */
  owner?: string;
  /** Lease duration (ms); renewed every third of it while the run executes. @default 30000 */
  leaseTtlMs?: number;
  /**
   * When another live owner holds the lease: wait up to this many ms for it
   * to be released or to expire (`0`: throw {@link LeaseHeldError} at once).
   * @default 2 × leaseTtlMs
   */
  leaseWaitMs?: number;
  /** Side channel for tokens and progress events. */
  stream?: RunEventStream;
  /** Durable timers with at most this much time left (ms) are slept in-process. @default 1000 */
  inlineSleepMaxMs?: number;
}

/** Outcome of {@link runDurable}. */
export type RunResult =
  | { runId: string; status: "completed"; output: JsonValue }
  | { runId: string; status: "failed"; error: RecordedError }
  | {
      runId: string;
      status: "waiting";
      waitingFor: { kind: "signal"; name: string } | { kind: "timer"; name: string; wakeAt: number };
    };

const sleepMs = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A default lease-owner id for this process. */
export function defaultOwner(): string {
  return `${hostname()}:${process.pid}:${randomUUID().slice(0, 8)}`;
}

function finished(run: RunRecord): RunResult | undefined {
  if (run.status === "completed") return { runId: run.runId, status: "completed", output: run.output ?? null };
  if (run.status === "failed") {
    return { runId: run.runId, status: "failed", error: run.error ?? { name: "Error", message: "failed" } };
  }
  return undefined;
}

/**
 * Runs (first time) or resumes (replays) the durable run `runId`.
 *
 * Steps already in the journal return their recorded output without running;
 * execution continues from the first unrecorded step. A finished run returns
 * its recorded outcome without calling `workflowFn`.
 *
 * @param runId - run id (any non-empty string; use a stable id to make starting idempotent)
 * @param workflowFn - the workflow; called with the run's JSON input
 * @param options - `journal` (required), `input`, `workflow` name, `owner`, `leaseTtlMs` (30000),
 *   `leaseWaitMs` (2 × ttl), `stream`, `inlineSleepMaxMs` (1000)
 * @returns `{ status: "completed", output }`, `{ status: "waiting", waitingFor }` or `{ status: "failed", error }`
 * @throws {ReplayMismatchError} when the program diverged from the journal (the run is left as it was)
 * @throws {StaleFencingTokenError} when another executor took the run over while this one ran
 * @throws {LeaseHeldError} when another owner holds the run longer than `leaseWaitMs`
 * @throws {NonJsonValueError} when a new run's input is not JSON
 * @example
 * const result = await runDurable("order-42", async (input) => {
 *   const quote = await step("quote", () => pricing.quote(input), { input });
 *   await waitForSignal("approval");
 *   return step("charge", () => payments.charge(quote), { input: quote });
 * }, { journal: new SqliteJournal({ path: "runs.db" }), input: { sku: "x" } });
 */
export async function runDurable<I extends JsonValue = JsonValue, O = JsonValue>(
  runId: string,
  workflowFn: WorkflowFn<I, O>,
  options: RunDurableOptions,
): Promise<RunResult> {
  if (typeof runId !== "string" || runId.length === 0 || runId.length > 512) {
    throw new DumplingsError("INVALID_RUN_ID", `invalid run id ${JSON.stringify(runId)}`);
  }
  const { journal } = options;
  const ttl = options.leaseTtlMs ?? 30_000;
  const owner = options.owner ?? defaultOwner();
  const waitBudget = options.leaseWaitMs ?? 2 * ttl;
  const input = options.input ?? null;
  assertJson(input, "run input");
  const { run } = await journal.createRun({
    runId,
    workflow: options.workflow ?? (workflowFn.name || "workflow"),
    input,
  });
  const done = finished(run);
  if (done) return done;

  // take the lease (waiting for a live holder to release it or to expire)
  const deadline = Date.now() + waitBudget;
  let token: number;
  for (;;) {
    const lease = await journal.acquireLease(runId, owner, ttl);
    if (lease.acquired) {
      token = lease.fencingToken;
      break;
    }
    const now = await journal.getRun(runId);
    const over = now && finished(now);
    if (over) return over;
    if (Date.now() >= deadline) throw new LeaseHeldError(runId, lease.owner, lease.expiresAt);
    await sleepMs(Math.max(20, Math.min(250, lease.expiresAt - Date.now() + 5, deadline - Date.now())));
  }

  const abort = new AbortController();
  const heartbeat = setInterval(
    () => {
      journal.renewLease(runId, token, ttl).catch((error: unknown) => {
        if (error instanceof StaleFencingTokenError) abort.abort(error);
      });
    },
    Math.max(10, Math.floor(ttl / 3)),
  );
  heartbeat.unref();
  try {
    const current = await journal.getRun(runId);
    const over = current && finished(current);
    if (over) return over;
    await journal.updateRun(token, runId, { status: "running" });
    const stored = current?.input ?? input;
    const ctx: RunContext = {
      runId,
      journal,
      fencingToken: token,
      records: await journal.readSteps(runId),
      nextSeq: 0,
      stream: options.stream,
      inlineSleepMaxMs: options.inlineSleepMaxMs ?? 1000,
      abortSignal: abort.signal,
      writeChain: Promise.resolve(),
    };
    let output: O;
    try {
      output = await withRunContext(ctx, () => workflowFn(stored as I));
    } catch (error) {
      if (error instanceof RunWaitingError) return { runId, status: "waiting", waitingFor: error.waitingFor };
      if (
        error instanceof ReplayMismatchError ||
        error instanceof StaleFencingTokenError ||
        error instanceof JournalIntegrityError ||
        abort.signal.aborted ||
        (error instanceof DumplingsError && error.code === "BACKEND_ERROR")
      ) {
        throw error; // not the workflow's failure: leave the run resumable
      }
      const recorded = recordError(error);
      await journal.updateRun(token, runId, { status: "failed", error: recorded });
      await options.stream?.append(runId, { type: "run-end", status: "failed" });
      return { runId, status: "failed", error: recorded };
    }
    const value = output === undefined ? null : output;
    assertJson(value, "workflow output");
    await ctx.writeChain;
    await journal.updateRun(token, runId, { status: "completed", output: value });
    await options.stream?.append(runId, { type: "run-end", status: "completed" });
    return { runId, status: "completed", output: JSON.parse(JSON.stringify(value)) as JsonValue };
  } finally {
    clearInterval(heartbeat);
    await journal.releaseLease(runId, token).catch(() => undefined);
  }
}
