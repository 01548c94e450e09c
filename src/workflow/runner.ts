/**
 * `ResumableGraphRunner`: runs a graph of async nodes over a
 * {@link CheckpointStore}, checkpointing after every node, so a crashed run
 * continues from the last finished node.
 *
 * - A node is `(state, ctx) => { next, updates }`; `next` is a node name or
 *   `END`; `updates` are merged shallowly into `sharedMemory` (an `undefined`
 *   value removes the key).
 * - **One worker at a time.** Running, resuming, forking or updating a
 *   workflow first takes its run's lease in the store's durable journal (the
 *   very lease a `runDurable` executor holds: owner, expiry, fencing token,
 *   one execution at a time), renewed every third of `leaseTtlMs` while the
 *   worker runs it and released when it stops (`durable/lease.ts`). A
 *   second worker finds the lease held and fails fast with
 *   {@link WorkflowLeaseHeldError} before any node runs (or waits up to
 *   `leaseWaitMs`). A holder that died leaves its lease to expire; the next
 *   worker takes it over with a higher fencing token, and only then is a side
 *   effect the dead holder had started (a `started` record) sent to
 *   `reconcile`. Every checkpoint, error record and side-effect start carries
 *   the token and is refused ({@link WorkflowLeaseLostError}, nothing written)
 *   once another worker took over, so a worker paused past its lease changes
 *   nothing.
 * - Every checkpoint is also a compare-and-set on the step index: two writers
 *   of one workflow cannot both advance it (the loser gets `ConflictError`).
 * - `ctx.interrupt({ reason, payload })` pauses the workflow (checkpointed as
 *   `waiting`); `resume(workflowId, value)` continues it. The node is re-run
 *   from its start on resume — as in LangGraph — but each `interrupt()` call
 *   has a stable id (workflow, start step, node, call index) and its answer is
 *   durable, so a re-run gets earlier answers back instead of asking again,
 *   and side effects made through `ctx.sideEffect` / `ctx.tool` replay from
 *   the idempotency journal instead of running again (the fix for the
 *   "interrupt in a loop replays side effects" report, LangGraph #7780).
 * - Time travel: `resumeFrom(workflowId, step)` forks a new workflow id from
 *   any stored step; `updateState` writes a new step. History is never edited.
 *
 * @module
 */
import { randomUUID } from "node:crypto";
import { EventEmitter } from "node:events";
import { InvalidOptionError, LeaseHeldError, ReplayMismatchError, StaleFencingTokenError } from "../core/errors.js";
import { assertJson, type JsonObject, type JsonValue, setOwn } from "../core/json.js";
import { checkOptions, optionKeys } from "../core/options.js";
import { defaultOwner, leaseMs } from "../core/owner.js";
import { INTERRUPT_SIGNAL, JournalColdStore } from "../durable/checkpoints/journal-store.js";
import { ORIGINAL_END } from "../durable/checkpoints/original.js";
import { SignalConflictError } from "../durable/errors.js";
import type { Journal } from "../durable/journal.js";
import { RunLease } from "../durable/lease.js";
import {
  NodeFailedError,
  UnknownNodeError,
  UnknownSideEffectError,
  WorkflowNotFoundError,
  WorkflowNotWaitingError,
  WorkflowStateError,
} from "./errors.js";
import { IdempotencyGuard, type Reconcile } from "./idempotency.js";
import {
  type AnyWorkflowStateSchema,
  createWorkflowState,
  END,
  type HistoryRecord,
  type NodeRun,
  type PendingInterrupt,
  START,
  type WorkflowState,
} from "./state.js";
import type { CheckpointStore } from "./store.js";

/** The journal under a store whose workflows are journal runs, else undefined. */
function journalOf(store: CheckpointStore<AnyWorkflowStateSchema>): Journal | undefined {
  return store.cold instanceof JournalColdStore ? store.cold.journal : undefined;
}

const RESUME_OPTIONS = optionKeys<{ interruptId?: string }>({ interruptId: true });
/** The keys of `runOrResume`'s `initial`: any other (a seed-style `shared_memory`, a typo) is an `InvalidOptionError`. */
const INITIAL_OPTIONS = optionKeys<{ sessionId?: string; sharedMemory?: JsonObject }>({
  sessionId: true,
  sharedMemory: true,
});
const FORK_OPTIONS = optionKeys<{ newWorkflowId?: string; updates?: unknown; run?: boolean }>({
  newWorkflowId: true,
  updates: true,
  run: true,
});
/** The keys of `ctx.sideEffect` / `ctx.tool` options in a node. */
const EFFECT_OPTIONS = optionKeys<{ reconcile?: unknown }>({ reconcile: true });
/** The keys of {@link RunnerOptions}: any other is an `InvalidOptionError`. */
const RUNNER_OPTIONS = optionKeys<RunnerOptions>({
  store: true,
  nodes: true,
  entry: true,
  reconcile: true,
  maxSteps: true,
  onStep: true,
  leaseTtlMs: true,
  leaseWaitMs: true,
  owner: true,
  lease: true,
});

