/**
 * What the history streams of `SQLiteBackend` (`sqlite.ts`) hold while they run: the
 * snapshot connection a long stream reads its pages from, and, on a database no other process can
 * reach, the watch that tells a stream whether a save replaced the history it reads.
 *
 * @module
 */
import type * as BetterSqlite3 from "../drivers/sqlite-types.js";
import type { Body, HeadMetaRow, Sid } from "./sqlite-schema.js";

/**
 * A database no other process can reach (in memory, or a private temporary file): the saves of
 * this process that replace messages of a key (a rewrite, a truncation, a delete) while a history
 * stream of that key is open. Such a database has no second connection to hold a snapshot on:
 * its streams read each page anew and go on past a save only when none of these happened
 * (appends only), else throw `ConflictError`. One per database object (every backend on it).
 */
export class RewriteWatch {
  readonly #keys = new Map<string, { streams: number; rewrites: number }>();

  /** Starts watching `key` for a stream; returns the entry whose `rewrites` the stream compares. */
  watch(key: string): { streams: number; rewrites: number } {
    let entry = this.#keys.get(key);
    if (entry === undefined) {
      entry = { streams: 0, rewrites: 0 };
      this.#keys.set(key, entry);
    }
    entry.streams++;
    return entry;
  }

  /** A stream of `key` ended. */
  unwatch(key: string, entry: { streams: number }): void {
    if (--entry.streams === 0 && this.#keys.get(key) === entry) this.#keys.delete(key);
  }

  /** A save replaced (or a delete removed) stored messages of `key`: its open streams must not go on past it. */
  replaced(key: string): void {
    const entry = this.#keys.get(key);
    if (entry !== undefined) entry.rewrites++;
  }
}

/** The {@link RewriteWatch} of each private database (in memory or temporary) open in this process. */
export const rewriteWatches = new WeakMap<BetterSqlite3.Database, RewriteWatch>();

/** A read-only connection of the file for history streams (see `SqliteDriver.openReader`), with its statements. */
export interface Reader {
  db: BetterSqlite3.Database;
  headMeta: BetterSqlite3.Statement<[string], HeadMetaRow>;
  page: BetterSqlite3.Statement<[Sid, number, Sid, number], [number, Body]>;
}

/** What an unfinished history stream holds, released when it ends, by the backend's `close()`, or when it is garbage-collected. */
export interface StreamHold {
  /** The open streams' holds of the backend (those holding a snapshot connection). */
  readonly owner: Set<StreamHold>;
  /**
   * The reader whose read transaction is the stream's snapshot, from which it reads its pages
   * (a history of more than one page, in a file in WAL mode).
   */
  snapshot?: Reader;
  /** The stream's entry in its private database's {@link RewriteWatch}, and its `rewrites` as the stream started. */
  watch?: { log: RewriteWatch; key: string; entry: { streams: number; rewrites: number }; seen: number };
}

/**
 * Ends a stream's snapshot and its watch (idempotent). The reader is closed, unless `keep` takes it
 * (its transaction ended) for another stream.
 */
export function release(hold: StreamHold, keep?: (reader: Reader) => boolean): void {
  hold.owner.delete(hold);
  abandonedStreams.unregister(hold);
  const snapshot = hold.snapshot;
  hold.snapshot = undefined;
  if (snapshot?.db.open && !keep?.(snapshot)) snapshot.db.close();
  const watch = hold.watch;
  hold.watch = undefined;
  if (watch !== undefined) watch.log.unwatch(watch.key, watch.entry);
}

/**
 * A stream dropped unfinished (neither read to its end nor `return()`ed) would hold its snapshot,
 * and so keep the WAL from being reset, until the backend closes: released when it is garbage-collected.
 */
export const abandonedStreams = new FinalizationRegistry<StreamHold>(release);
