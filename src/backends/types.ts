/**
 * The storage contract every backend implements.
 *
 * Required (the seed's simple contract, each method sync or async):
 * `save(key, state)`, `load(key)`, `delete(key)` → boolean, `listKeys()` → string[].
 * A custom backend may signal a missing key from `load` by throwing
 * `StateNotFoundError` or by returning `undefined`.
 *
 * Optional capabilities (built-in backends implement them; the persistence
 * layer uses them when present and falls back to whole-state `save` when not):
 * - `write`/`read`: revisions with compare-and-set and O(new messages) appends;
 * - `iterHistory`: streaming read of a history with bounded memory;
 * - `readHeader`: the header (meta, config, state) without the history, so
 *   that with `iterHistory` a reader (`dumplings show`/`export`) never holds
 *   a big history in memory;
 * - `close`: release connections/handles;
 * - `storeId`: which store the instance reads and writes (revision tracking follows it).
 *
 * Idea after unjs/unstorage's small required driver interface with optional
 * methods the core derives when absent.
 *
 * @module
 */

import type { Message } from "../core/messages.js";
import type { AgentState } from "../core/state.js";

/** A value or a promise of it: backend methods may be sync or async. */
export type MaybePromise<T> = T | Promise<T>;

/** Options of a revision-aware write. */
export interface WriteOptions {
  /**
   * Compare-and-set: the revision the writer last loaded or saved. `null`
   * means "the key must not exist yet". `undefined` means no check (a plain
   * upsert). On mismatch the write throws `ConflictError` and writes nothing.
   */
  expectedRevision?: number | null;
  /**
   * How many leading history messages are already stored unchanged at
   * `expectedRevision`. When given (with `expectedRevision`), the backend
   * stores only `state.history.slice(baseLength)` plus the header: a save
   * costs O(new messages). When absent, the whole history is rewritten.
   */
  baseLength?: number;
  /** Overwrite whatever is stored, ignoring `expectedRevision`. @default false */
  force?: boolean;
}

/** Result of a revision-aware write. */
export interface WriteResult {
  /** The new stored revision (1 for a first write, +1 per write). */
  revision: number;
  /** Number of history messages physically written by this call. */
  written: number;
  /** True when the whole history was rewritten rather than appended. */
  rewritten: boolean;
}

/** A state read together with its revision. */
export interface ReadResult {
  state: AgentState;
  /** Stored revision (≥ 1). */
  revision: number;
}

/**
 * Options of {@link StateBackend.iterHistory}.
 */
export interface HistoryReadOptions {
  /**
   * Stream the history of exactly this stored revision (the `revision` a
   * {@link StateBackend.readHeader} returned), so a header and a history read
   * one after the other are one saved state. When the key is stored at another
   * revision as the stream starts, the first `next()` throws `ConflictError`
   * (`expectedRevision` = this, `actualRevision` = the stored one) and nothing
   * is returned: read the header again. Saves made after the stream started
   * do not change what it returns (see {@link StateBackend.iterHistory}).
   */
  revision?: number;
}

/**
 * Options of {@link StateBackend.readHeader}.
 */
export interface HeaderReadOptions {
  /**
   * A reader that shows a header (such as `dumplings show`) and needs only the
   * start of a long value: a backend MAY return a `[CONFIG]`/`[STATE]` value
   * longer than this many UTF-16 code units clipped, and list it in
   * {@link HeaderResult.clipped}, so that a 50 MB prompt is never held in
   * memory. A backend may also ignore it and return every value whole
   * (FileBackend clips only values on header lines over 64 KB of a plain
   * `.duas`; the database backends return every value whole).
   * Never pass a clipped header to a save. An integer >= 0.
   * @default undefined (every value whole)
   */
  clipAt?: number;
}

/** A header value that {@link StateBackend.readHeader} returned clipped (see {@link HeaderReadOptions.clipAt}). */
export interface ClippedValue {
  /** Where the value is: `config.prompt`, `config.modelName`, `state.currentTaskId` or `state.fields.<name>`. */
  path: string;
  /**
   * `string`: the header holds the value's first `clipAt` code units in its place;
   * `json` (a `state.fields` value): the header holds `null` in its place, and `preview` is the start of its JSON text.
   */
  kind: "string" | "json";
  /** The first `clipAt` code units (of the string, or of the JSON text). */
  preview: string;
  /** The whole value's length in UTF-16 code units (of the string, or of its JSON text). */
  length: number;
}

/** A stored state's header (everything but the history), read by the optional {@link StateBackend.readHeader}. */
export interface HeaderResult {
  /** `meta` (its `messageCount` is the stored history's length), `config` and `state`. */
  header: Omit<AgentState, "history">;
  /** Stored revision (≥ 1), for backends with revisions. */
  revision?: number;
  /** The values returned clipped, when `clipAt` was given and the backend clips (absent or empty: none). */
  clipped?: ClippedValue[];
}

/**
 * The storage contract. Only the four seed methods are required.
 *
 * @example
 * const backend: StateBackend = {
 *   store: new Map(),
 *   save(key, state) { this.store.set(key, structuredClone(state)) },
 *   load(key) { return this.store.get(key) },
 *   delete(key) { return this.store.delete(key) },
 *   listKeys() { return [...this.store.keys()] },
 * };
 */
export interface StateBackend {
  /** Short name used in error messages and the registry, e.g. `"sqlite"`. */
  readonly name?: string;
  /**
   * Optional: what store this instance reads and writes, e.g. a file
   * backend's real directory or a database's URL and schema. Two instances
   * with the same `storeId` hold the same data, so an agent loaded through
   * one saves through the other with its revision (no `ConflictError`).
   * Without it, each instance is a store of its own.
   */
  readonly storeId?: string | undefined;
  /** Stores the whole state under `key` (upsert). */
  save(key: string, state: AgentState): MaybePromise<void>;
  /** Loads the state under `key`; a missing key throws `StateNotFoundError` or returns `undefined`. */
  load(key: string): MaybePromise<AgentState | undefined>;
  /** Deletes `key`; returns true when something was deleted. */
  delete(key: string): MaybePromise<boolean>;
  /** Every stored key, in no particular order. */
  listKeys(): MaybePromise<string[]>;

  /** Optional: revision-aware, append-capable write (see {@link WriteOptions}). */
  write?(key: string, state: AgentState, options?: WriteOptions): Promise<WriteResult>;
  /** Optional: load with the stored revision; `undefined` when missing. */
  read?(key: string): Promise<ReadResult | undefined>;
  /**
   * Optional: stream the history of `key` in order with bounded memory; throws `StateNotFoundError` when
   * missing, and `ConflictError` when `options.revision` is given and not the stored one (see {@link HistoryReadOptions}).
   * The stream is the history as stored when it started: saves that append meanwhile (a live agent's, in
   * this process or another) change nothing. A save that replaces the history (a rewrite, a truncation) or
   * a delete, meanwhile, is either not seen either (memory, file, SQLite and PostgreSQL read one snapshot) or makes
   * the stream throw `ConflictError` after part of it (Redis, between its pages; SQLite in memory; and
   * any save between pages of an injected SQLite database not in WAL mode): a stream never mixes two
   * histories. The CLI and the inspector read again after such a `ConflictError`.
   */
  iterHistory?(key: string, options?: HistoryReadOptions): AsyncIterable<Message>;
  /** Optional: the header of `key` without its history; `undefined` when missing (see {@link HeaderReadOptions}). */
  readHeader?(key: string, options?: HeaderReadOptions): Promise<HeaderResult | undefined>;
  /** Optional: release connections and file handles. */
  close?(): MaybePromise<void>;
}
