/**
 * Durable primitives used inside a run: {@link step}, {@link defineStep},
 * {@link sleep} and {@link waitForSignal}. The current run is found through
 * `AsyncLocalStorage`, so workflow code is ordinary async code.
 *
 * Replay (after Temporal's and Inngest's "memoised steps"): the n-th durable
 * call of a run looks up journal record n, matched by position and name (the
 * name carries the kind: `llm`, `tool:x`, `signal:x`, `sleep:x`, `patch:x`).
 * A completed record returns its recorded JSON without calling the body; a
 * different name is a structural divergence ({@link ReplayMismatchError}: the
 * run is recorded `blocked`); a different input hash is not an error — after a
 * deploy the recorded result stands and a `step_drift` event is recorded; a
 * record that was started but never finished (the process died) runs the body
 * again with the next attempt number, within the step's retry budget — the
 * body is at-least-once, the recorded result exactly-once.
 *
 * Changing a running program on purpose: {@link patched} and
 * {@link deprecatePatch} (after Temporal's patching API).
 *
 * @module
 */
import { AsyncLocalStorage } from "node:async_hooks";
import type { z } from "zod";
import { DumplingsError, NonJsonValueError } from "../core/errors.js";
import { assertJson, type JsonObject, type JsonValue } from "../core/json.js";
import { checkOptions, optionKeys } from "../core/options.js";
import { cancellationOf } from "./cancellation.js";
import {
  NoRunContextError,
  ReplayMismatchError,
  RetryBudgetExhaustedError,
  RunCancelledError,
  RunWaitingError,
  StaleFencingTokenError,
  StepFailedError,
} from "./errors.js";
import {
  hashInput,
  type Journal,
  recordError,
  type StepRecord,
  type WriteStepOptions,
  withOutputJson,
} from "./journal.js";
import type { RunEventStream } from "./stream-contract.js";

/** The keys of {@link StepOptions}: any other is an `InvalidOptionError`. */
const STEP_OPTIONS = optionKeys<StepOptions<unknown>>({ input: true, retry: true, schema: true });
/** The keys of {@link RetryPolicy} (every retry policy reaches `step`): any other is an `InvalidOptionError`. */
const RETRY_OPTIONS = optionKeys<RetryPolicy>({
  maxAttempts: true,
  maxStartedAttempts: true,
  backoffMs: true,
  maxBackoffMs: true,
});
const DEFINE_STEP_OPTIONS = optionKeys<Omit<StepOptions<unknown>, "input">>({ retry: true, schema: true });

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
  /**
   * Aborted when the lease is lost (another executor took the run; reason: a
   * {@link StaleFencingTokenError}) or the run was cancelled (reason: a {@link RunCancelledError}).
   */
  readonly abortSignal: AbortSignal;
  /**
   * Aborted when the executor is shutting down (a closing worker): the step in progress finishes and is
   * recorded, but no durable call starts after it (it throws the signal's reason).
   */
  readonly drainSignal?: AbortSignal;
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
  /**
   * Aborted when the run is cancelled (reason: {@link RunCancelledError}) or this executor lost the
   * run's lease (reason: {@link StaleFencingTokenError}). Pass it to `fetch`, the AI SDK
   * (`abortSignal`), or any cancellable call; the step's result would be refused anyway.
   */
  signal: AbortSignal;
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
 *   const { idempotencyKey, signal } = currentStep()!;
 *   return payments.charge({ amount: 42, idempotencyKey }, { signal });
 * });
 */
export function currentStep(): StepInfo | undefined {
  return storage.getStore()?.step;
}

const storage = new AsyncLocalStorage<Scope>();

/** A `started` record's write: it must survive a crash of this process, and the step's end record syncs it. */
const UNSYNCED: WriteStepOptions = Object.freeze({ sync: false });

/** @internal Runs `fn` with `ctx` as the current run. */
export function withRunContext<T>(ctx: RunContext, fn: () => Promise<T>): Promise<T> {
  return storage.run({ ctx }, fn);
}

