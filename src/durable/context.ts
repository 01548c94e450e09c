/**
 * Durable primitives used inside a run: {@link step}, {@link defineStep},
 * {@link sleep} and {@link waitForSignal}. The current run is found through
 * `AsyncLocalStorage`, so workflow code is ordinary async code.
 *
 * Replay (after Temporal's and Inngest's "memoised steps"): the n-th durable
 * call of a run looks up journal record n. A completed record returns its
 * recorded JSON without calling the body; a different name or input hash is a
 * {@link ReplayMismatchError}; a record that was started but never finished
 * (the process died) runs the body again with the next attempt number — the
 * body is at-least-once, the recorded result exactly-once.
 *
 * @module
 */
import { AsyncLocalStorage } from "node:async_hooks";
import type { z } from "zod";
import { DumplingsError, NonJsonValueError } from "../core/errors.js";
import { assertJson, type JsonValue } from "../core/json.js";
import {
  NoRunContextError,
  ReplayMismatchError,
  RunWaitingError,
  StaleFencingTokenError,
  StepFailedError,
} from "./errors.js";
import { hashInput, type Journal, recordError, type StepRecord } from "./journal.js";
import type { RunEventStream } from "./stream.js";

/** Internal state of one executing run (one per {@link runDurable} call). */
export interface RunContext {
  readonly runId: string;
  readonly journal: Journal;
  /** Fencing token of this executor's lease. */
  readonly fencingToken: number;
  /** Journal records loaded at start, updated as steps complete. */
  readonly records: StepRecord[];
  /** Next step seq to hand out. */
  nextSeq: number;
  /** Side channel for tokens and progress, when configured. */
  readonly stream: RunEventStream | undefined;
  /** Timers shorter than this (ms) are slept in-process instead of suspending the run. */
  readonly inlineSleepMaxMs: number;
  /** Aborted when the lease is lost (another executor took the run). */
  readonly abortSignal: AbortSignal;
  /** Serialises journal writes so seqs are inserted in order even for parallel steps. */
  writeChain: Promise<unknown>;
}

interface Scope {
  ctx: RunContext;
  /** Name of the step whose body is executing (steps cannot nest). */
  inStep?: string;
  /** The executing step, inside a body. */
  step?: StepInfo;
}

/** The step whose body is executing (see {@link currentStep}). */
export interface StepInfo {
  runId: string;
  seq: number;
  name: string;
  /** 1-based attempt number (> 1 after a failure or a crash). */
  attempt: number;
  /**
   * `<runId>:<seq>`: the same on every attempt and every replay of this step, different for any
   * other step. Pass it to the external system (an `Idempotency-Key` header, a unique column) or
   * to the workflow layer's `IdempotencyGuard` so an attempt re-run after a crash has no second effect.
   */
  idempotencyKey: string;
}

/**
 * Inside a step body: the step being executed, with its idempotency key.
 *
 * The body of a step is at-least-once (a crash after the effect but before the
 * completion record re-runs it); its recorded result is exactly-once. For an
 * external effect that must happen exactly once, give the external system the
 * step's `idempotencyKey` (for example Stripe's `Idempotency-Key` header), or
 * wrap the call in `IdempotencyGuard.run(key, fn)` from `dumplings-ai`'s
 * workflow layer, which records the effect under that key and asks a
 * `reconcile` function when an attempt's outcome is unknown.
 *
 * @returns the step, or undefined outside a step body
 * @example
 * await step("charge", async () => {
 *   const { idempotencyKey } = currentStep()!;
 *   return payments.charge({ amount: 42, idempotencyKey });
 * });
 */
export function currentStep(): StepInfo | undefined {
  return storage.getStore()?.step;
}

const storage = new AsyncLocalStorage<Scope>();

/** @internal Runs `fn` with `ctx` as the current run. */
export function withRunContext<T>(ctx: RunContext, fn: () => Promise<T>): Promise<T> {
  return storage.run({ ctx }, fn);
}

