/**
 * Workflow checkpoints (`dumplings-ai/workflow`): a typed, validated workflow
 * state; a two-tier checkpoint store (Redis hot tier, SQLite/PostgreSQL cold
 * archive); a resumable graph runner with interrupts, time travel and
 * retention, run by one worker at a time per workflow (a lease with a
 * fencing token in the cold store); and idempotent side effects.
 *
 * @example
 * import { CheckpointStore, SqliteColdStore, ResumableGraphRunner, END } from "dumplings-ai/workflow";
 * const store = await CheckpointStore.open({ cold: new SqliteColdStore({ path: "wf.db" }) });
 * const runner = new ResumableGraphRunner({ store, nodes: { hello: async () => ({ next: END, updates: { hi: 1 } }) } });
 * await runner.runOrResume("w1");
 *
 * @module
 */
export {
  BLOB_REF_FIELD,
  type BlobStore,
  blobRef,
  DEFAULT_BLOB_THRESHOLD,
  FsBlobStore,
  isBlobReference,
} from "./blobs.js";
export type {
  ColdPruneOptions,
  ColdStore,
  DropMonthResult,
  IdempotencyRecord,
  ListCursor,
  SnapshotMonth,
  SnapshotWrite,
  StepErrorRecord,
  StoredSnapshot,
  WorkflowFence,
  WorkflowLeaseResult,
  WorkflowRowStatus,
  WorkflowSummary,
} from "./cold.js";
export { type PgPoolLike, PostgresColdStore, type PostgresColdStoreOptions } from "./cold-postgres.js";
export { SqliteColdStore, type SqliteColdStoreOptions } from "./cold-sqlite.js";
export {
  BlobError,
  LeaseHeldError,
  NodeFailedError,
  NondeterminismError,
  ReplayMismatchError,
  StaleFencingTokenError,
  UnknownNodeError,
  UnknownSideEffectError,
  WorkflowConflictError,
  WorkflowLeaseHeldError,
  WorkflowLeaseLostError,
  WorkflowMigrationError,
  WorkflowNotFoundError,
  WorkflowNotWaitingError,
  WorkflowStateError,
} from "./errors.js";
export {
  type HotEntry,
  type HotWrite,
  type RedisClientLike,
  RedisHotTier,
  type RedisHotTierOptions,
} from "./hot-redis.js";
export {
  type GuardRunOptions,
  type GuardStats,
  IdempotencyGuard,
  type Reconcile,
  type ReconcileDecision,
  type UnknownSideEffect,
} from "./idempotency.js";
export {
  type GraphNode,
  type GraphRunResult,
  type NodeContext,
  type NodeResult,
  ResumableGraphRunner,
  type RunnerOptions,
  type StepEvent,
} from "./runner.js";
export {
  type AnyWorkflowStateSchema,
  createWorkflowState,
  defineWorkflowState,
  END,
  type HistoryRecord,
  HistoryRecordSchema,
  JsonObjectSchema,
  JsonValueSchema,
  MigrationRegistry,
  type NodeRun,
  NodeRunSchema,
  type PendingInterrupt,
  PendingInterruptSchema,
  parseWorkflowState,
  START,
  type StateMigration,
  type WorkflowState,
  WorkflowStateSchema,
  type WorkflowStatus,
  WorkflowStatusSchema,
} from "./state.js";
export {
  type CheckpointSaveOptions,
  CheckpointStore,
  type CheckpointStoreOptions,
  type CheckpointStoreStats,
  type HistoryEntry,
} from "./store.js";
