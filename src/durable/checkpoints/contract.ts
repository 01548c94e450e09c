/**
 * The contract of a cold (source-of-truth) checkpoint store. The built-in ones,
 * `SqliteColdStore` (`cold-sqlite.ts`, the embedded default) and
 * `PostgresColdStore` (`cold-postgres.ts`), are the workflow store over a durable
 * journal (`journal-store.ts`): a workflow is a journal run, its checkpoints,
 * side-effect records and node failures are steps of that run (`durable_steps`),
 * its large `sharedMemory` values are journal blobs (`durable_blobs`,
 * content-addressed, written with the first checkpoint that references them and
 * deleted with the last), and its lease is the run's lease (`durable_runs`). A
 * `workflow_snapshots` view answers the original design's query for the newest
 * checkpoint. The tables of earlier releases (`workflows`, `workflow_snapshots`
 * and its month tables, `workflow_step_errors`, `workflow_idempotency`,
 * `workflow_blob_refs`, `workflow_blobs`, `workflow_leases`,
 * `workflow_lease_floor`) are moved into the journal when a store opens them
 * (`journal-migrate.ts`).
 *
 * **Leases and fencing.** The graph runner takes a workflow's lease in the journal of a
 * store over one ({@link JournalColdStore}), as a durable run's executor does
 * (`durable/lease.ts`): one execution at a time, a new fencing token each time; the
 * writes a worker makes while it
 * runs the workflow carry that token (`write`, `recordError`, `idempotencyBegin`,
 * `idempotencyAbandon`) and are refused with {@link WorkflowLeaseLostError} (nothing
 * written) once another worker took the lease over, so a worker paused past its lease
 * can neither commit a checkpoint nor start a side effect.
 *
 * @module
 */
import type { JsonObject, JsonValue } from "../../core/json.js";
import { decodeRunCursor, runCursor } from "../journal-list.js";

/** Status of a workflow in its summary: the state's status, or `failed` after a node threw. */
export type WorkflowRowStatus = "running" | "waiting" | "finished" | "failed";

/** One snapshot row as stored. */
export interface StoredSnapshot {
  workflowId: string;
  stepIndex: number;
  /** The node (or pseudo-step such as `__resume__`) that produced this checkpoint. */
  nodeName: string;
  /** The state, JSON text (large values replaced by blob references). */
  stateJson: string;
  /**
   * The state already parsed, when the store read it parsed (the journal-backed stores): equal to
   * `JSON.parse(stateJson)`, a fresh value of this read that the reader may change. Absent: parse `stateJson`.
   */
  state?: JsonValue;
  /** ms since the epoch. */
  createdAt: number;
}

/** A snapshot row to write, with its summary and blob references. */
export interface SnapshotWrite extends StoredSnapshot {
  sessionId: string;
  status: WorkflowRowStatus;
  currentNode: string;
  parentWorkflowId: string | null;
  /**
   * Oldest step whose side-effect records may still be replayed: the start step of an
   * interrupted node run, else this step. Records of earlier steps are pruned.
   */
  activeStep: number;
  /**
   * Whether the state is taken in the middle of a node run (`nodeRun` set: a node waiting on an
   * interrupt), so it does not resume alone: the side-effect records of that node run are still
   * needed. Absent: read from the state.
   */
  inNode?: boolean;
  /** Blob references held by the state. */
  blobRefs: string[];
  /**
   * The bytes of each reference in `blobRefs`, when the blobs are kept by the cold store itself
   * (`CheckpointStore`'s default, for a store with {@link ColdStore.readBlob}): the store writes those
   * it does not hold yet in the transaction of this write, so a snapshot never names a blob that is
   * not stored, and an unchanged value already stored is not written again. Absent when the blobs
   * live in a separate blob store (they were put there before the write).
   */
  blobs?: ReadonlyMap<string, Uint8Array>;
  /**
   * `stateJson` as UTF-8 bytes, when the writer has them (`CheckpointStore.save` does, and then
   * decodes `stateJson` only when a store reads it): a store may write these bytes instead.
   */
  stateBytes?: Uint8Array;
}

/** A workflow's summary row. */
export interface WorkflowSummary {
  workflowId: string;
  sessionId: string;
  status: WorkflowRowStatus;
  /** Step index of the newest checkpoint. */
  latestStep: number;
  /** Node that will run next (`__end__` when finished). */
  currentNode: string;
  /** Workflow this one was forked from, else null. */
  parentWorkflowId: string | null;
  /** ms since the epoch. */
  createdAt: number;
  /** ms since the epoch of the newest checkpoint or recorded error. */
  updatedAt: number;
}