/** What a node returns. */
export interface NodeResult {
  /** Next node name, or `END`. */
  next: string;
  /** Shallow updates of `sharedMemory` (JSON; `undefined` removes a key). */
  updates?: Record<string, JsonValue | undefined>;
}

/** The helpers a node gets besides the state. */
export interface NodeContext {
  workflowId: string;
  /** Node name. */
  node: string;
  /** Step of the checkpoint this node run started from (stable across interrupts and re-runs). */
  startStep: number;
  /**
   * Aborted when this worker loses the workflow's lease (another worker took it over; reason: a
   * {@link WorkflowLeaseLostError}): pass it to `fetch` and model calls so a worker that was
   * taken over stops early. Its checkpoint and side-effect starts are refused either way.
   */
  abortSignal: AbortSignal;
  /**
   * Pauses the workflow until `resume(workflowId, value)`; returns `value`. On a re-run after
   * resume, returns the recorded answer of this call (by call index) without pausing. A `payload` left out or
   * `undefined` is recorded as `null`.
   */
  interrupt<T extends JsonValue = JsonValue>(request: { reason: string; payload?: JsonValue | undefined }): Promise<T>;
  /**
   * Runs a side effect at most once for this node run (key: workflow, start step, call index).
   * @param name - stable name of the effect (checked on replay)
   * @param fn - the effect, given its idempotency key; result must be JSON or undefined
   * @param options - `reconcile` for an effect whose outcome is unknown after a crash
   */
  // biome-ignore lint/suspicious/noConfusingVoidType: a side effect may return nothing (void)
  sideEffect<T extends JsonValue | undefined | void>(
    name: string,
    fn: (key: string) => T | Promise<T>,
    options?: { reconcile?: Reconcile<T> },
  ): Promise<T>;
  /**
   * A guarded tool call that is also recorded in `historyRecords` (toolName, arguments, result,
   * latencyMs, timestamp) when the node finishes.
   */
  tool<T extends JsonValue>(
    toolName: string,
    args: JsonValue,
    fn: () => T | Promise<T>,
    options?: { reconcile?: Reconcile<T> },
  ): Promise<T>;
}

/** A graph node. */
export type GraphNode<T extends WorkflowState = WorkflowState> = (
  state: Readonly<T>,
  ctx: NodeContext,
) => NodeResult | Promise<NodeResult>;

/** Result of driving a workflow until it finishes or waits. */
export interface GraphRunResult<T extends WorkflowState = WorkflowState> {
  /** `running` only for a fork created with `run: false`. */
  status: "finished" | "waiting" | "running";
  state: T;
  /** The question, when waiting. */
  interrupt: PendingInterrupt | undefined;
}

/** Step events emitted by the runner (`runner.on("step", …)`). */
export type StepEvent =
  | { type: "start"; workflowId: string; stepIndex: number; node: string; at: number }
  | {
      type: "finish";
      workflowId: string;
      stepIndex: number;
      node: string;
      next: string;
      durationMs: number;
      at: number;
    }
  | {
      type: "interrupt";
      workflowId: string;
      stepIndex: number;
      node: string;
      interrupt: PendingInterrupt;
      durationMs: number;
      at: number;
    }
  | {
      type: "error";
      workflowId: string;
      stepIndex: number;
      node: string;
      error: unknown;
      durationMs: number;
      at: number;
    };

/** Options of {@link ResumableGraphRunner}. */
export interface RunnerOptions<T extends WorkflowState = WorkflowState> {
  /** The checkpoint store. */
  store: CheckpointStore<AnyWorkflowStateSchema>;
  /** Nodes by name (a `Map` or a plain object). */
  nodes: Map<string, GraphNode<T>> | Record<string, GraphNode<T>>;
  /** Node run after `START`. @default the first node */
  entry?: string;
  /** Default decision for side effects of unknown outcome (see `IdempotencyGuard`). */
  reconcile?: Reconcile<unknown>;
  /** Safety limit on nodes run by one call. @default 10000 */
  maxSteps?: number;
  /** Called for every step event (same as listening to `"step"`). */
  onStep?: (event: StepEvent) => void;
  /**
   * How long a workflow's lease lasts without renewal, in ms. The worker renews it every third
   * of this while it runs the workflow; a worker that dies holds the workflow this long at most
   * before another may take it over. Longer than any stretch a node blocks the event loop
   * (a blocked worker cannot renew). From 100 ms to 2^31 − 1 ms (about 24.8 days). @default 30000
   */
  leaseTtlMs?: number;
  /**
   * When another worker holds the workflow's lease: wait up to this many ms for it to be
   * released or to expire (`0`: throw {@link LeaseHeldError} at once), as `runDurable` does. A
   * process restarted after a crash so waits for its dead predecessor's lease to expire.
   * At most 2^31 − 1 ms. @default 2 × `leaseTtlMs` (it was 0 before 0.2: pass `leaseWaitMs: 0` to fail fast)
   */
  leaseWaitMs?: number;
  /**
   * This worker's lease owner id, shown to other workers in {@link WorkflowLeaseHeldError}. A lease
   * belongs to one execution: a live lease is refused to its own owner id too (another call, a
   * restarted worker with a stable name waits for its predecessor's lease to expire, as a durable
   * run's does). @default `<hostname>:<pid>:<random>`
   */
  owner?: string;
  /**
   * `false`: run without a lease (no mutual exclusion between workers: only for a custom cold store
   * that is not a durable journal, when you guarantee one worker per workflow yourself). @default true
   */
  lease?: boolean;
}

