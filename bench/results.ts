/**
 * The shapes of the bench's results, shared by the runner (`run.ts`) and the
 * target checks (`targets.ts`) without either importing the other.
 *
 * @module
 */
import type { BenchStore } from "./registry.js";
import type { RunShapeResult, WorkerResult } from "./runs.js";
import type {
  ChatSaveResult,
  CheckpointResult,
  CpuResult,
  DurableResult,
  PromptResult,
  StartupResult,
} from "./scenarios.js";

/** One measured (store, scenario) pair. */
export interface Result {
  scenario: string;
  store: string;
  group: BenchStore["group"];
  family: BenchStore["family"];
  n: number;
  saves: number;
  /** µs */
  p50: number;
  p99: number;
  first40: number;
  last40: number;
  /** ms */
  totalMs: number;
  bytesWritten: number;
  size: number | undefined;
  /** ms, median of {@link LOADS} loads */
  loadMs: number;
  rawBytes: number;
  extrapolated: boolean;
  /** [history length, µs] points for the chart. */
  curve: [number, number][];
}

/** The extra scenarios' results (absent when not run or when their server is down). */
export interface ScenarioResults {
  prompt: PromptResult[];
  cpu: CpuResult[];
  durable: DurableResult[];
  checkpoint: CheckpointResult | undefined;
  /** Start-up of the built `dumplings` CLI (absent when dist/ is not built). */
  startup: StartupResult[];
  /** One more message to a 5,000-message chat against one more to a 10-message chat (`createChatStore`). */
  chat: ChatSaveResult[];
  /** Whole durable runs in Vercel Workflow's shapes against the floor of as many record writes. */
  runs: RunShapeResult[];
  /** Queued runs on 1 and 2 worker processes, ours and raw BullMQ jobs. */
  workers: WorkerResult[];
}
