/**
 * The storage contract of {@link DumplingsSaver}: rows of bytes, no LangGraph
 * types. One implementation per store — memory (`storage-memory.ts`), SQL
 * written once for SQLite and PostgreSQL (`storage-sql.ts`, thin
 * `storage-sqlite.ts` / `storage-postgres.ts`), Redis (`storage-redis.ts`) — each a few plain
 * operations; the saver does the serialisation and the delta encoding of
 * channel values (`channels.ts`).
 *
 * @module
 */

/** One checkpoint without its channel values (they are stored as {@link BlobRow}s by version). */
export interface CheckpointRow {
  threadId: string;
  ns: string;
  checkpointId: string;
  /** The checkpoint this one was written after (the `checkpoint_id` of the config given to `put`). */
  parentId: string | null;
  /** The serialised checkpoint with `channel_values` emptied (serde type and bytes). */
  type: string;
  checkpoint: Uint8Array;
  /** The serialised metadata (serde type and bytes). */
  metadataType: string;
  metadata: Uint8Array;
}

/**
 * How a channel's value at one version is stored:
 * - `full`: the whole value;
 * - `delta`: the items appended to an array since version `base` (of the same channel): the value is `base`'s value followed by these items;
 * - `empty`: the channel has no value at this version.
 */
export type BlobKind = "full" | "delta" | "empty";

/** One channel value at one version (immutable once written). */
export interface BlobRow {
  channel: string;
  /** The channel version, as a string (`String(version)`). */
  version: string;
  kind: BlobKind;
  /** The version of the `full` row this row's chain ends at (its own version for a `full` or `empty` row). */
  anchor: string;
  /** `delta`: the version this row extends; otherwise `null`. */
  base: string | null;
  /** Links to the anchor: 0 for `full`/`empty`, the base's depth + 1 for `delta`. */
  depth: number;
  /** The length of the value at this version when it is an array (0 for any other value or `empty`). */
  items: number;
  /** Serde type of `data`. */
  type: string;
  data: Uint8Array;
}

/** One pending write of a task against a checkpoint. */
export interface WriteRow {
  taskId: string;
  /** Position in the task's writes, or the negative index LangGraph gives its special channels (`WRITES_IDX_MAP`). */
  idx: number;
  channel: string;
  /** LangGraph's task path (`""` when not given). */
  taskPath: string;
  type: string;
  data: Uint8Array;
}

/** Which checkpoints `listCheckpoints` returns, newest (greatest id) first. */
export interface CheckpointQuery {
  /** One thread, or every thread when absent. */
  threadId?: string;
  /** One namespace, or every namespace when absent. */
  ns?: string;
  /** Exactly this checkpoint. */
  checkpointId?: string;
  /** Only ids less than this one. */
  before?: string;
  /** At most this many rows. */
  limit?: number;
}

/** What a store of {@link DumplingsSaver} does. Every method may throw `BackendError`. */
export interface SaverStorage {
  /** `memory`, `sqlite`, `postgres` or `redis`: the store's name in errors. */
  readonly name: string;
  /** Writes one checkpoint and its new channel rows in one atomic step; an existing row is left as is. */
  putCheckpoint(row: CheckpointRow, blobs: readonly BlobRow[]): Promise<void>;
  /** One checkpoint, or the newest of the thread and namespace when `checkpointId` is undefined. */
  getCheckpoint(threadId: string, ns: string, checkpointId?: string): Promise<CheckpointRow | undefined>;
  /** Checkpoints newest first (by id within a thread and namespace). */
  listCheckpoints(query: CheckpointQuery): AsyncIterable<CheckpointRow>;
  /**
   * The rows of the wanted `(channel, version)` pairs together with every row
   * sharing their `(channel, anchor)`: all a caller needs to rebuild the
   * wanted values in one read. Missing pairs are simply absent.
   */
  getBlobs(threadId: string, ns: string, wanted: readonly { channel: string; version: string }[]): Promise<BlobRow[]>;
  /**
   * Stores writes of one checkpoint. A row whose `(taskId, idx)` exists is
   * kept when `idx >= 0` (a retried task writes the same thing) and replaced
   * when `idx < 0` (LangGraph's special channels: error, interrupt, resume).
   */
  putWrites(threadId: string, ns: string, checkpointId: string, rows: readonly WriteRow[]): Promise<void>;
  /** The writes of one checkpoint, in any order. */
  getWrites(threadId: string, ns: string, checkpointId: string): Promise<WriteRow[]>;
  /** Removes every checkpoint, value and write of a thread (all namespaces). */
  deleteThread(threadId: string): Promise<void>;
  /** Releases what the store opened (never an injected database, pool or client). */
  close(): Promise<void>;
}