const RESUME = "__resume__";
const UPDATE = "__update__";
const FORK = "__fork__";

/** Thrown inside a node by `ctx.interrupt` to unwind it; caught by the runner. Not an error for users. */
class InterruptSignal {
  constructor(readonly interrupt: PendingInterrupt) {}
}

function errorJson(e: unknown): JsonObject {
  if (e instanceof Error) {
    const out: JsonObject = { name: e.name, message: e.message };
    const code = (e as { code?: unknown }).code;
    if (typeof code === "string") out.code = code;
    if (e.stack) out.stack = e.stack;
    return out;
  }
  return { name: "NonError", message: String(e) };
}

/**
 * Runs a graph of nodes with a checkpoint after every node.
 *
 * @example
 * const runner = new ResumableGraphRunner({
 *   store,
 *   nodes: {
 *     plan: async (s) => ({ next: "act", updates: { plan: ["a", "b"] } }),
 *     act: async (s, ctx) => ({ next: END, updates: { done: await ctx.sideEffect("send", () => send(s.sharedMemory)) } }),
 *   },
 * });
 * runner.on("step", (e) => console.log(e.type, e.node, e.stepIndex));
 * const { status, state } = await runner.runOrResume("order-42", { sharedMemory: { orderId: 42 } });
 */
export class ResumableGraphRunner<T extends WorkflowState = WorkflowState> extends EventEmitter {
  /** The store. */
  readonly store: CheckpointStore<AnyWorkflowStateSchema>;
  /** The idempotency guard used by `ctx.sideEffect` / `ctx.tool`. */
  readonly guard: IdempotencyGuard;
  private readonly nodes: Map<string, GraphNode<T>>;
  private readonly entry: string;
  private readonly reconcile: Reconcile<unknown> | undefined;
  private readonly maxSteps: number;
  /** The journal whose run leases this runner takes (the store's), or undefined with `lease: false`. */
  private readonly leases: JournalColdStore | undefined;
  private readonly leaseTtlMs: number;
  private readonly leaseWaitMs: number;
  private readonly owner: string | undefined;
  /** Workflows this runner runs now (a second call on one of them fails fast or waits). */
  private readonly running = new Map<string, Claim>();

  /**
   * @param options - `store`, `nodes`, `entry`, `reconcile`, `maxSteps`, `onStep`, `leaseTtlMs` (30000),
   *   `leaseWaitMs` (0), `owner`, `lease` (true)
   * @throws {InvalidOptionError} when `store` or `nodes` is missing, or there are no nodes; on a bad lease
   *   option; when the cold store keeps no leases and `lease: false` is not given
   * @throws {RangeError} when `entry` is unknown or a node is named START or END
   */
  constructor(options: RunnerOptions<T>) {
    super();
    checkOptions("ResumableGraphRunner", options, RUNNER_OPTIONS);
    const given = (options ?? {}) as Partial<RunnerOptions<T>>;
    if (given.store === null || typeof given.store !== "object" || typeof given.store.loadLatest !== "function") {
      throw new InvalidOptionError(
        "ResumableGraphRunner",
        "store",
        `${given.store === undefined ? "is required" : "must be a CheckpointStore"}: new ResumableGraphRunner({ store: await CheckpointStore.open({ cold }), nodes })`,
      );
    }
    if (given.nodes === null || typeof given.nodes !== "object") {
      throw new InvalidOptionError(
        "ResumableGraphRunner",
        "nodes",
        "is required: an object or Map of node functions by name, e.g. { plan: async (state) => ({ next: END }) }",
      );
    }
    this.store = options.store;
    this.nodes = options.nodes instanceof Map ? new Map(options.nodes) : new Map(Object.entries(options.nodes));
    const first = this.nodes.keys().next();
    if (first.done) {
      throw new InvalidOptionError(
        "ResumableGraphRunner",
        "nodes",
        "needs at least one node (an object or Map of node functions by name)",
      );
    }
    this.entry = options.entry ?? first.value;
    if (!this.nodes.has(this.entry)) throw new RangeError(`entry node ${JSON.stringify(this.entry)} is not a node`);
    for (const reserved of [START, END]) {
      if (this.nodes.has(reserved)) throw new RangeError(`${reserved} is reserved and cannot be a node name`);
    }
    this.reconcile = options.reconcile;
    this.guard = new IdempotencyGuard({ store: this.store, reconcile: options.reconcile });
    this.maxSteps = options.maxSteps ?? 10_000;
    this.leaseTtlMs = leaseMs("ResumableGraphRunner", "leaseTtlMs", options.leaseTtlMs, 30_000);
    // As runDurable's: a held lease is waited for up to twice its TTL (a dead holder's lease expires meanwhile).
    this.leaseWaitMs = leaseMs("ResumableGraphRunner", "leaseWaitMs", options.leaseWaitMs, 2 * this.leaseTtlMs, 0);
    if (options.owner !== undefined && (typeof options.owner !== "string" || options.owner.length === 0)) {
      throw new InvalidOptionError("ResumableGraphRunner", "owner", "must be a non-empty string");
    }
    this.owner = options.owner;
    if (options.lease !== undefined && typeof options.lease !== "boolean") {
      throw new InvalidOptionError("ResumableGraphRunner", "lease", "must be true or false");
    }
    const cold = this.store.cold;
    if (options.lease === false) this.leases = undefined;
    else if (cold instanceof JournalColdStore) this.leases = cold;
    else {
      throw new InvalidOptionError(
        "ResumableGraphRunner",
        "lease",
        `the cold store (${cold.name}) is not a durable journal, so it keeps no leases and two workers could run one workflow at once and repeat its side effects: use SqliteColdStore or PostgresColdStore (or a JournalColdStore over your own Journal), or pass lease: false if you guarantee one worker per workflow yourself`,
      );
    }
    if (options.onStep) this.on("step", options.onStep);
  }

