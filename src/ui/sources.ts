/**
 * What the web inspector reads and acts on: the stores `dumplings ui` opened
 * (sessions backend, workflow checkpoint store, durable journal, optionally a
 * run side channel), each with the label the CLI prints, or the reason it is
 * not available (a default store that does not exist).
 *
 * @module
 */
import type { StateBackend } from "../backends/types.js";
import type { Journal } from "../durable/journal.js";
import type { RunEventStream } from "../durable/stream-contract.js";
import type { ResumableGraphRunner } from "../workflow/runner.js";
import type { CheckpointStore } from "../workflow/store.js";

/** A store the inspector shows, or why it cannot. */
export type Source<T> =
  | { value: T; label: string; missing?: undefined }
  | { value?: undefined; label: string; missing: string };

/** The stores of one inspector. */
export interface UiSources {
  /** Stored agent sessions (`--backend`). */
  sessions: Source<StateBackend>;
  /** Workflow checkpoints (`--store`). */
  workflows: Source<CheckpointStore>;
  /** Durable runs (`--journal`). */
  journal: Source<Journal>;
  /** The runs' side channel (model tokens, progress), when one is shared (`--stream redis://…`). */
  stream?: RunEventStream;
  /**
   * A runner of the application's graph, for resuming a workflow that waits on `interrupt()`
   * (resuming runs the graph's node code, which only the application has). Without it, the
   * inspector shows pending interrupts and forks a step (the fork's first checkpoint; the
   * application's worker runs it), but cannot resume.
   */
  runner?: ResumableGraphRunner;
  /** BullMQ queue a released or reset run is put back on (needs `REDIS_URL`), as `--queue` of the CLI. */
  queue?: string;
  /** Who operator actions are recorded as. @default operatorName() (user@host) */
  by?: string;
}