/** The current run's scope, outside a step body; `call("name")` names the caller in the errors. */
function requireScope(call: string, name: string): Scope {
  const scope = storage.getStore();
  if (!scope) throw new NoRunContextError(`${call}("${name}")`);
  if (scope.inStep !== undefined) {
    throw new DumplingsError(
      "NESTED_STEP",
      `[dumplings:durable] ${call}("${name}") was called inside the body of step "${scope.inStep}"; durable calls cannot nest (call them from the workflow instead)`,
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
      if (!ctx.stream) return;
      // Tagged with the step and attempt that produced it (and the executor's token), so a reader can
      // drop what an abandoned attempt streamed (see readText in stream.ts).
      const s = scope.step;
      await ctx.stream.append(
        ctx.runId,
        data,
        s ? { seq: s.seq, attempt: s.attempt, fencingToken: ctx.fencingToken } : { fencingToken: ctx.fencingToken },
      );
    },
  };
}

/** Why the run stopped under this executor: the abort's reason (cancelled, or the lease was lost). */
function abortReason(ctx: RunContext): Error {
  const reason: unknown = ctx.abortSignal.reason;
  return reason instanceof RunCancelledError || reason instanceof StaleFencingTokenError
    ? reason
    : new StaleFencingTokenError(ctx.runId, ctx.fencingToken, -1);
}

/** A refused write: a {@link RunCancelledError} when the run was cancelled, else the error itself. */
async function refusal(ctx: RunContext, error: unknown): Promise<never> {
  if (error instanceof StaleFencingTokenError) throw (await cancellationOf(ctx.journal, ctx.runId)) ?? error;
  throw error;
}

/** Records `record` (after the run's earlier writes); `sync: false` only for a `started` record (see {@link WriteStepOptions}). */
function write(ctx: RunContext, record: StepRecord, sync = true): Promise<void> {
  if (ctx.abortSignal.aborted) return Promise.reject(abortReason(ctx));
  const p = ctx.writeChain.then(() =>
    sync ? ctx.journal.writeStep(ctx.fencingToken, record) : ctx.journal.writeStep(ctx.fencingToken, record, UNSYNCED),
  );
  ctx.writeChain = p.catch(() => undefined);
  return p.then(
    () => {
      ctx.records[record.seq] = record;
    },
    (error: unknown) => refusal(ctx, error),
  );
}

/** A step about to start (or replay) in a run that stopped under this executor throws why. */
function assertLive(ctx: RunContext): void {
  if (ctx.abortSignal.aborted) throw abortReason(ctx);
  if (ctx.drainSignal?.aborted) throw ctx.drainSignal.reason;
}

/**
 * The journal record at `seq`, checked against the program: another name is a
 * {@link ReplayMismatchError}; another input hash is drift, recorded as a
 * `step_drift` event (the recorded result stands).
 */
async function replayed(
  ctx: RunContext,
  seq: number,
  name: string,
  inputHash: string,
): Promise<StepRecord | undefined> {
  const rec = recorded(ctx, seq, name, inputHash);
  if (rec && rec.inputHash !== inputHash) await drifted(ctx, rec, seq, name, inputHash);
  return rec;
}

/**
 * The record at `seq` checked by name (see {@link replayed}), without a promise: the drift, if any, is the
 * caller's to record with {@link drifted} (a replayed step's common case has none, and no await).
 */
function recorded(ctx: RunContext, seq: number, name: string, inputHash: string): StepRecord | undefined {
  const rec = ctx.records[seq];
  if (!rec) return undefined;
  if (rec.name !== name) {
    throw new ReplayMismatchError(ctx.runId, seq, { name: rec.name, inputHash: rec.inputHash }, { name, inputHash });
  }
  return rec;
}

/** Records the `step_drift` event of a replayed record whose input hash differs from the program's. */
async function drifted(ctx: RunContext, rec: StepRecord, seq: number, name: string, inputHash: string): Promise<void> {
  const outcome =
    rec.status === "completed"
      ? "the recorded result was used"
      : rec.status === "failed"
        ? "the recorded failure stands"
        : "the step continues with the new input";
  await ctx.journal.appendEvent(ctx.runId, {
    type: "step_drift",
    seq,
    name,
    detail: `input changed: ${rec.inputHash.slice(0, 12)} → ${inputHash.slice(0, 12)}; ${outcome}`,
  });
}