  /**
   * Runs `fn` holding `workflowId`'s lease (taken first, renewed meanwhile, released after):
   * nothing of the workflow is read or run before the lease is this worker's.
   *
   * A call of this runner claims the workflow in {@link running} synchronously, before its first
   * await, so a second call on the same workflow always sees the first (with an explicit `owner`
   * the store would let it in, taking the lease back from the first call under it). The second
   * call fails fast with {@link WorkflowLeaseHeldError} once the first holds the lease, or, with
   * `leaseWaitMs`, waits for the first to finish (as another worker would).
   */
  private async held<R>(
    workflowId: string,
    create: boolean,
    fn: (lease: RunLease | undefined) => Promise<R>,
  ): Promise<R> {
    const cold = this.leases;
    if (!cold) return fn(undefined);
    const deadline = Date.now() + this.leaseWaitMs;
    for (let other = this.running.get(workflowId); other; other = this.running.get(workflowId)) {
      const theirs = await other.acquired;
      const left = deadline - Date.now();
      if (theirs && left <= 0) {
        throw new LeaseHeldError({
          workflowId,
          owner: theirs.owner,
          expiresAt: theirs.expiresAt,
          fencingToken: theirs.fencingToken,
        });
      }
      // Their acquisition failed (their finish follows at once), or wait for them to finish.
      await untilDone(other.done, theirs ? left : undefined);
    }
    // The claim: no await between the check above and here.
    const acquiring = (async () => {
      // A missing workflow is refused before anything is created (resume, updateState); a cancelled one too.
      if (!(await cold.prepareRun(workflowId, create))) throw new WorkflowNotFoundError(workflowId);
      return (await RunLease.take(cold.journal, workflowId, {
        owner: this.owner ?? defaultOwner(),
        ttlMs: this.leaseTtlMs,
        waitMs: Math.max(0, deadline - Date.now()),
        subject: "workflow",
      })) as RunLease;
    })();
    let finish!: () => void;
    const claim: Claim = {
      acquired: acquiring.then(
        (lease) => lease,
        () => undefined,
      ),
      done: new Promise<void>((resolve) => {
        finish = resolve;
      }),
    };
    this.running.set(workflowId, claim);
    try {
      const lease = await acquiring;
      try {
        return await fn(lease);
      } finally {
        await lease.release();
      }
    } finally {
      this.running.delete(workflowId);
      finish();
    }
  }

  private emitStep(event: StepEvent): void {
    this.emit("step", event);
  }

  /**
   * Resumes a workflow from its latest checkpoint, or starts it (step 0) when it has none,
   * and runs it until it finishes or waits for input.
   *
   * @param workflowId - the workflow id
   * @param initial - for a new workflow: `sessionId`, `sharedMemory` (ignored when resuming; any other key,
   *   e.g. the original design's `shared_memory`, is refused with {@link InvalidOptionError})
   * @returns `{ status, state, interrupt }`
   * @throws {UnknownNodeError} when a node name is unknown (recorded with the step)
   * @throws {NodeFailedError} when a node throws (recorded; the last good checkpoint stays)
   * @throws {UnknownSideEffectError} when a node's side effect was started by a worker that died and no
   *   `reconcile` decides whether it happened (recorded; pass `reconcile` and run again)
   * @throws {ReplayMismatchError} when a node's guarded calls differ from the recorded ones on replay
   * @throws {WorkflowLeaseHeldError} when another live worker runs the workflow (nothing was run)
   * @throws {WorkflowLeaseLostError} when another worker took the workflow over while this one ran it
   *   (this worker's last checkpoint or side-effect start was refused; nothing was written)
   * @throws {ConflictError} when another writer advanced the workflow concurrently
   * @throws {BackendError} when the cold store fails (the run stops without advancing)
   */
  async runOrResume(
    workflowId: string,
    initial: { sessionId?: string; sharedMemory?: JsonObject } = {},
  ): Promise<GraphRunResult<T>> {
    checkOptions("runOrResume", initial, INITIAL_OPTIONS);
    return this.held(workflowId, true, async (lease) => {
      let state = (await this.store.loadLatest(workflowId)) as T | undefined;
      if (!state) {
        const fresh = createWorkflowState({
          workflowId,
          sessionId: initial.sessionId,
          sharedMemory: initial.sharedMemory,
          schemaVersion: this.store.schemaVersion,
        });
        state = (await this.store.save(fresh, { expectedStep: null, nodeName: START, ...fence(lease) })) as T;
      }
      // On a journal, an answer sent as a signal (`signal()`, `dumplings signal`) while it waited is delivered now.
      const journal = journalOf(this.store);
      const pending = state.status === "waiting" ? state.pendingInterrupt : undefined;
      if (journal && pending) {
        const answer = await journal.getSignal(workflowId, `${INTERRUPT_SIGNAL}${pending.id}`);
        if (answer) return this.deliver(workflowId, answer.value, { interruptId: pending.id }, lease, true);
      }
      return this.drive(state, lease);
    });
  }

