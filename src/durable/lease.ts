/**
 * An execution's hold on a run: the one lease loop of the durable engine, used by `runDurable` and
 * by the workflow graph runner (a workflow is a journal run).
 *
 * {@link RunLease.take} takes the run's lease in the journal (a new fencing token; not reentrant:
 * a live lease of the same owner id is another execution's), waiting for a live holder to release
 * it or to let it expire (by the journal's clock). While held it is renewed every third of its TTL;
 * a refused renewal means the lease was lost (an operator cancelled the run, or another executor
 * took it over after this one stalled past its TTL): {@link RunLease.signal} is aborted then, with a
 * {@link RunCancelledError} or a {@link StaleFencingTokenError} as its reason. The lease lives in
 * the journal, the source of truth; every write of the holder carries its token and is refused in
 * the journal's own transaction once the token is stale, so a holder that lost its lease writes
 * nothing, whether or not it noticed yet.
 *
 * Ideas from DBOS (one schema for all durable state, a workflow's executor recorded with it) and
 * Kleppmann's fencing tokens ("How to do distributed locking", 2016).
 *
 * @module
 */
import { InvalidOptionError, LeaseHeldError, StaleFencingTokenError } from "../core/errors.js";
import { checkOptions, optionKeys, shownValue } from "../core/options.js";
import { cancellationOf } from "./cancellation.js";
import type { RunCancelledError } from "./errors.js";
import type { Journal } from "./journal.js";
import type { AcquireLeaseOptions, LeaseResult, RunStatus } from "./journal-types.js";

export type { AcquireLeaseOptions } from "./journal-types.js";

/** Options of {@link RunLease.take}. */
export interface RunLeaseOptions {
  /** Lease owner id, shown as the holder in {@link LeaseHeldError}. */
  owner: string;
  /** Lease duration, ms (renewed every third of it). */
  ttlMs: number;
  /** How long to wait for a live holder, ms (`0`: throw {@link LeaseHeldError} at once). */
  waitMs: number;
  /**
   * How the {@link LeaseHeldError} names the run: `run` (a durable run, `runId`) or `workflow`
   * (a graph's workflow id, with the holder's fencing token). @default "run"
   */
  subject?: "run" | "workflow";
  /**
   * Called each time the lease is refused, before waiting again: `true` stops waiting and
   * {@link RunLease.take} returns `undefined` (e.g. the run has ended meanwhile).
   */
  stopWaiting?: () => Promise<boolean>;
  /**
   * Also checks every this many ms whether an operator cancelled the run, so a cancel is noticed
   * sooner than the next renewal (`0`, or a value ≥ a third of the TTL: only renewals notice).
   * @default 0
   */
  cancelCheckMs?: number;
}

const ACQUIRE_LEASE_KEYS = optionKeys<AcquireLeaseOptions>({ reentrant: true });

/**
 * Checks the options of a journal's `acquireLease` (shared by the stores).
 *
 * @param store - the journal's name, for the message
 * @param options - as given (undefined: the defaults)
 * @returns whether a live lease of the same owner is taken back
 * @throws {InvalidOptionError} on an unknown key, options that are not an object, or a `reentrant`
 *   that is not a boolean
 */