const delay = (ms: number, signal?: AbortSignal) =>
  new Promise<void>((resolve) => {
    const t = setTimeout(resolve, ms);
    signal?.addEventListener("abort", () => {
      clearTimeout(t);
      resolve();
    });
  });

/**
 * Retry policy of a step. Budgets count every *started* attempt, read from
 * the journal, so they hold across process deaths and workers:
 *
 * - an attempt that throws is retried while fewer than `maxAttempts`
 *   attempts have started (interrupted ones included);
 * - an attempt interrupted by a crash (its process died: OOM, SIGKILL, a
 *   deploy; or it lost its lease) is run again on resume — the body is
 *   at-least-once — while fewer than `maxStartedAttempts` attempts have
 *   started; then the step and the run fail with a
 *   {@link RetryBudgetExhaustedError} instead of crashing for ever. With
 *   `maxAttempts: 3`, a body that kills its process runs 3 times in all.
 *
 * Delays use "full jitter" (AWS Architecture Blog, "Exponential Backoff And
 * Jitter"): before attempt n+1 the step waits a uniformly random time in
 * `[0, min(maxBackoffMs, backoffMs × 2^(n-1))]` ms.
 *
 * Errors no retry can fix fail the step at once: {@link NonRetryableError},
 * an `AbortError` (or an aborted step signal), validation errors
 * (`NonJsonValueError`, zod errors from `schema`), an error with
 * `isRetryable: false` (AI SDK `APICallError`), and an HTTP-like error whose
 * `status`/`statusCode` is 4xx other than 408, 409 and 429 (see {@link isRetryableError}).
 */
export interface RetryPolicy {
  /** Attempts in total for errors the body throws, counting attempts interrupted by a crash (1 = no retry). @default 1 */
  maxAttempts?: number;
  /**
   * Attempts that may be started in all, however they ended: a step resumed
   * with this many attempts started, the last one interrupted by a crash, fails
   * instead of running again. `1`: a body that must never start twice (an
   * interrupted attempt fails the step). @default max(maxAttempts, 3)
   */
  maxStartedAttempts?: number;
  /** Base delay (ms): the cap of the random delay before the 2nd attempt, doubled before each later one. @default 100 */
  backoffMs?: number;
  /** Upper bound of one delay (ms). @default 30000 */
  maxBackoffMs?: number;
}

/**
 * The delay before the attempt after `attempt` ("full jitter"): uniformly
 * random in `[0, min(maxBackoffMs, backoffMs × 2^(attempt-1))]`.
 *
 * @param policy - the step's retry policy (defaults as in {@link RetryPolicy})
 * @param attempt - the 1-based number of the attempt that just failed
 * @param random - a source of uniform numbers in [0, 1) @default Math.random
 * @returns milliseconds (an integer ≥ 0)
 * @example
 * retryDelayMs({ backoffMs: 100, maxBackoffMs: 1000 }, 3) // somewhere in 0..400
 */
export function retryDelayMs(policy: RetryPolicy, attempt: number, random: () => number = Math.random): number {
  const base = Math.max(0, policy.backoffMs ?? 100);
  const cap = Math.min(Math.max(0, policy.maxBackoffMs ?? 30_000), base * 2 ** Math.max(0, attempt - 1));
  return Math.round(random() * cap);
}

const FATAL_CODES = new Set(["NON_RETRYABLE", "NON_JSON_VALUE", "NESTED_STEP", "RUN_CANCELLED"]);

/** The verdict of one error in a cause chain: true/false, or undefined when it says nothing. */
function verdictOf(e: object): boolean | undefined {
  const { name, code, isRetryable } = e as { name?: unknown; code?: unknown; isRetryable?: unknown };
  if (typeof code === "string" && FATAL_CODES.has(code)) return false;
  if (name === "AbortError" || name === "ZodError") return false;
  if (typeof isRetryable === "boolean") return isRetryable;
  const { status, statusCode } = e as { status?: unknown; statusCode?: unknown };
  const http = typeof statusCode === "number" ? statusCode : typeof status === "number" ? status : undefined;
  if (http !== undefined && http >= 400 && http < 500) return http === 408 || http === 409 || http === 429;
  if (http !== undefined && http >= 500 && http < 600) return true;
  return undefined;
}