  /**
   * Continues a workflow that waits on `interrupt()`, delivering `value` exactly once.
   *
   * @param workflowId - the waiting workflow
   * @param value - the answer (JSON), returned by the pending `interrupt()` call
   * @param options - `interruptId`: deliver only if this is the pending question's id
   * @returns the run result after continuing
   * @throws {WorkflowNotFoundError} when the workflow does not exist
   * @throws {WorkflowNotWaitingError} (a `ConflictError`) when it is not waiting, or waits on another question
   * @throws {ConflictError} when another resume won the race (nothing delivered)
   * @throws {WorkflowLeaseHeldError} when another live worker runs or resumes the workflow (nothing delivered)
   * @throws {WorkflowLeaseLostError} when another worker took the workflow over while this one ran it
   */
  async resume(
    workflowId: string,
    value: JsonValue,
    options: { interruptId?: string } = {},
  ): Promise<GraphRunResult<T>> {
    checkOptions("resume", options, RESUME_OPTIONS);
    assertJson(value, "resume value");
    return this.held(workflowId, false, (lease) => this.deliver(workflowId, value, options, lease));
  }

  private async deliver(
    workflowId: string,
    value: JsonValue,
    options: { interruptId?: string },
    lease: RunLease | undefined,
    signalled = false,
  ): Promise<GraphRunResult<T>> {
    const state = (await this.store.loadLatest(workflowId)) as T | undefined;
    if (!state) throw new WorkflowNotFoundError(workflowId);
    const pending = state.pendingInterrupt;
    if (state.status !== "waiting" || !pending || !state.nodeRun) {
      throw new WorkflowNotWaitingError(workflowId, state.stepIndex, state.isFinished ? "finished" : state.status);
    }
    if (options.interruptId !== undefined && options.interruptId !== pending.id) {
      throw new WorkflowNotWaitingError(
        workflowId,
        state.stepIndex,
        `waiting on ${pending.id}, not ${options.interruptId}`,
      );
    }
    const journal = signalled ? undefined : journalOf(this.store);
    if (journal) {
      // The answer is the signal the run waits for: recorded first (once), so any process sees it was answered.
      const name = `${INTERRUPT_SIGNAL}${pending.id}`;
      try {
        await journal.sendSignal(workflowId, name, value);
      } catch (e) {
        if (!(e instanceof SignalConflictError)) throw e;
        throw new WorkflowNotWaitingError(
          workflowId,
          state.stepIndex,
          `already answered by signal ${JSON.stringify(name)}; runOrResume continues it with that answer`,
        );
      }
    }
    const next = {
      ...state,
      stepIndex: state.stepIndex + 1,
      status: "running",
      pendingInterrupt: null,
      nodeRun: { ...state.nodeRun, answers: [...state.nodeRun.answers, { id: pending.id, value }] },
      updatedAt: Date.now(),
    } as T;
    const saved = (await this.store.save(next, {
      expectedStep: state.stepIndex,
      nodeName: RESUME,
      ...fence(lease),
    })) as T;
    return this.drive(saved, lease);
  }

