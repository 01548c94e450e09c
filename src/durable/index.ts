/**
 * dumplings-ai/durable — durable execution for AI-SDK agents: journaled steps
 * (JSON in, JSON out) replayed after a crash, a durable agent loop with human
 * approvals, a side channel for tokens, and distributed workers on BullMQ.
 *
 * @example
 * import { DurableAgent, runDurable, SqliteJournal, approve } from "dumplings-ai/durable";
 * const journal = new SqliteJournal({ path: "runs.db" });
 * const result = await runDurable("chat-1", agent.workflow(), { journal, input: { messages } });
 * if (result.status === "waiting") await approve("chat-1", toolCallId, { journal });
 *
 * @module
 */

// The errors of the core that durable calls throw (a run input that is not JSON, a bad option), so
// code importing only this entry can branch on them; the same classes as `dumplings-ai` exports.
export {
  DurableAgent,
  type DurableAgentInput,
  type DurableAgentOptions,
  type DurableAgentResult,
  durableTool,
  type ModelMessagesRepair,
  repairModelMessages,
} from "./agent.js";
export {
  currentRun,
  currentStep,
  defineStep,
  deprecatePatch,
  patched,
  type RetryPolicy,
  type StepInfo,
  type StepOptions,
  sleep,
  step,
  waitForSignal,
} from "./context.js";
export {
  ApprovalConflictError,
  ApprovalNotPendingError,
  JournalIntegrityError,
  LeaseHeldError,
  NonRetryableError,
  NoRunContextError,
  ReplayMismatchError,
  RetryBudgetExhaustedError,
  RunCancelledError,
  RunInputMismatchError,
  RunNotFoundError,
  RunStateError,
  RunWaitingError,
  SignalConflictError,
  StaleFencingTokenError,
  StepFailedError,
  UnknownWorkflowError,
} from "./errors.js";
export {
  hashInput,
  type Journal,
  type JournalEvent,
  type JournalEventInput,
  type JournalEventType,
  type LeaseResult,
  type ListRunsFilter,
  type RecordedError,
  type RunPatch,
  type RunRecord,
  type RunStatus,
  runCursor,
  type SignalRecord,
  type StepQuery,
  type StepRecord,
  type StepStatus,
  type UpdateRunResult,
  type WriteStepOptions,
} from "./journal.js";
export { PostgresJournal, type PostgresJournalOptions } from "./journal-postgres.js";
export { RedisJournal, type RedisJournalOptions } from "./journal-redis.js";
export { SqliteJournal, type SqliteJournalOptions } from "./journal-sqlite.js";
export { type DurableModelOptions, durableModel } from "./model.js";
export {
  type CancelOptions,
  cancel,
  type RunDurableOptions,
  type RunResult,
  runDurable,
  type WorkflowFn,
} from "./run.js";
export {
  type ApprovalDecision,
  approvalSignalName,
  approve,
  reject,
  type SignalOptions,
  type SignalResult,
  signal,
} from "./signals.js";
export {
  type EventOrigin,
  MemoryRunStream,
  type ReadTextOptions,
  type RebuildTextOptions,
  RedisRunStream,
  type RedisRunStreamOptions,
  type RunEventStream,
  type RunStreamEvent,
  readText,
  rebuildText,
  type SubscribeOptions,
} from "./stream.js";
export {
  type DurableJobData,
  DurableQueue,
  type DurableQueueOptions,
  DurableWorker,
  type DurableWorkerOptions,
} from "./worker.js";
