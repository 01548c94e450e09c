/**
 * A worker's hold on one workflow while the runner runs it: the lease of the
 * cold store (`ColdStore.acquireLease`), taken before any node runs, renewed
 * in the background while the worker runs the workflow (every third of the
 * lease) and released when it stops — the same lease, owner, expiry and
 * fencing token as a durable run's executor holds (`durable/run.ts`).
 *
 * The lease lives in the cold store, the source of truth, never in the Redis
 * hot tier (a cache that may lose a key or fail over). A holder that dies
 * (crash, `kill -9`) stops renewing; its lease expires (by the store's clock)
 * and the next worker takes it over with a higher fencing token. From then
 * on the writes of the old holder carry a stale token and are refused in the
 * store's own transaction: a worker paused past its lease can neither commit
 * a checkpoint nor start a side effect. The holder learns of a takeover at
 * its next renewal: its `signal` is aborted then.
 *
 * @module
 */

import { LeaseHeldError, StaleFencingTokenError } from "../core/errors.js";
import type { ColdStore } from "../durable/checkpoints/contract.js";

/** How long a workflow's lease lasts without renewal, ms. */
export const DEFAULT_WORKFLOW_LEASE_TTL_MS = 30_000;

/** The lease methods of a cold store that keeps leases. */
export type LeasingColdStore = Required<Pick<ColdStore, "acquireLease" | "renewLease" | "releaseLease">>;

/** Whether a cold store keeps leases (the built-in SQLite and PostgreSQL stores do). */
export function keepsLeases(cold: ColdStore): cold is ColdStore & LeasingColdStore {
  return (
    typeof cold.acquireLease === "function" &&
    typeof cold.renewLease === "function" &&
    typeof cold.releaseLease === "function"
  );
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** A workflow's lease held by this worker (see the module comment). */
export class HeldLease {
  /** Why the lease was lost (a refused renewal), once it was. */
  private lostError: StaleFencingTokenError | undefined;
  private readonly abort = new AbortController();
  private readonly heartbeat: ReturnType<typeof setInterval>;
  /** `performance.now()` when the last successful renewal (or the acquisition) was sent. */
  private renewedAt: number;
  private renewing: Promise<void> | undefined;
  private released = false;
  /** When the lease expires unless renewed, epoch ms (store clock), as of the last renewal. */
  private expiry: number;

  private constructor(
    private readonly cold: LeasingColdStore,
    /** The workflow. */
    readonly workflowId: string,
    /** This worker's owner id. */
    readonly owner: string,
    /** The lease's fencing token: every write of this worker carries it. */
    readonly fencingToken: number,
    /** Lease duration, ms. */
    private readonly ttlMs: number,
    sentAt: number,
    expiresAt: number,
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
  }

  /**
   * Takes `workflowId`'s lease, waiting up to `waitMs` for a live holder to release it or to
   * let it expire.
   *
   * @returns the held lease, renewed in the background until {@link release}
   * @throws {LeaseHeldError} when another live owner still holds it after `waitMs`
   * @throws {BackendError} when the cold store fails
   */
  static async acquire(
    cold: LeasingColdStore,
    workflowId: string,
    options: { owner: string; ttlMs: number; waitMs: number },
  ): Promise<HeldLease> {
    const deadline = Date.now() + options.waitMs;
    for (;;) {
      const sentAt = performance.now();
      const lease = await cold.acquireLease(workflowId, options.owner, options.ttlMs);
      if (lease.acquired) {
        return new HeldLease(
          cold,
          workflowId,
          options.owner,
          lease.fencingToken,
          options.ttlMs,
          sentAt,
          lease.expiresAt,
        );
      }
      const left = deadline - Date.now();
      if (left <= 0)
        throw new LeaseHeldError({
          workflowId,
          owner: lease.owner,
          expiresAt: lease.expiresAt,
          fencingToken: lease.fencingToken,
        });
      await sleep(Math.max(10, Math.min(250, Math.floor(options.ttlMs / 4), left)));
    }
  }

  /** Aborted (reason: a {@link StaleFencingTokenError}) when a renewal finds the lease taken over. */
  get signal(): AbortSignal {
    return this.abort.signal;
  }

  /** When the lease expires unless renewed, epoch ms (the store's clock), as of the last renewal. */
  get expiresAt(): number {
    return this.expiry;
  }

  /** The reason the lease was lost, or undefined while it is held. */
  get lost(): StaleFencingTokenError | undefined {
    return this.lostError;
  }

  /**
   * Before a side effect: throws when the lease is known lost, and renews it first when the
   * background renewal is late (more than half a lease since the last one), so a start is
   * recorded with most of a lease ahead of it.
   *
   * @throws {StaleFencingTokenError} when the lease is lost
   */
  async fresh(): Promise<void> {
    if (this.lostError) throw this.lostError;
    if (performance.now() - this.renewedAt > this.ttlMs / 2) {
      await this.renew().catch((e: unknown) => {
        if (e instanceof StaleFencingTokenError) throw e;
        // any other failure: the fenced start decides (it checks the lease by the store's clock)
      });
    }
  }

  /** One renewal at a time; a refused one marks the lease lost and aborts {@link signal}. */
  private renew(): Promise<void> {
    this.renewing ??= (async () => {
      const sentAt = performance.now();
      try {
        this.expiry = await this.cold.renewLease(this.workflowId, this.fencingToken, this.ttlMs);
        this.renewedAt = sentAt;
      } catch (e) {
        if (e instanceof StaleFencingTokenError && !this.released) {
          this.lostError ??= e;
          clearInterval(this.heartbeat);
          this.abort.abort(this.lostError);
        }
        throw e;
      } finally {
        this.renewing = undefined;
      }
    })();
    return this.renewing;
  }

  /** Stops renewing and releases the lease (a failed release only makes the next taker wait for its expiry). */
  async release(): Promise<void> {
    if (this.released) return;
    this.released = true;
    clearInterval(this.heartbeat);
    await this.renewing?.catch(() => undefined);
    if (!this.lostError) await this.cold.releaseLease(this.workflowId, this.fencingToken).catch(() => undefined);
  }
}