  /**
   * Time travel: forks a new workflow from a stored step of another one and runs it. The
   * original history is untouched; side effects in the fork run again (new idempotency keys).
   *
   * @param workflowId - source workflow
   * @param stepIndex - source step
   * @param options - `newWorkflowId` (default `{workflowId}~fork-{8 hex}`), `updates` merged into
   *   `sharedMemory` of the fork, `run` (default true; false only writes the fork's first checkpoint)
   * @returns the run result of the fork (its `state.workflowId` is the new id)
   * @throws {WorkflowNotFoundError} when the step does not exist
   * @throws {ConflictError} when `newWorkflowId` already exists
   * @throws {WorkflowLeaseHeldError} when another live worker holds `newWorkflowId`
   */
  async resumeFrom(
    workflowId: string,
    stepIndex: number,
    options: { newWorkflowId?: string; updates?: Record<string, JsonValue | undefined>; run?: boolean } = {},
  ): Promise<GraphRunResult<T>> {
    checkOptions("resumeFrom", options, FORK_OPTIONS);
    const source = (await this.store.get(workflowId, stepIndex)) as T;
    const forkId = options.newWorkflowId ?? `${workflowId}~fork-${randomUUID().slice(0, 8)}`;
    // Interrupt ids carry the workflow id: re-key recorded answers and the pending question to the fork.
    const rekey = (id: string) => (id.startsWith(`${workflowId}:`) ? `${forkId}${id.slice(workflowId.length)}` : id);
    const fork = {
      ...source,
      workflowId: forkId,
      pendingInterrupt: source.pendingInterrupt && {
        ...source.pendingInterrupt,
        id: rekey(source.pendingInterrupt.id),
      },
      nodeRun: source.nodeRun && {
        ...source.nodeRun,
        answers: source.nodeRun.answers.map((a) => ({ ...a, id: rekey(a.id) })),
      },
      sharedMemory: merge(source.sharedMemory, options.updates),
      parent: { workflowId, stepIndex },
      updatedAt: Date.now(),
    } as T;
    return this.held(forkId, true, async (lease) => {
      const saved = (await this.store.save(fork, { expectedStep: null, nodeName: FORK, ...fence(lease) })) as T;
      if (options.run === false) return result(saved);
      return this.drive(saved, lease);
    });
  }

  /**
   * Writes a new step with `sharedMemory` updated (and optionally the next node changed);
   * earlier steps are never edited. Does not run anything.
   *
   * @param workflowId - the workflow
   * @param patch - `updates` merged into `sharedMemory`; `currentNode` to jump to
   * @returns the new state
   * @throws {WorkflowNotFoundError} / {UnknownNodeError} / {ConflictError}
   * @throws {WorkflowLeaseHeldError} when a live worker runs the workflow now (nothing written)
   */
  async updateState(
    workflowId: string,
    patch: { updates?: Record<string, JsonValue | undefined>; currentNode?: string },
  ): Promise<T> {
    return this.held(workflowId, false, (lease) => this.update(workflowId, patch, lease));
  }

  private async update(
    workflowId: string,
    patch: { updates?: Record<string, JsonValue | undefined>; currentNode?: string },
    lease: RunLease | undefined,
  ): Promise<T> {
    const state = (await this.store.loadLatest(workflowId)) as T | undefined;
    if (!state) throw new WorkflowNotFoundError(workflowId);
    if (patch.currentNode !== undefined && patch.currentNode !== END && !this.nodes.has(patch.currentNode)) {
      throw new UnknownNodeError(workflowId, state.stepIndex, patch.currentNode, [...this.nodes.keys()]);
    }
    const jump = patch.currentNode !== undefined && patch.currentNode !== state.currentNode;
    const next = {
      ...state,
      stepIndex: state.stepIndex + 1,
      sharedMemory: merge(state.sharedMemory, patch.updates),
      ...(jump
        ? {
            currentNode: patch.currentNode,
            isFinished: patch.currentNode === END,
            status: patch.currentNode === END ? "finished" : "running",
            pendingInterrupt: null,
            nodeRun: null,
          }
        : {}),
      updatedAt: Date.now(),
    } as T;
    return (await this.store.save(next, { expectedStep: state.stepIndex, nodeName: UPDATE, ...fence(lease) })) as T;
  }

  private async fail(state: T, node: string, error: unknown, lease: RunLease | undefined): Promise<never> {
    await this.store.recordError(
      {
        workflowId: state.workflowId,
        stepIndex: state.stepIndex,
        nodeName: node,
        error: errorJson(error),
        createdAt: Date.now(),
      },
      lease?.fencingToken,
    );
    throw error;
  }

  private async drive(state: T, lease: RunLease | undefined): Promise<GraphRunResult<T>> {
    for (let steps = 0; ; steps++) {
      if (state.isFinished || state.status === "waiting") return result(state);
      if (lease?.lost) throw lease.lost; // taken over: run nothing more
      const node = state.currentNode === START ? this.entry : state.currentNode;
      const fn = this.nodes.get(node);
      if (!fn) {
        await this.fail(
          state,
          node,
          new UnknownNodeError(state.workflowId, state.stepIndex, node, [...this.nodes.keys()]),
          lease,
        );
      }
      if (steps >= this.maxSteps) {
        throw new NodeFailedError(
          state.workflowId,
          state.stepIndex,
          node,
          new Error(`maxSteps (${this.maxSteps}) reached`),
        );
      }
      state = await this.runNode(state, node, fn!, lease);
    }
  }