function requireScope(what: string): Scope {
  const scope = storage.getStore();
  if (!scope) throw new NoRunContextError(what);
  if (scope.inStep !== undefined) {
    throw new DumplingsError(
      "NESTED_STEP",
      `[dumplings:durable] ${what} was called inside the body of step "${scope.inStep}"; durable calls cannot nest (call them from the workflow instead)`,
    );
  }
  return scope;
}

/**
 * The run executing the caller, or undefined outside a run.
 *
 * @returns `{ runId, fencingToken, abortSignal, emit }`; `emit(data)` appends a JSON event to the
 *   run's side-channel stream (no-op without a stream). Events never drive control flow.
 */
export function currentRun():
  | { runId: string; fencingToken: number; abortSignal: AbortSignal; emit(data: JsonValue): Promise<void> }
  | undefined {
  const scope = storage.getStore();
  if (!scope) return undefined;
  const { ctx } = scope;
  return {
    runId: ctx.runId,
    fencingToken: ctx.fencingToken,
    abortSignal: ctx.abortSignal,
    async emit(data: JsonValue) {
      if (ctx.stream) await ctx.stream.append(ctx.runId, data);
    },
  };
}

function write(ctx: RunContext, record: StepRecord): Promise<void> {
  if (ctx.abortSignal.aborted) {
    const reason = ctx.abortSignal.reason;
    return Promise.reject(
      reason instanceof StaleFencingTokenError ? reason : new StaleFencingTokenError(ctx.runId, ctx.fencingToken, -1),
    );
  }
  const p = ctx.writeChain.then(() => ctx.journal.writeStep(ctx.fencingToken, record));
  ctx.writeChain = p.catch(() => undefined);
  return p.then(() => {
    ctx.records[record.seq] = record;
  });
}

function matchOrThrow(ctx: RunContext, seq: number, name: string, inputHash: string): StepRecord | undefined {
  const rec = ctx.records[seq];
  if (rec && (rec.name !== name || rec.inputHash !== inputHash)) {
    throw new ReplayMismatchError(ctx.runId, seq, { name: rec.name, inputHash: rec.inputHash }, { name, inputHash });
  }
  return rec;
}

const delay = (ms: number, signal?: AbortSignal) =>
  new Promise<void>((resolve) => {
    const t = setTimeout(resolve, ms);
    signal?.addEventListener("abort", () => {
      clearTimeout(t);
      resolve();
    });
  });

/** Retry policy of a step. */
export interface RetryPolicy {
  /** Attempts in total (1 = no retry). @default 1 */
  maxAttempts?: number;
  /** Delay (ms) before the 2nd attempt; doubled before each later one. @default 100 */
  backoffMs?: number;
  /** Upper bound of one delay (ms). @default 30000 */
  maxBackoffMs?: number;
}

/** Options of {@link step}. */
export interface StepOptions<T> {
  /** The step's JSON input: hashed into the record so replay detects a changed call, and passed to `fn`. @default null */
  input?: JsonValue;
  /** Retries of the body with exponential backoff, each attempt recorded. */
  retry?: RetryPolicy;
  /** zod schema validating the output, on first execution and on replay. */
  schema?: z.ZodType<T>;
}

/**
 * Runs `fn` as durable step number n of the current run, or returns the output
 * journal record n holds.
 *
 * The output must be JSON (returning `undefined` records `null`); the value
 * returned is always the JSON copy, so the first execution and every replay
 * see the same value.
 *
 * @param name - step name (recorded; replay compares it)
 * @param fn - the body; receives `input` (default `null`) and runs at least once per completed step
 * @param options - `input` (JSON, hashed), `retry: { maxAttempts, backoffMs, maxBackoffMs }`, `schema` (zod)
 * @returns the step's output (JSON)
 * @throws {ReplayMismatchError} when record n has another name or input hash
 * @throws {StepFailedError} when every attempt failed (also on replay of a failed step)
 * @throws {NonJsonValueError} wrapped in StepFailedError when the output is not JSON
 * @throws {StaleFencingTokenError} when another executor took the run over
 * @throws {NoRunContextError} outside {@link runDurable}
 * @example
 * const user = await step("load-user", () => db.users.get(id), { input: { id }, retry: { maxAttempts: 3, backoffMs: 200 } });
 */
