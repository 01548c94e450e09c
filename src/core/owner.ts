/**
 * Lease owners: who holds a durable run's or a workflow's lease.
 *
 * @module
 */
import { randomUUID } from "node:crypto";
import { hostname } from "node:os";

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