  private async runNode(state: T, node: string, fn: GraphNode<T>, lease: RunLease | undefined): Promise<T> {
    const run: NodeRun =
      state.nodeRun && state.nodeRun.node === node ? state.nodeRun : { node, startStep: state.stepIndex, answers: [] };
    const records: HistoryRecord[] = [];
    let interruptIndex = 0;
    let callIndex = 0;
    let signal: InterruptSignal | undefined;
    const wf = state.workflowId;
    // biome-ignore lint/suspicious/noConfusingVoidType: a side effect may return nothing (void)
    const sideEffect = <R extends JsonValue | undefined | void>(
      name: string,
      effect: (key: string) => R | Promise<R>,
      options: { reconcile?: Reconcile<R> } = {},
    ): Promise<R> => {
      checkOptions("sideEffect", options, EFFECT_OPTIONS);
      if (signal) throw signal; // the node swallowed an interrupt and went on: unwind again
      const key = IdempotencyGuard.key(wf, run.startStep, callIndex++);
      const guarded = () =>
        this.guard.run(key, effect, {
          name,
          workflowId: wf,
          stepIndex: run.startStep,
          reconcile: options.reconcile ?? (this.reconcile as Reconcile<R> | undefined),
          ...fence(lease),
        });
      // A lease known lost starts nothing; a late renewal is made first, so the start has a lease ahead of it.
      return lease ? lease.fresh().then(guarded) : guarded();
    };
    const ctx: NodeContext = {
      workflowId: wf,
      node,
      startStep: run.startStep,
      abortSignal: lease?.signal ?? NEVER_ABORTED,
      interrupt: async <V extends JsonValue>(request: {
        reason: string;
        payload?: JsonValue | undefined;
      }): Promise<V> => {
        if (signal) throw signal;
        const index = interruptIndex++;
        const id = `${wf}:${run.startStep}:${node}:${index}`;
        const answer = run.answers[index];
        if (answer) {
          if (answer.id !== id) {
            throw new ReplayMismatchError({
              workflowId: wf,
              key: id,
              recorded: { name: answer.id, inputHash: "" },
              requested: { name: id, inputHash: "" },
            });
          }
          return answer.value as V;
        }
        const payload = request.payload ?? null;
        assertJson(payload, "interrupt payload");
        signal = new InterruptSignal({ id, node, index, reason: request.reason, payload });
        throw signal;
      },
      sideEffect,
      tool: async <R extends JsonValue>(
        toolName: string,
        args: JsonValue,
        effect: () => R | Promise<R>,
        options: { reconcile?: Reconcile<R> } = {},
      ): Promise<R> => {
        checkOptions("tool", options, EFFECT_OPTIONS);
        assertJson(args, `arguments of tool ${toolName}`);
        const recorded = await sideEffect<{ result: R; latencyMs: number; timestamp: number }>(
          `tool:${toolName}`,
          async () => {
            const t0 = performance.now();
            const value = await effect();
            return {
              result: value,
              latencyMs: Math.round((performance.now() - t0) * 1000) / 1000,
              timestamp: Date.now(),
            };
          },
          options.reconcile
            ? {
                reconcile: async (e) => {
                  const d = await options.reconcile!(e);
                  return d.outcome === "happened"
                    ? { outcome: "happened", result: { result: d.result, latencyMs: 0, timestamp: Date.now() } }
                    : d;
                },
              }
            : {},
        );
        records.push({
          toolName,
          arguments: args,
          result: recorded.result,
          latencyMs: recorded.latencyMs,
          timestamp: recorded.timestamp,
        });
        return recorded.result;
      },
    };

    const t0 = performance.now();
    this.emitStep({ type: "start", workflowId: wf, stepIndex: state.stepIndex, node, at: Date.now() });
    let out: NodeResult | undefined;
    let thrown: unknown;
    try {
      out = await fn(structuredClone(state), ctx);
    } catch (e) {
      thrown = e;
    }
    const durationMs = performance.now() - t0;
    if (signal) {
      const waiting = {
        ...state,
        stepIndex: state.stepIndex + 1,
        currentNode: node,
        status: "waiting",
        pendingInterrupt: signal.interrupt,
        nodeRun: run,
        updatedAt: Date.now(),
      } as T;
      const saved = (await this.store.save(waiting, {
        expectedStep: state.stepIndex,
        nodeName: node,
        ...fence(lease),
      })) as T;
      this.emitStep({
        type: "interrupt",
        workflowId: wf,
        stepIndex: saved.stepIndex,
        node,
        interrupt: signal.interrupt,
        durationMs,
        at: Date.now(),
      });
      return saved;
    }
    const failWith = async (error: unknown): Promise<never> => {
      this.emitStep({
        type: "error",
        workflowId: wf,
        stepIndex: state.stepIndex,
        node,
        error,
        durationMs,
        at: Date.now(),
      });
      return this.fail(state, node, error, lease);
    };
    // Lost the lease (a side-effect start refused): not the node's failure, and nothing may be recorded.
    const lost = lease?.lost ?? (thrown instanceof StaleFencingTokenError ? thrown : undefined);
    if (lost) {
      this.emitStep({
        type: "error",
        workflowId: wf,
        stepIndex: state.stepIndex,
        node,
        error: lost,
        durationMs,
        at: Date.now(),
      });
      throw lost;
    }
    // The engine's own refusals keep their documented codes (recorded with the step, the checkpoint stays):
    // a side effect of unknown outcome without `reconcile`, a replay that diverged from the journal.
    if (thrown instanceof UnknownSideEffectError || thrown instanceof ReplayMismatchError) return failWith(thrown);
    if (thrown !== undefined || !out) {
      const cause = thrown ?? new TypeError(`the node returned nothing; ${EXPECTED_SHAPE}`);
      return failWith(new NodeFailedError(wf, state.stepIndex, node, cause));
    }
    const shapeProblem = resultShapeProblem(out);
    if (shapeProblem !== undefined) {
      return failWith(new NodeFailedError(wf, state.stepIndex, node, new TypeError(shapeProblem)));
    }
    // The original design's graphs end with the plain name "END": it ends this one too unless a node has that name.
    const target = out.next === ORIGINAL_END && !this.nodes.has(ORIGINAL_END) ? END : out.next;
    if (target !== END && !this.nodes.has(target)) {
      return failWith(new UnknownNodeError(wf, state.stepIndex, target, [...this.nodes.keys()]));
    }
    let next: T;
    try {
      if (out.updates !== undefined) assertJson(out.updates, `updates of node ${node}`);
      const finished = target === END;
      next = this.store.validate({
        ...state,
        stepIndex: state.stepIndex + 1,
        currentNode: target,
        sharedMemory: merge(state.sharedMemory, out.updates),
        historyRecords: [...state.historyRecords, ...records],
        isFinished: finished,
        status: finished ? "finished" : "running",
        pendingInterrupt: null,
        nodeRun: null,
        updatedAt: Date.now(),
      }) as T;
    } catch (e) {
      return failWith(e instanceof WorkflowStateError ? e : new NodeFailedError(wf, state.stepIndex, node, e));
    }
    const saved = (await this.store.save(next, {
      expectedStep: state.stepIndex,
      nodeName: node,
      ...fence(lease),
    })) as T;
    this.emitStep({
      type: "finish",
      workflowId: wf,
      stepIndex: saved.stepIndex,
      node,
      next: target,
      durationMs,
      at: Date.now(),
    });
    return saved;
  }
}

