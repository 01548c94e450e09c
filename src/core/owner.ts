/**
 * Leases: who holds a durable run's or a workflow's lease, and for how long.
 *
 * @module
 */
import { randomUUID } from "node:crypto";
import { hostname } from "node:os";
import { InvalidOptionError } from "./errors.js";
import { shownValue } from "./options.js";

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
    `must be a number of ms from ${min} to ${MAX_LEASE_MS} (about 24.8 days), got ${shownValue(value)}`,
  );
}
