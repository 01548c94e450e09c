/**
 * Leases: who holds a durable run's or a workflow's lease, and for how long.
 *
 * @module
 */
import { randomUUID } from "node:crypto";
import { hostname } from "node:os";
import { InvalidOptionError } from "./errors.js";
import { checkOptions, optionKeys } from "./options.js";

/**
 * A lease-owner id for a worker of this process: `<hostname>:<pid>:<8 random hex digits>`,
 * new at each call, so two workers of one process never take each other's lease back
 * (a holder with the same owner id does). Used by durable runs, `DurableWorker` and the
 * workflow runner when no `owner` is given.
 *
 * @returns the id, e.g. `web-3:4121:9f2c01ab`
 */
export function defaultOwner(): string {
  return `${hostname()}:${process.pid}:${randomUUID().slice(0, 8)}`;
}

/** Shortest lease accepted, in ms: renewed every third of it, it must outlive a renewal's round trip. */
export const MIN_LEASE_MS = 100;

/**
 * Longest lease (or wait for one) accepted, in ms: 2^31 − 1, about 24.8 days. Node's timers hold
 * no more (a longer one fires after 1 ms: a lease renewed every millisecond).
 */
export const MAX_LEASE_MS = 2_147_483_647;

/**
 * Checks a lease duration option (`leaseTtlMs`, `leaseWaitMs`).
 *
 * @param component - who takes it, e.g. `runDurable`
 * @param option - its name
 * @param value - the value given (undefined: `fallback`)
 * @param fallback - the default, in ms
 * @param min - the smallest value accepted, in ms @default MIN_LEASE_MS
 * @returns the value in whole ms
 * @throws {InvalidOptionError} for a value that is not a number of ms in `[min, MAX_LEASE_MS]`
 */
export function leaseMs(
  component: string,
  option: string,
  value: unknown,
  fallback: number,
  min = MIN_LEASE_MS,
): number {
  if (value === undefined) return fallback;
  if (typeof value === "number" && Number.isFinite(value) && value >= min && value <= MAX_LEASE_MS) {
    return Math.ceil(value);
  }
  throw new InvalidOptionError(
    component,
    option,
    `must be a number of ms from ${min} to ${MAX_LEASE_MS} (about 24.8 days), got ${JSON.stringify(value) ?? String(value)}`,
  );
}

/** Options of a journal's `acquireLease` (`Journal.acquireLease` in `durable/journal.ts`). */
export interface AcquireLeaseOptions {
  /**
   * Whether a live lease already held by the same `owner` id is taken back (with a new fencing
   * token, fencing the holder off). `true` suits a holder whose owner id names one execution (a
   * restarted worker with a stable name takes its lease back at once). `false`: a live lease is
   * refused to every taker, its own owner included, so the lease belongs to the one execution that
   * took it: `runDurable` (and so every `DurableWorker` slot) takes leases this way, and a second
   * execution of a live run under the same owner id waits or gets `LeaseHeldError` instead of
   * running a step whose first execution is still in progress. @default true
   */
  reentrant?: boolean;
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
      `must be true or false, got ${JSON.stringify(reentrant) ?? String(reentrant)}`,
    );
  }
  return reentrant ?? true;
}