/**
 * Whether a step should retry after this error. Walks the error, its AI SDK
 * `lastError` and its `cause` chain; the first error that says something
 * decides:
 * - not retryable: {@link NonRetryableError} (code `NON_RETRYABLE`), an
 *   `AbortError`, `NonJsonValueError`, a `ZodError`, `isRetryable: false`,
 *   an HTTP-like `status`/`statusCode` 4xx other than 408, 409, 429;
 * - retryable: `isRetryable: true`, a 5xx, 408, 409, 429;
 * - anything else is retryable.
 *
 * @param error - anything thrown by a step body
 * @returns false when no retry can help
 * @example
 * isRetryableError(Object.assign(new Error("unauthorized"), { statusCode: 401 })) // false
 * isRetryableError(Object.assign(new Error("slow down"), { status: 429 }))         // true
 */
export function isRetryableError(error: unknown): boolean {
  let e: unknown = error;
  for (let depth = 0; depth < 8 && e !== null && typeof e === "object"; depth++) {
    const verdict = verdictOf(e);
    if (verdict !== undefined) return verdict;
    const next = e as { lastError?: unknown; cause?: unknown };
    e = next.lastError ?? next.cause;
  }
  return true;
}

/**
 * How many of a step's `attempts` started attempts were interrupted (their
 * process died or lost the lease): attempt k was interrupted when attempt k+1
 * started under another fencing token (the last one, about to be replaced by
 * this executor, always was). Read from the `step_started` events.
 */
async function interruptedAttempts(ctx: RunContext, seq: number, attempts: number): Promise<number> {
  const tokens = new Map<number, number | undefined>();
  for (const e of await ctx.journal.readEvents(ctx.runId)) {
    if (e.type !== "step_started" || e.seq !== seq || e.attempt === undefined) continue;
    if (e.attempt === 1) tokens.clear(); // the step was started over (an operator reset or retried it)
    tokens.set(e.attempt, e.fencingToken);
  }
  let interrupted = 1;
  for (let k = 1; k < attempts; k++) {
    const a = tokens.get(k);
    const b = tokens.get(k + 1);
    if (a !== undefined && b !== undefined && a !== b) interrupted++;
  }
  return interrupted;
}

/** The options of a `step` called without any (checked once, shared). */
const NO_STEP_OPTIONS: StepOptions<never> = Object.freeze({});

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
 * A replay whose `input` differs from the recorded one (the program changed
 * under a paused run) returns the recorded output and records a `step_drift`
 * event; only another step name at this position is a divergence.
 *
 * @param name - step name (recorded; replay compares it)
 * @param fn - the body; receives `input` (default `null`) and runs at least once per completed step;
 *   `currentStep()` gives its attempt, idempotency key and abort `signal`
 * @param options - `input` (JSON, hashed), `retry: { maxAttempts, maxStartedAttempts, backoffMs, maxBackoffMs }` (see
 *   {@link RetryPolicy}), `schema` (zod)
 * @returns the step's output (JSON)
 * @throws {ReplayMismatchError} when record n has another name
 * @throws {StepFailedError} when the step failed: every attempt failed, a non-retryable error (see
 *   {@link isRetryableError}), the retry budget spent by interrupted attempts
 *   ({@link RetryBudgetExhaustedError} as its cause), or on replay of a failed step
 * @throws {NonJsonValueError} wrapped in StepFailedError when the output is not JSON
 * @throws {RunCancelledError} when the run was cancelled
 * @throws {StaleFencingTokenError} when another executor took the run over
 * @throws {NoRunContextError} outside {@link runDurable}
 * @example
 * const user = await step("load-user", () => db.users.get(id), { input: { id }, retry: { maxAttempts: 3, backoffMs: 200 } });
 */