/** A node failure recorded with its step. */
export interface StepErrorRecord {
  workflowId: string;
  /** Step of the checkpoint the failing node started from (the last good one). */
  stepIndex: number;
  nodeName: string;
  /** `{ name, message, code?, stack? }`. */
  error: JsonObject;
  createdAt: number;
}

/** The record of a guarded side effect. */
export interface IdempotencyRecord {
  key: string;
  workflowId: string;
  stepIndex: number;
  name: string;
  status: "started" | "finished";
  /** JSON text of the result when finished. */
  resultJson: string | null;
  startedAt: number;
  finishedAt: number | null;
}

/** One month of a cold store that splits its snapshots by month ({@link ColdStore.months}). */
export interface SnapshotMonth {
  /**
   * `YYYY-MM`, the UTC month of the rows' `created_at`; `"unpartitioned"` for the single
   * `workflow_snapshots` table (an archive written before the split, or PostgreSQL).
   */
  month: string;
  /** Number of snapshot rows. */
  snapshots: number;
  /** `created_at` of the oldest row, ms since the epoch; null when empty. */
  oldestAt: number | null;
  /** `created_at` of the newest row, ms since the epoch; null when empty. */
  newestAt: number | null;
}

/** What {@link ColdStore.dropMonth} did. */
export interface DropMonthResult {
  /** `YYYY-MM`. */
  month: string;
  /** Rows deleted with the month. */
  deletedSnapshots: number;
  /** Each workflow's newest `keepLast` rows that lived in the month, moved to the current month so it stays resumable. */
  carriedForward: number;
  /** The file the whole month was copied to before it was dropped, or null. */
  archivedTo: string | null;
  /**
   * Blob references no snapshot holds any more (for the blob store to delete); a store over a journal
   * names them only when asked ({@link ColdOrphanOptions.orphanRefs}).
   */
  orphanRefs: string[];
  /** Blobs the store deleted itself with the month's records (a store over a journal: its own blobs). */
  deletedBlobs?: number;
}

/**
 * What a caller of {@link ColdStore.deleteWorkflow}, {@link ColdStore.prune} and
 * {@link ColdStore.dropMonth} asks about blobs kept outside the store (a `BlobStore` of its own).
 */
export interface ColdOrphanOptions {
  /**
   * Name in `orphanRefs` every blob reference the deleted checkpoints held that no checkpoint left
   * holds (found by reading the checkpoints before and after). `CheckpointStore` asks for it only
   * when its blobs live outside the store; a store over a journal otherwise names none, since the
   * journal deletes its own blobs with their last reference.
   * @default false
   */
  orphanRefs?: boolean;
}

/** Options of {@link ColdStore.prune} beyond the cutoff. */
export interface ColdPruneOptions {
  /**
   * `incremental` (default): SQLite returns the pages the prune freed with
   * `PRAGMA incremental_vacuum`. `full`: also rewrite the whole database
   * (`VACUUM` on SQLite — needs free disk about the file's size and holds the
   * write lock meanwhile; `VACUUM (FULL)` of the workflow tables on PostgreSQL,
   * which locks them meanwhile).
   * @default "incremental"
   */
  vacuum?: "incremental" | "full";
  /**
   * Stores that split by month: months that end before the cutoff are dropped
   * whole (each workflow's newest `keepLast` rows carried forward), and copied
   * first to `<archiveDir>/workflow_snapshots_YYYY_MM.db` when this is given.
   */
  archiveDir?: string;
}

/**
 * Result of {@link ColdStore.acquireLease} (the shape of a durable run's lease):
 * taken, with the new fencing token and the expiry; or held by another live
 * owner, with its expiry and token. Times are epoch ms on the store's clock.
 */
export type WorkflowLeaseResult =
  | { acquired: true; fencingToken: number; expiresAt: number }
  | { acquired: false; owner: string; expiresAt: number; fencingToken: number };

/** The lease a fenced write is made under: the workflow and the writer's fencing token. */
export interface WorkflowFence {
  workflowId: string;
  fencingToken: number;
}

/**
 * Keyset position for {@link ColdStore.list}: the last workflow of the previous page. A listing is
 * newest created first by `(createdAt, workflowId)` (both descending; ids compared byte by byte, UTF-8),
 * two keys that never change, so a walk lists each workflow once while workflows change.
 */