export async function step<T = JsonValue>(
  name: string,
  fn: (input: JsonValue) => T | Promise<T>,
  options: StepOptions<T> = {},
): Promise<T> {
  const { ctx } = requireScope(`step("${name}")`);
  const input = options.input ?? null;
  const inputHash = hashInput(input, `step "${name}" input`);
  const seq = ctx.nextSeq++;
  const rec = matchOrThrow(ctx, seq, name, inputHash);
  const parse = (v: JsonValue): T => (options.schema ? options.schema.parse(v) : (v as T));
  if (rec?.status === "completed") return parse(rec.output ?? null);
  if (rec?.status === "failed") {
    throw new StepFailedError(ctx.runId, seq, name, rec.attempt, rec.error ?? { name: "Error", message: "failed" });
  }
  const maxAttempts = Math.max(1, options.retry?.maxAttempts ?? 1);
  const backoffMs = options.retry?.backoffMs ?? 100;
  const maxBackoffMs = options.retry?.maxBackoffMs ?? 30_000;
  let attempt = (rec?.attempt ?? 0) + 1;
  let failures = 0;
  let lastError = rec?.error;
  for (;;) {
    const started: StepRecord = {
      runId: ctx.runId,
      seq,
      name,
      inputHash,
      status: "started",
      attempt,
      startedAt: Date.now(),
      fencingToken: ctx.fencingToken,
      ...(lastError ? { error: lastError } : {}),
    };
    await write(ctx, started);
    let output: JsonValue;
    let value: T;
    try {
      const info: StepInfo = { runId: ctx.runId, seq, name, attempt, idempotencyKey: `${ctx.runId}:${seq}` };
      const raw = await storage.run({ ctx, inStep: name, step: info }, () => Promise.resolve(fn(input)));
      const out = raw === undefined ? null : raw;
      assertJson(out, `step "${name}" output`);
      output = JSON.parse(JSON.stringify(out)) as JsonValue;
      value = parse(output);
    } catch (error) {
      if (error instanceof StaleFencingTokenError || ctx.abortSignal.aborted) throw error;
      failures++;
      lastError = recordError(error);
      const retryable = !(error instanceof NonJsonValueError) && failures < maxAttempts;
      if (!retryable) {
        await write(ctx, { ...started, status: "failed", error: lastError, finishedAt: Date.now() });
        throw new StepFailedError(ctx.runId, seq, name, attempt, lastError, error);
      }
      await delay(Math.min(maxBackoffMs, backoffMs * 2 ** (failures - 1)), ctx.abortSignal);
      attempt++;
      continue;
    }
    const { error: _dropped, ...done } = started;
    await write(ctx, { ...done, status: "completed", output, finishedAt: Date.now() });
    return value;
  }
}

/**
 * Declares a reusable step: a function of one JSON input whose calls are durable steps.
 *
 * @param name - step name
 * @param fn - body, called with the input (at least once per completed step)
 * @param options - `retry`, `schema` (see {@link step})
 * @returns `(input) => Promise<output>`, usable only inside a run
 * @example
 * const sendEmail = defineStep("send-email", async (msg: { to: string }) => mailer.send(msg));
 * await sendEmail({ to: "a@example.com" });
 */
export function defineStep<I extends JsonValue, T = JsonValue>(
  name: string,
  fn: (input: I) => T | Promise<T>,
  options: Omit<StepOptions<T>, "input"> = {},
): (input: I) => Promise<T> {
  return (input: I) => step(name, (i) => fn(i as I), { ...options, input });
}

/** Name of the step record a signal wait uses: `signal:<name>`. */
export const signalStepName = (name: string) => `signal:${name}`;

