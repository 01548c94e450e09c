/**
 * The contract of a run's side channel (see `stream.ts` for what it carries
 * and its two implementations). Kept apart from the implementations so that
 * the executor (`context.ts`), which appends events, and the streams, which
 * read the current step to tag events, do not import each other.
 *
 * @module
 */
import type { JsonValue } from "../core/json.js";
import type { Journal } from "./journal.js";

/**
 * Which part of a run appended an event: the step attempt (`seq`, `attempt`;
 * absent outside a step body) and the executor (`fencingToken`).
 */
export interface EventOrigin {
  /** 0-based position of the step whose body appended the event. */
  seq?: number;
  /** 1-based attempt of that step. */
  attempt?: number;
  /** Fencing token of the executor that ran it (orders attempts across processes and operator retries). */
  fencingToken?: number;
}

/** One event of a run's side channel. */
export interface RunStreamEvent extends EventOrigin {
  /** 1-based position in the run's stream. */
  index: number;
  /** The run that appended it (present on every event appended with an origin, i.e. by a run). */
  runId?: string;
  data: JsonValue;
}

/** Options of {@link RunEventStream.subscribe}. */
export interface SubscribeOptions {
  /** Deliver events whose index is greater than this (resume point). @default 0 (from the start) */
  after?: number;
  /** Stops the subscription. */
  signal?: AbortSignal;
  /** Stop after delivering an event for which this returns true (e.g. `{ type: "end" }`). */
  until?: (event: RunStreamEvent) => boolean;
  /**
   * The run's journal, so that the subscription knows when no event will come. Read at the start and
   * after every poll that brought no event (`blockMs` of a `RedisRunStream`, 1 s for a `MemoryRunStream`):
   * - the run has finished (`completed`, `failed`, `cancelled`): the events after `after` are delivered,
   *   then the subscription ends; if the stream holds none of the run's events (expired by `ttlMs`, or
   *   deleted) it throws a `RunStreamError` (`reason: "gone"`) at once;
   * - the run is `running` but its lease expired by the journal's clock more than 1 s ago
   *   (`leaseExpiresAt + 1000 < journal.now()`: the process running it died, and no process waiting on the
   *   lease took the run over at its expiry): the events held are delivered, then a `RunStreamError`
   *   (`reason: "producer-lost"`), within the lease TTL + 1 s + one poll of the producer's death;
   * - the run is `pending`, `waiting` (for a signal, an approval or a timer) or `blocked`: the subscription
   *   stays open, since the run appends again when it resumes (end it with `signal`).
   *
   * Without it, a subscription ends only by `until` or `signal`: it waits forever on the stream of a
   * finished run, an expired stream or a dead producer.
   */
  journal?: Pick<Journal, "getRun" | "now">;
}

/** A per-run event stream. */
export interface RunEventStream {
  /**
   * Appends an event.
   *
   * `origin` tags the event with the step attempt and the executor that
   * produced it. The built-in streams, called without `origin` from inside the
   * run `runId` (its workflow code or a step body, e.g. through
   * `currentRun().emit`), take it from the current step; called from outside a
   * run, the event has no origin and no `runId`.
   *
   * @param runId - the run
   * @param data - the event (JSON)
   * @param origin - `{ seq?, attempt?, fencingToken? }` (non-negative integers)
   * @returns its index (1-based)
   * @throws {NonJsonValueError} when `data` is not JSON
   * @throws {TypeError} when an origin field is not a non-negative integer
   */
  append(runId: string, data: JsonValue, origin?: EventOrigin): Promise<number>;
  /** Events with index > `after` (at most `limit`). */
  read(runId: string, after?: number, limit?: number): Promise<RunStreamEvent[]>;
  /** Live events with index > `options.after`, first the stored ones, then new ones as they arrive. */
  subscribe(runId: string, options?: SubscribeOptions): AsyncIterable<RunStreamEvent>;
  /** Removes a run's stream. */
  delete(runId: string): Promise<void>;
  /** Releases connections the stream created. */
  close(): Promise<void>;
}