export interface ListCursor {
  /** The workflow's `createdAt` (epoch ms). */
  createdAt: number;
  workflowId: string;
}

/** Implemented by every cold store. All methods are async; SQLite's run synchronously inside. */
export interface ColdStore {
  /** `sqlite` or `postgres`, used in error messages. */
  readonly name: string;
  /**
   * Optional: where the store keeps its data, for messages: an SQLite file's absolute path, or
   * `postgres:<schema>`. An absolute file path also names the `blobs` directory beside it, one of
   * the directories `CheckpointStore` reads blobs of dumplings-ai 0.1 from.
   */
  readonly location?: string;
  /** Creates tables and indexes if missing. Idempotent. */
  init(): Promise<void>;
  /**
   * Writes one snapshot and updates the summary, atomically.
   * `expectedLatest`: `undefined` = upsert without check; `null` = the workflow must not exist;
   * a number = the summary's `latest_step` must equal it (compare-and-set).
   * `fencingToken`: the writer's lease token; the write is made only while it is the
   * workflow's current lease (checked in the same transaction).
   * @throws {ConflictError} when the compare-and-set fails (nothing written)
   * @throws {WorkflowLeaseLostError} when `fencingToken` is not the current lease (nothing written)
   */
  write(row: SnapshotWrite, expectedLatest: number | null | undefined, fencingToken?: number): Promise<void>;
  read(workflowId: string, stepIndex: number): Promise<StoredSnapshot | undefined>;
  latest(workflowId: string): Promise<StoredSnapshot | undefined>;
  summary(workflowId: string): Promise<WorkflowSummary | undefined>;
  /** Optional: the step index of the newest checkpoint alone (cheaper than {@link ColdStore.summary}); undefined without one. */
  newestStep?(workflowId: string): Promise<number | undefined>;
  history(workflowId: string): Promise<StoredSnapshot[]>;
  list(query: { status?: WorkflowRowStatus; limit: number; after?: ListCursor }): Promise<WorkflowSummary[]>;
  /** The database's plan for the `list` query, as text (for tests and diagnostics). */
  explainList(status?: WorkflowRowStatus): Promise<string>;
  /**
   * Deletes every row of a workflow; returns whether it existed and the blob refs no longer referenced
   * (a store over a journal names them only with `options.orphanRefs`). A store that keeps leases also ends the workflow's lease in the same transaction (frees it and
   * raises its fencing token), so no token from before the delete passes a fence again.
   */
  deleteWorkflow(workflowId: string, options?: ColdOrphanOptions): Promise<{ existed: boolean; orphanRefs: string[] }>;
  /**
   * Deletes snapshots created before `cutoff` (ms) except each workflow's newest `keepLast` steps.
   * A store split by month drops the months that end before the cutoff whole (archiving them
   * first with `options.archiveDir`); `options.vacuum` asks for a full vacuum afterwards.
   * @returns number of snapshot rows deleted, blob refs no longer referenced (a store over a journal:
   *   only with `options.orphanRefs`), the months dropped, and
   *   `deletedBlobs`: blobs the store deleted itself with the records, when it cannot name them in
   *   `orphanRefs` (a store over a journal, which deletes a blob with its last reference)
   */
  prune(
    cutoff: number,
    keepLast: number,
    options?: ColdPruneOptions & ColdOrphanOptions,
  ): Promise<{
    deletedSnapshots: number;
    orphanRefs: string[];
    droppedMonths?: DropMonthResult[];
    deletedBlobs?: number;
  }>;
  /** The snapshot tables with their row counts (optional: stores that split by month). */
  months?(): Promise<SnapshotMonth[]>;
  /**
   * Drops one past month whole (optional: stores that split by month), after copying it to
   * `archiveTo` when given; each workflow's newest `keepLast` rows in it are carried forward.
   * @throws {InvalidOptionError} for a malformed, current or future month, one the store does
   *   not hold, or an `archiveTo` file that exists (nothing is changed)
   */
  dropMonth?(
    month: string,
    options: { keepLast: number; archiveTo?: string } & ColdOrphanOptions,
  ): Promise<DropMonthResult>;
  /**
   * Records a node failure and marks the workflow `failed` (its checkpoints are untouched).
   * @throws {WorkflowLeaseLostError} when `fencingToken` is given and is not the current lease (nothing written)
   */
  recordError(record: StepErrorRecord, fencingToken?: number): Promise<void>;
  errors(workflowId: string): Promise<StepErrorRecord[]>;
  /**
   * Atomically records the start of a side effect unless a record exists. With
   * `fencingToken`, only while it is `workflowId`'s current lease and that lease has not
   * expired (by the store's clock): a worker past its lease starts nothing.
   * @returns the existing record, or `undefined` when this call recorded the start
   * @throws {WorkflowLeaseLostError} when `fencingToken` is stale, released or expired (nothing written)
   */
  idempotencyBegin(
    key: string,
    info: { workflowId: string; stepIndex: number; name: string; now: number; fencingToken?: number },
  ): Promise<IdempotencyRecord | undefined>;
  /** Records the result of a started side effect. */
  idempotencyFinish(key: string, resultJson: string, now: number): Promise<void>;
  /**
   * Removes a started record (the side effect threw: it may be retried). With `fence`, only
   * while its token is the workflow's current lease; else the record stays (the new holder
   * reconciles it).
   */
  idempotencyAbandon(key: string, fence?: WorkflowFence): Promise<void>;
  /**
   * Optional (leases): takes `workflowId`'s lease for `owner` for `ttlMs` when it is free,
   * expired, or already `owner`'s; taking it increments the fencing token (the first is 1). A
   * workflow's token never goes back, whatever `deleteWorkflow` or `prune` removed: a lease taken
   * after its row was pruned starts above every token the row had.
   * Expiry is judged by the store's clock and the new lease expires at store now + `ttlMs`.
   * @returns the new token and expiry, or the live holder
   * @deprecated the graph runner leases through the store's journal (`Journal.acquireLease`); removed in 0.3
   */
  acquireLease?(workflowId: string, owner: string, ttlMs: number): Promise<WorkflowLeaseResult>;
  /**
   * Optional (leases): extends the lease held with `fencingToken` to store now + `ttlMs`.
   * @returns the new expiry (epoch ms, store clock)
   * @throws {WorkflowLeaseLostError} when the token is not current or the lease was released
   * @deprecated the graph runner leases through the store's journal (`Journal.acquireLease`); removed in 0.3
   */
  renewLease?(workflowId: string, fencingToken: number, ttlMs: number): Promise<number>;
  /** Optional (leases): drops the lease held with `fencingToken` (nothing when it is stale). @deprecated the runner leases through the journal; removed in 0.3 */
  releaseLease?(workflowId: string, fencingToken: number): Promise<void>;
  /**
   * Optional capability: the store keeps blobs (large `sharedMemory` values) in its own database,
   * beside the checkpoints, so every process that opens the store reads them. A store that has it
   * also writes `row.blobs` in {@link ColdStore.write}'s transaction (those it does not hold yet)
   * and, in the transactions of {@link ColdStore.deleteWorkflow}, {@link ColdStore.prune} and
   * {@link ColdStore.dropMonth}, deletes the blobs no snapshot references any more (returned in
   * `orphanRefs`). `CheckpointStore` keeps its blobs there by default.
   *
   * @param ref - `sha256:<64 hex>`
   * @returns the bytes, or `undefined` when the store does not hold that blob
   */
  readBlob?(ref: string): Promise<Uint8Array | undefined>;
  /** With {@link ColdStore.readBlob}: stores a blob outside a checkpoint (a blob already held is not written again). */
  writeBlob?(ref: string, bytes: Uint8Array): Promise<void>;
  /**
   * With {@link ColdStore.readBlob}: deletes a blob unless a snapshot still references it.
   * @returns whether it was deleted
   */
  deleteBlob?(ref: string): Promise<boolean>;
  /** Closes connections this store created (injected clients are left open). */
  close(): Promise<void>;
}

/** Encodes a keyset cursor as an opaque string (a {@link runCursor}: a workflow is a journal run). */
export function encodeCursor(c: ListCursor): string {
  return runCursor({ createdAt: c.createdAt, runId: c.workflowId });
}

/**
 * Decodes a cursor produced by {@link encodeCursor}.
 * @throws {InvalidOptionError} (option `cursor` of `listWorkflows`) on a malformed cursor, or one of an
 *   earlier release (it listed by update time: list again from the first page)
 */
export function decodeCursor(text: string): ListCursor {
  const { createdAt, runId } = decodeRunCursor("listWorkflows", "cursor", text);
  return { createdAt, workflowId: runId };
}