/** A call of the runner on a workflow, registered before its first await (see `held`). */
interface Claim {
  /** Its lease once taken; `undefined` when taking it failed. Never rejects. */
  acquired: Promise<RunLease | undefined>;
  /** Resolves once the call has released the lease and left `running`. */
  done: Promise<void>;
}

/** Resolves when `done` does, or after `ms` (never, without `ms`). */
async function untilDone(done: Promise<void>, ms: number | undefined): Promise<void> {
  if (ms === undefined) return done;
  let timer: ReturnType<typeof setTimeout> | undefined;
  try {
    await Promise.race([done, new Promise<void>((resolve) => (timer = setTimeout(resolve, ms)))]);
  } finally {
    clearTimeout(timer);
  }
}

/** The signal of a node run without a lease (`lease: false`): never aborted. */
const NEVER_ABORTED = new AbortController().signal;

/** The save option that fences a write with the lease's token (none without a lease). */
function fence(lease: RunLease | undefined): { fencingToken?: number } {
  return lease ? { fencingToken: lease.fencingToken } : {};
}

const EXPECTED_SHAPE =
  'a node returns { next, updates }: e.g. return { next: "review", updates: { draft } } (next: a node name or END)';

/** Why a node's return value is not a {@link NodeResult}, or `undefined` when it is one. */
function resultShapeProblem(out: unknown): string | undefined {
  if (Array.isArray(out)) {
    const [next] = out as unknown[];
    return `the node returned an array${typeof next === "string" ? ` (${JSON.stringify(next)}, …)` : ""}, the (next, updates) tuple of the original design; ${EXPECTED_SHAPE}`;
  }
  if (typeof out !== "object" || out === null) return `the node returned ${typeof out}; ${EXPECTED_SHAPE}`;
  const next = (out as { next?: unknown }).next;
  if (typeof next !== "string") {
    const keys = Object.keys(out);
    return `the node returned an object without a string "next" (keys: ${keys.length ? keys.join(", ") : "none"}); ${EXPECTED_SHAPE}`;
  }
  const updates = (out as { updates?: unknown }).updates;
  if (updates !== undefined && updates !== null && (typeof updates !== "object" || Array.isArray(updates))) {
    return `the node's "updates" is ${Array.isArray(updates) ? "an array" : typeof updates}, not an object; ${EXPECTED_SHAPE}`;
  }
  return undefined;
}

function merge(memory: JsonObject, updates: Record<string, JsonValue | undefined> | undefined): JsonObject {
  if (!updates) return memory;
  const out: JsonObject = { ...memory };
  for (const [k, v] of Object.entries(updates)) {
    if (v === undefined) delete out[k];
    else setOwn(out, k, v); // a key named "__proto__" is data, never a prototype change
  }
  return out;
}

function result<T extends WorkflowState>(state: T): GraphRunResult<T> {
  return {
    status: state.isFinished ? "finished" : state.status === "waiting" ? "waiting" : "running",
    state,
    interrupt: state.pendingInterrupt ?? undefined,
  };
}