export function leaseReentrant(store: string, options: AcquireLeaseOptions | undefined): boolean {
  if (options === undefined) return true;
  if (options === null || typeof options !== "object") {
    throw new InvalidOptionError(`${store} acquireLease`, "options", `must be an object, got ${String(options)}`);
  }
  checkOptions(`${store} acquireLease`, options, ACQUIRE_LEASE_KEYS);
  const { reentrant } = options;
  if (reentrant !== undefined && typeof reentrant !== "boolean") {
    throw new InvalidOptionError(
      `${store} acquireLease`,
      "reentrant",
      `must be true or false, got ${shownValue(reentrant)}`,
    );
  }
  return reentrant ?? true;
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** A run's lease held by one execution (see the module comment). */
export class RunLease {
  private readonly abort = new AbortController();
  private readonly heartbeat: ReturnType<typeof setInterval>;
  private readonly cancelCheck: ReturnType<typeof setInterval> | undefined;
  /** `performance.now()` when the last successful renewal (or the acquisition) was sent. */
  private renewedAt: number;
  private renewing: Promise<void> | undefined;
  private checking = false;
  private released = false;
  private expiry: number;

  private constructor(
    private readonly journal: Journal,
    /** The run (a workflow's id). */
    readonly runId: string,
    /** The holder's owner id. */
    readonly owner: string,
    /** The lease's fencing token: every write of this execution carries it. */
    readonly fencingToken: number,
    /** The run's status when the lease was taken, when the journal tells. */
    readonly status: RunStatus | undefined,
    private readonly subject: "run" | "workflow",
    private readonly ttlMs: number,
    sentAt: number,
    expiresAt: number,
    cancelCheckMs: number,
  ) {
    this.renewedAt = sentAt;
    this.expiry = expiresAt;
    this.heartbeat = setInterval(
      () => {
        this.renew().catch(() => undefined); // a failed renewal: the next one, or the fenced writes, decide
      },
      Math.max(10, Math.floor(ttlMs / 3)),
    );
    this.heartbeat.unref();
    this.cancelCheck =
      cancelCheckMs > 0 && cancelCheckMs < Math.floor(ttlMs / 3)
        ? setInterval(() => this.checkCancelled(), cancelCheckMs)
        : undefined;
    this.cancelCheck?.unref();
  }

  /**
   * Takes `runId`'s lease (the run must exist), waiting up to `options.waitMs` for a live holder.
   *
   * @returns the held lease, renewed in the background until {@link release}; `undefined` when
   *   `options.stopWaiting` said to stop
   * @throws {LeaseHeldError} when another execution (of any owner) still holds it after `waitMs`
   * @throws {RunNotFoundError} when the run does not exist
   * @throws {BackendError} when the journal fails
   */
  static async take(journal: Journal, runId: string, options: RunLeaseOptions): Promise<RunLease | undefined> {
    const deadline = Date.now() + options.waitMs;
    for (;;) {
      const sentAt = performance.now();
      const lease: LeaseResult = await journal.acquireLease(runId, options.owner, options.ttlMs, { reentrant: false });
      if (lease.acquired) {
        return new RunLease(
          journal,
          runId,
          options.owner,
          lease.fencingToken,
          lease.status,
          options.subject ?? "run",
          options.ttlMs,
          sentAt,
          lease.expiresAt,
          options.cancelCheckMs ?? 0,
        );
      }
      if (options.stopWaiting && (await options.stopWaiting())) return undefined;
      if (Date.now() >= deadline) {
        if (options.subject !== "workflow") throw new LeaseHeldError(runId, lease.owner, lease.expiresAt);
        const holder = await journal.getRun(runId);
        throw new LeaseHeldError({
          workflowId: runId,
          owner: lease.owner,
          expiresAt: lease.expiresAt,
          fencingToken: holder?.fencingToken,
        });
      }
      // the lease's expiry is on the journal's clock
      const left = lease.expiresAt - (await journal.now());
      await sleep(Math.max(20, Math.min(250, left + 5, deadline - Date.now())));
    }
  }

  /** Aborted when the lease is lost (reason: a {@link RunCancelledError} or a {@link StaleFencingTokenError}). */
  get signal(): AbortSignal {
    return this.abort.signal;
  }

  /** Why the lease was lost, or undefined while it is held. */
  get lost(): StaleFencingTokenError | RunCancelledError | undefined {
    return this.abort.signal.aborted
      ? (this.abort.signal.reason as StaleFencingTokenError | RunCancelledError)
      : undefined;
  }

  /** When the lease expires unless renewed, epoch ms (the journal's clock), as of the last renewal. */
  get expiresAt(): number {
    return this.expiry;
  }

  /**
   * Before a side effect: throws when the lease is known lost, and renews it first when the
   * background renewal is late (more than half a lease since the last one), so a start is
   * recorded with most of a lease ahead of it.
   *
   * @throws {StaleFencingTokenError} or {@link RunCancelledError} when the lease is lost
   */
  async fresh(): Promise<void> {
    if (this.lost) throw this.lost;
    if (performance.now() - this.renewedAt > this.ttlMs / 2) {
      await this.renew().catch(() => undefined); // any failure: the fenced start decides
      if (this.lost) throw this.lost;
    }
  }

  /** One renewal at a time; a refused one marks the lease lost and aborts {@link signal}. */
  private renew(): Promise<void> {
    this.renewing ??= (async () => {
      const sentAt = performance.now();
      try {
        this.expiry = await this.journal.renewLease(this.runId, this.fencingToken, this.ttlMs);
        this.renewedAt = sentAt;
      } catch (e) {
        if (e instanceof StaleFencingTokenError && !this.released) await this.lose(e);
        throw e;
      } finally {
        this.renewing = undefined;
      }
    })();
    return this.renewing;
  }

  /**
   * Marks the lease lost: cancelled by an operator ({@link RunCancelledError}), or taken over by another
   * executor (the refusal; for a workflow, naming the holder and its token as they are now).
   */
  private async lose(error: StaleFencingTokenError): Promise<void> {
    if (this.abort.signal.aborted) return;
    let reason: StaleFencingTokenError | RunCancelledError = error;
    try {
      const cancelled = await cancellationOf(this.journal, this.runId);
      if (cancelled) reason = cancelled;
      else if (this.subject === "workflow") {
        const run = await this.journal.getRun(this.runId);
        reason = new StaleFencingTokenError({
          workflowId: this.runId,
          what: "lease renewal refused",
          fencingToken: this.fencingToken,
          lease: {
            token: run ? run.fencingToken : null,
            owner: run?.leaseOwner ?? null,
            expiresAt: run?.leaseExpiresAt ?? null,
          },
        });
      }
    } catch {
      // the journal is unreachable: the refusal itself says the lease is lost
    }
    this.stop();
    if (!this.abort.signal.aborted) this.abort.abort(reason);
  }

  private checkCancelled(): void {
    if (this.checking || this.abort.signal.aborted) return;
    this.checking = true;
    cancellationOf(this.journal, this.runId)
      .then((cancelled) => {
        if (cancelled && !this.abort.signal.aborted) {
          this.stop();
          this.abort.abort(cancelled);
        }
      })
      .catch(() => undefined) // a failed read: the next check or renewal tells
      .finally(() => {
        this.checking = false;
      });
  }

  private stop(): void {
    clearInterval(this.heartbeat);
    if (this.cancelCheck) clearInterval(this.cancelCheck);
  }

  /** Stops renewing and releases the lease (a failed release only makes the next taker wait for its expiry). */
  async release(): Promise<void> {
    if (this.released) return;
    this.released = true;
    this.stop();
    await this.renewing?.catch(() => undefined);
    await this.journal.releaseLease(this.runId, this.fencingToken).catch(() => undefined);
  }
}