export async function step<T = JsonValue>(
  name: string,
  fn: (input: JsonValue) => T | Promise<T>,
  options: StepOptions<T> = NO_STEP_OPTIONS,
): Promise<T> {
  if (options !== NO_STEP_OPTIONS) checkOptions("step", options, STEP_OPTIONS);
  if (options.retry !== undefined) checkOptions(`step "${name}" retry`, options.retry, RETRY_OPTIONS);
  const { ctx } = requireScope("step", name);
  const input = options.input ?? null;
  const inputHash = input === null ? hashInput(null) : hashInput(input, `step "${name}" input`);
  assertLive(ctx);
  const seq = ctx.nextSeq++;
  const rec = recorded(ctx, seq, name, inputHash);
  if (rec && rec.inputHash !== inputHash) await drifted(ctx, rec, seq, name, inputHash);
  // (No closure is made per call here: a step is called thousands of times in a replay.)
  const { schema } = options;
  if (rec?.status === "completed") {
    // A replayed step (the common case of a resume): its recorded output, no other work.
    const output = rec.output ?? null;
    return schema ? schema.parse(output) : (output as T);
  }
  if (rec?.status === "failed") {
    throw new StepFailedError(ctx.runId, seq, name, rec.attempt, rec.error ?? { name: "Error", message: "failed" });
  }
  const retry = options.retry ?? {};
  const maxAttempts = Math.max(1, Math.floor(retry.maxAttempts ?? 1));
  const maxStarted = Math.max(1, Math.floor(retry.maxStartedAttempts ?? Math.max(maxAttempts, 3)));
  let attempt = (rec?.attempt ?? 0) + 1;
  let lastError = rec?.error;
  if (rec && attempt > maxStarted) {
    // every allowed attempt was started and the last one never finished: the budget is spent
    const interrupted = await interruptedAttempts(ctx, seq, rec.attempt);
    const spent = new RetryBudgetExhaustedError(ctx.runId, seq, name, rec.attempt, maxStarted, interrupted, lastError);
    const recorded = recordError(spent);
    await write(ctx, {
      runId: ctx.runId,
      seq,
      name,
      inputHash,
      status: "failed",
      attempt: rec.attempt,
      startedAt: rec.startedAt,
      finishedAt: Date.now(),
      fencingToken: ctx.fencingToken,
      error: recorded,
    });
    throw new StepFailedError(ctx.runId, seq, name, rec.attempt, recorded, spent);
  }
  for (;;) {
    assertLive(ctx);
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
    // Unsynced unless the body must never start twice (maxStartedAttempts 1): a crash of this process keeps the
    // record either way (so interrupted attempts are counted), and the record that ends the step is synced.
    await write(ctx, started, maxStarted === 1);
    let output: JsonValue;
    let outputText: string;
    let value: T;
    try {
      const info: StepInfo = {
        runId: ctx.runId,
        seq,
        name,
        attempt,
        idempotencyKey: `${ctx.runId}:${seq}`,
        signal: ctx.abortSignal,
      };
      const raw = await storage.run({ ctx, inStep: name, step: info }, () => Promise.resolve(fn(input)));
      const out = raw === undefined ? null : raw;
      assertJson(out, `step "${name}" output`);
      outputText = JSON.stringify(out);
      output = JSON.parse(outputText) as JsonValue;
      value = schema ? schema.parse(output) : (output as T);
    } catch (error) {
      if (ctx.abortSignal.aborted) throw abortReason(ctx);
      if (error instanceof StaleFencingTokenError) return refusal(ctx, error);
      lastError = recordError(error);
      const spent = attempt >= maxAttempts || attempt >= maxStarted;
      if (spent || error instanceof NonJsonValueError || !isRetryableError(error)) {
        await write(ctx, { ...started, status: "failed", error: lastError, finishedAt: Date.now() });
        throw new StepFailedError(ctx.runId, seq, name, attempt, lastError, error);
      }
      await delay(retryDelayMs(retry, attempt), ctx.abortSignal);
      attempt++;
      continue;
    }
    const { error: _dropped, ...done } = started;
    // The output was checked and serialised above: the journal stores that text as is.
    await write(ctx, withOutputJson({ ...done, status: "completed", output, finishedAt: Date.now() }, outputText));
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
  checkOptions("defineStep", options, DEFINE_STEP_OPTIONS);
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
 * @throws {ReplayMismatchError} when the journal holds another step at this position
 * @throws {RunCancelledError} when the run was cancelled
 * @throws {NoRunContextError} outside a run
 * @example
 * const decision = await waitForSignal("manager-approval");
 */
export async function waitForSignal<T = JsonValue>(name: string): Promise<T> {
  return waitForSignalWith<T>(name, undefined);
}

/**
 * {@link waitForSignal} whose waiting record carries `details` beside the signal's name (`{ signal: name,
 * ...details }`), for whoever sends the signal to read (an approval's `argsSchema`). Not hashed: a wait
 * recorded without them replays the same. Internal to the durable layer.
 *
 * @param name - signal name
 * @param details - JSON recorded in the waiting record's output, or undefined
 * @returns the signal's JSON value
 * @throws as {@link waitForSignal}
 */
export async function waitForSignalWith<T = JsonValue>(name: string, details: JsonObject | undefined): Promise<T> {
  const { ctx } = requireScope("waitForSignal", name);
  const stepName = signalStepName(name);
  const inputHash = hashInput(null);
  assertLive(ctx);
  const seq = ctx.nextSeq++;
  const rec = await replayed(ctx, seq, stepName, inputHash);
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
    output: { ...details, signal: name },
  };
  const complete = async (value: JsonValue) => {
    await write(ctx, { ...base, status: "completed", output: value, finishedAt: Date.now() });
    return value as T;
  };
  if (rec?.status !== "waiting") {
    // The wait is new: a signal that is already there completes it without recording the wait.
    const arrived = await ctx.journal.getSignal(ctx.runId, name);
    if (arrived) return complete(arrived.value);
    await write(ctx, { ...base, finishedAt: Date.now() });
  }
  // (A replay reaching its recorded wait asks no separate read: the suspension below checks for the signal
  // atomically, and hands it back when it has arrived.)
  const suspended = await ctx.journal
    .updateRun(ctx.fencingToken, ctx.runId, { status: "waiting", waitingFor: name })
    .catch((e: unknown) => refusal(ctx, e));
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
  const { ctx } = requireScope("sleep", name);
  if (!Number.isFinite(ms) || ms < 0) {
    throw new DumplingsError("INVALID_OPTION", `sleep("${name}") needs a finite, non-negative duration in ms`);
  }
  const stepName = `sleep:${name}`;
  const inputHash = hashInput({ ms });
  assertLive(ctx);
  const seq = ctx.nextSeq++;
  const rec = await replayed(ctx, seq, stepName, inputHash);
  if (rec?.status === "completed") return;
  // the store's clock, not this machine's: a worker whose clock runs ahead cannot fire a timer early
  const now = await ctx.journal.now();
  const recordedWake = (rec?.output as { wakeAt?: number } | undefined)?.wakeAt;
  const wakeAt = typeof recordedWake === "number" ? recordedWake : now + ms;
  const base: StepRecord = {
    runId: ctx.runId,
    seq,
    name: stepName,
    inputHash,
    status: "waiting",
    attempt: 1,
    startedAt: rec?.startedAt ?? now,
    fencingToken: ctx.fencingToken,
    output: { wakeAt },
  };
  if (rec?.status !== "waiting") await write(ctx, base);
  const remaining = wakeAt - now;
  if (remaining > ctx.inlineSleepMaxMs) {
    await ctx.journal
      .updateRun(ctx.fencingToken, ctx.runId, { status: "waiting", wakeAt })
      .catch((e: unknown) => refusal(ctx, e));
    throw new RunWaitingError(ctx.runId, { kind: "timer", name, wakeAt });
  }
  if (remaining > 0) await delay(remaining, ctx.abortSignal);
  await write(ctx, { ...base, status: "completed", finishedAt: now + Math.max(0, remaining) });
}

/** Name of the marker step {@link patched} records: `patch:<id>`. */
export const patchStepName = (id: string) => `patch:${id}`;

function checkPatchId(id: string, what: string): void {
  if (typeof id !== "string" || id.length === 0 || id.length > 200) {
    throw new DumplingsError("INVALID_OPTION", `${what} needs a patch id of 1 to 200 characters`);
  }
}

/**
 * Versioning (after Temporal's `patched`): lets a deploy change what a
 * workflow does without breaking the runs already in flight. Call it where
 * the new code path starts; it answers "does this run take the new path?":
 *
 * - at a new position (no history here: a new run, or a run past its
 *   recorded history) it records a marker step `patch:<id>` and returns `true`;
 * - replaying a run that recorded the marker here, it consumes it and returns `true`;
 * - replaying a run whose history here is anything else (recorded before the
 *   patch existed) it consumes nothing and returns `false`: keep the old code
 *   path for that run.
 *
 * Changing a step's *input* (a prompt sentence, a tool added to the list) does
 * not need a patch: completed steps replay by position and name, the recorded
 * result stands and a `step_drift` event is recorded. Use a patch to keep a
 * run on the program it started with, or to add, remove or reorder steps
 * (which would otherwise be a {@link ReplayMismatchError} and a `blocked` run).
 *
 * Retiring a patch, once no run without the marker is in flight: replace
 * `if (await patched(id))` by `deprecatePatch(id)` followed by the new code
 * only (runs that recorded the marker still replay); once no run with the
 * marker is in flight either, delete the `deprecatePatch` call.
 *
 * @param id - the change's name (1–200 characters), unique within the workflow
 * @returns whether this run takes the new code path
 * @throws {NoRunContextError} outside a run, or inside a step body (NESTED_STEP)
 * @throws {RunCancelledError} when the run was cancelled
 * @throws {StaleFencingTokenError} when another executor took the run over
 * @example
 * // v1 — runs are paused on approvals for days:
 * //   const agent = new DurableAgent({ model, system: "You are a support agent.", tools: { lookup, refund } });
 * //   export const support = agent.workflow();
 * // v2 — a sentence added to the prompt and a tool added. Paused v1 runs would replay fine
 * // (the changed llm input is drift, not an error); this keeps them on v1 for their whole life,
 * // and new runs take v2:
 * const v1 = new DurableAgent({ model, system: "You are a support agent.", tools: { lookup, refund } });
 * const v2 = new DurableAgent({
 *   model,
 *   system: "You are a support agent. Never promise a delivery date.",
 *   tools: { lookup, refund, weather },
 * });
 * export const support = async (input) => ((await patched("prompt-v2")) ? v2 : v1).workflow()(input);
 *
 * // a step added in the middle: only runs that reach this point under the new code run it
 * if (await patched("fraud-check")) await step("fraud-check", () => fraud.check(order), { input: order });
 * // … later, once every run without the marker has ended:
 * deprecatePatch("fraud-check");
 * await step("fraud-check", () => fraud.check(order), { input: order });
 */
export async function patched(id: string): Promise<boolean> {
  const { ctx } = requireScope("patched", id);
  checkPatchId(id, "patched()");
  assertLive(ctx);
  const name = patchStepName(id);
  const seq = ctx.nextSeq;
  const rec = ctx.records[seq];
  if (rec) {
    if (rec.name !== name) return false; // history from before the patch: the old code path
    ctx.nextSeq++;
    return true;
  }
  ctx.nextSeq++;
  const now = Date.now();
  await write(ctx, {
    runId: ctx.runId,
    seq,
    name,
    inputHash: hashInput(null),
    status: "completed",
    output: null,
    attempt: 1,
    startedAt: now,
    finishedAt: now,
    fencingToken: ctx.fencingToken,
  });
  return true;
}

/**
 * Retires a {@link patched} call (after Temporal's `deprecatePatch`): when the
 * run's history holds the marker `patch:<id>` at this position, consumes it;
 * otherwise does nothing (and records nothing). Replace
 * `if (await patched(id)) { new } else { old }` by `deprecatePatch(id); new`
 * once no run that took the old path is in flight.
 *
 * @param id - the id given to `patched`
 * @throws {NoRunContextError} outside a run, or inside a step body (NESTED_STEP)
 * @example
 * deprecatePatch("fraud-check");
 * await step("fraud-check", () => fraud.check(order), { input: order });
 */
export function deprecatePatch(id: string): void {
  const { ctx } = requireScope("deprecatePatch", id);
  checkPatchId(id, "deprecatePatch()");
  if (ctx.records[ctx.nextSeq]?.name === patchStepName(id)) ctx.nextSeq++;
}