/**
 * Waits durably for the signal `name` (sent by {@link signal} from any
 * process). When it has not arrived, the run is checkpointed as `waiting` and
 * unwound with {@link RunWaitingError}; the process may exit. When it arrives,
 * the run is resumed and this call returns the signal's value, recorded in the
 * journal so replays return the same value.
 *
 * @param name - signal name, e.g. `approval:call_1`
 * @returns the signal's JSON value
 * @throws {RunWaitingError} to suspend the run (do not catch it)
 * @throws {ReplayMismatchError} @throws {NoRunContextError}
 * @example
 * const decision = await waitForSignal("manager-approval");
 */
export async function waitForSignal<T = JsonValue>(name: string): Promise<T> {
  const { ctx } = requireScope(`waitForSignal("${name}")`);
  const stepName = signalStepName(name);
  const inputHash = hashInput(null);
  const seq = ctx.nextSeq++;
  const rec = matchOrThrow(ctx, seq, stepName, inputHash);
  if (rec?.status === "completed") return rec.output as T;
  const base: StepRecord = {
    runId: ctx.runId,
    seq,
    name: stepName,
    inputHash,
    status: "waiting",
    attempt: 1,
    startedAt: rec?.startedAt ?? Date.now(),
    fencingToken: ctx.fencingToken,
    output: { signal: name },
  };
  const complete = async (value: JsonValue) => {
    await write(ctx, { ...base, status: "completed", output: value, finishedAt: Date.now() });
    return value as T;
  };
  const arrived = await ctx.journal.getSignal(ctx.runId, name);
  if (arrived) return complete(arrived.value);
  if (rec?.status !== "waiting") await write(ctx, { ...base, finishedAt: Date.now() });
  const suspended = await ctx.journal.updateRun(ctx.fencingToken, ctx.runId, { status: "waiting", waitingFor: name });
  if (!suspended.ok) {
    // the signal arrived between the read and the suspension: continue without suspending
    return complete(suspended.signal.value);
  }
  throw new RunWaitingError(ctx.runId, { kind: "signal", name });
}

/**
 * A durable timer: the run continues no earlier than `ms` after the first
 * time this call was reached, across restarts. Short remaining times (up to
 * the run's `inlineSleepMaxMs`) are slept in-process; longer ones checkpoint
 * the run as `waiting` with `wakeAt` (a worker re-enqueues it with that delay).
 *
 * @param name - timer name (recorded as step `sleep:<name>`)
 * @param ms - duration in milliseconds
 * @throws {RunWaitingError} to suspend the run (do not catch it)
 * @example
 * await sleep("cool-down", 60 * 60 * 1000);
 */
export async function sleep(name: string, ms: number): Promise<void> {
  const { ctx } = requireScope(`sleep("${name}")`);
  if (!Number.isFinite(ms) || ms < 0) {
    throw new DumplingsError("INVALID_OPTION", `sleep("${name}") needs a finite, non-negative duration in ms`);
  }
  const stepName = `sleep:${name}`;
  const inputHash = hashInput({ ms });
  const seq = ctx.nextSeq++;
  const rec = matchOrThrow(ctx, seq, stepName, inputHash);
  if (rec?.status === "completed") return;
  const recordedWake = (rec?.output as { wakeAt?: number } | undefined)?.wakeAt;
  const wakeAt = typeof recordedWake === "number" ? recordedWake : Date.now() + ms;
  const base: StepRecord = {
    runId: ctx.runId,
    seq,
    name: stepName,
    inputHash,
    status: "waiting",
    attempt: 1,
    startedAt: rec?.startedAt ?? Date.now(),
    fencingToken: ctx.fencingToken,
    output: { wakeAt },
  };
  if (rec?.status !== "waiting") await write(ctx, base);
  const remaining = wakeAt - Date.now();
  if (remaining > ctx.inlineSleepMaxMs) {
    await ctx.journal.updateRun(ctx.fencingToken, ctx.runId, { status: "waiting", wakeAt });
    throw new RunWaitingError(ctx.runId, { kind: "timer", name, wakeAt });
  }
  if (remaining > 0) await delay(remaining, ctx.abortSignal);
  await write(ctx, { ...base, status: "completed", finishedAt: Date.now() });
}
