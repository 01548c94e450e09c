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
import type { ColdStore as ColdStoreContract } from "../durable/checkpoints/contract.js";

export { type BlobStore, FsBlobStore } from "../durable/checkpoints/blobs.js";
export type { WorkflowSummary } from "../durable/checkpoints/contract.js";
export { RedisHotTier, type RedisHotTierOptions } from "../durable/checkpoints/hot-redis.js";
export { PostgresColdStore, type PostgresColdStoreOptions } from "../durable/checkpoints/postgres.js";
export { SqliteColdStore, type SqliteColdStoreOptions } from "../durable/checkpoints/sqlite.js";
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
export { IdempotencyGuard, type Reconcile, type ReconcileDecision } from "./idempotency.js";
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
  MigrationRegistry,
  parseWorkflowState,
  START,
  type StateMigration,
  type WorkflowState,
  WorkflowStateSchema,
  type WorkflowStatus,
} from "./state.js";
export {
  type CheckpointSaveOptions,
  CheckpointStore,
  type CheckpointStoreOptions,
  type HistoryEntry,
} from "./store.js";

/**
 * What a workflow cold store implements (`SqliteColdStore`, `PostgresColdStore`): snapshot rows,
 * workflow summaries, retention and, optionally, leases.
 *
 * @deprecated a workflow store is a durable journal now (issue 22): the built-in stores keep each
 *   workflow as a journal run. A custom store should be a custom durable `Journal`
 *   (`dumplings-ai/durable`), checked with `runJournalConformance` (`dumplings-ai/testing`); this
 *   contract is removed in 0.3.
 */
export type ColdStore = ColdStoreContract;
