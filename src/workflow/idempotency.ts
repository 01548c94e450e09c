/**
 * `IdempotencyGuard`: side effects (payments, e-mails, paid model calls,
 * external API writes) that run at most once per idempotency key, even
 * across crashes and resumes.
 *
 * `guard.run(key, fn)` records `started` in the cold store before `fn` runs
 * and `finished` + the JSON result after; a later run with the same key
 * returns the recorded result without calling `fn`. A record that is
 * `started` but never `finished` means the process died in between: whether
 * the effect happened is unknown, so a user-supplied `reconcile` function is
 * asked (e.g. "look the payment up by its idempotency key") instead of
 * blindly running it again. Under the runner, a workflow is run by one worker
 * at a time (a lease with a fencing token, the run lease the runner takes in the journal): the
 * start is recorded only under the worker's current, live lease, so a record
 * another worker finds `started` was left by a holder that died or lost the
 * lease, never by one that is still running it. This is the seed's ToolIdempotentGuard; the
 * started/finished journal follows Temporal's activity model and Stripe's
 * idempotency keys.
 *
 * @module
 */

import { ReplayMismatchError } from "../core/errors.js";
import { assertJson, type JsonValue } from "../core/json.js";
import { checkOptions, optionKeys } from "../core/options.js";
import type { ColdStore } from "../durable/checkpoints/contract.js";
import { UnknownSideEffectError } from "./errors.js";

/** The keys of {@link GuardRunOptions<unknown>}: any other is an `InvalidOptionError`. */
const RUN_OPTIONS = optionKeys<GuardRunOptions<unknown>>({
  name: true,
  workflowId: true,
  stepIndex: true,
  reconcile: true,
  fencingToken: true,
});

/** The keys of {@link { store: unknown; reconcile?: unknown }}: any other is an `InvalidOptionError`. */
const GUARD_OPTIONS = optionKeys<{ store: unknown; reconcile?: unknown }>({
  store: true,
  reconcile: true,
});

/** What `reconcile` is told about a side effect whose outcome is unknown. */
export interface UnknownSideEffect {
  /** Always `"unknown"`: started, never recorded as finished. */
  status: "unknown";
  key: string;
  /** Name given to the call (e.g. `"charge-card"`). */
  name: string;
  workflowId: string;
  stepIndex: number;
  /** When the start was recorded, ms since the epoch. */
  startedAt: number;
}

/**
 * Decision of a `reconcile` function: the effect `happened` (with the result to record and
 * return), or it did `not-happen` (it is run now).
 */
export type ReconcileDecision<T> = { outcome: "happened"; result: T } | { outcome: "not-happened" };

/** Decides the outcome of a side effect whose start was recorded but whose finish was not. */
export type Reconcile<T = JsonValue | undefined> = (
  effect: UnknownSideEffect,
) => ReconcileDecision<T> | Promise<ReconcileDecision<T>>;

/** Options of one guarded call. */
export interface GuardRunOptions<T> {
  /** Name recorded with the call; a different name under the same key on replay is a {@link NondeterminismError}. @default the key */
  name?: string;
  /** Workflow the call belongs to (for deletion and retention). @default "" */
  workflowId?: string;
  /** Step the call belongs to (for retention). @default 0 */
  stepIndex?: number;
  /** Overrides the guard's `reconcile` for this call. */
  reconcile?: Reconcile<T>;
  /**
   * The caller's lease token on `workflowId` (the run lease the runner takes in the journal): the start is recorded
   * only while it is the workflow's current lease and that lease has not expired, and a failed
   * effect's record is removed only while it still is. Omitted: no lease check.
   */
  fencingToken?: number;
}

/** Counters of a guard. */
export interface GuardStats {
  /** Calls whose `fn` ran. */
  executed: number;
  /** Calls answered from a recorded result. */
  replayed: number;
  /** Calls whose outcome was decided by `reconcile`. */
  reconciled: number;
}

/**
 * Runs side effects at most once per key.
 *
 * @example
 * const guard = new IdempotencyGuard({ store, reconcile: async (e) =>
 *   (await payments.find(e.key)) ? { outcome: "happened", result: "charged" } : { outcome: "not-happened" } });
 * const receipt = await guard.run(IdempotencyGuard.key("order-42", 3, 0), () => payments.charge(42, { idempotencyKey: "order-42:3:0" }));
 */
export class IdempotencyGuard {
  /** Counters since creation. */
  readonly stats: GuardStats = { executed: 0, replayed: 0, reconciled: 0 };
  private readonly cold: ColdStore;
  private readonly reconcile: Reconcile<unknown> | undefined;

  /**
   * @param options - `store`: a `CheckpointStore` (its cold store is used) or a cold store;
   *   `reconcile`: default decision for unknown outcomes (without one, an unknown outcome throws)
   */
  constructor(options: { store: { cold: ColdStore } | ColdStore; reconcile?: Reconcile<unknown> }) {
    checkOptions("IdempotencyGuard", options, GUARD_OPTIONS);
    this.cold = "cold" in options.store ? options.store.cold : options.store;
    this.reconcile = options.reconcile;
  }

  /**
   * The idempotency key of the `callIndex`-th guarded call of the node run that started at `stepIndex`.
   *
   * @returns `{workflowId}:{stepIndex}:{callIndex}`
   */
  static key(workflowId: string, stepIndex: number, callIndex: number): string {
    return `${workflowId}:${stepIndex}:${callIndex}`;
  }

  /**
   * Runs `fn` once for `key`; returns the recorded result on every later call.
   *
   * @param key - idempotency key (see {@link IdempotencyGuard.key})
   * @param fn - the side effect, given the key (pass it on to APIs that accept idempotency keys);
   *   its result must be JSON (or `undefined`)
   * @param options - name, workflow/step, per-call `reconcile`
   * @returns the result of `fn` (now or as recorded)
   * @throws whatever `fn` throws (the start record is removed: a failed effect may be retried)
   * @throws {UnknownSideEffectError} when the outcome is unknown and no `reconcile` is given
   * @throws {NondeterminismError} when a different name was recorded under the key
   * @throws {NonJsonValueError} when the result is not JSON (the record stays `started`)
   * @throws {WorkflowLeaseLostError} when `fencingToken` is no longer a live lease (nothing recorded, `fn` not run)
   * @throws {BackendError} when the cold store fails
   */
  // biome-ignore lint/suspicious/noConfusingVoidType: a side effect may return nothing (void)
  async run<T extends JsonValue | undefined | void>(
    key: string,
    fn: (key: string) => T | Promise<T>,
    options: GuardRunOptions<T> = {},
  ): Promise<T> {
    const name = options.name ?? key;
    checkOptions("IdempotencyGuard.run", options, RUN_OPTIONS);
    const workflowId = options.workflowId ?? "";
    const stepIndex = options.stepIndex ?? 0;
    const token = options.fencingToken;
    const existing = await this.cold.idempotencyBegin(key, {
      workflowId,
      stepIndex,
      name,
      now: Date.now(),
      ...(token === undefined ? {} : { fencingToken: token }),
    });
    if (existing && existing.name !== name) {
      throw new ReplayMismatchError({
        workflowId: existing.workflowId,
        key,
        recorded: { name: existing.name, inputHash: "" },
        requested: { name, inputHash: "" },
      });
    }
    if (existing?.status === "finished") {
      this.stats.replayed++;
      return decode<T>(existing.resultJson);
    }
    if (existing) {
      const reconcile = (options.reconcile ?? this.reconcile) as Reconcile<T> | undefined;
      if (!reconcile) throw new UnknownSideEffectError(key, existing.startedAt);
      const decision = await reconcile({
        status: "unknown",
        key,
        name,
        workflowId: existing.workflowId,
        stepIndex: existing.stepIndex,
        startedAt: existing.startedAt,
      });
      if (decision.outcome === "happened") {
        this.stats.reconciled++;
        await this.cold.idempotencyFinish(key, encode(decision.result, key), Date.now());
        return decision.result;
      }
      // not-happened: run it now, under the existing start record
    }
    let result: T;
    try {
      result = await fn(key);
    } catch (e) {
      await (token === undefined
        ? this.cold.idempotencyAbandon(key)
        : this.cold.idempotencyAbandon(key, { workflowId, fencingToken: token }));
      throw e;
    }
    this.stats.executed++;
    await this.cold.idempotencyFinish(key, encode(result, key), Date.now());
    return result;
  }
}

function encode(value: unknown, key: string): string {
  if (value !== undefined) assertJson(value, `result of side effect ${JSON.stringify(key)}`);
  return JSON.stringify(value === undefined ? {} : { v: value });
}

function decode<T>(json: string | null): T {
  const env = JSON.parse(json ?? "{}") as { v?: unknown };
  return env.v as T;
}
