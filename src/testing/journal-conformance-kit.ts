/**
 * @internal What the parts of the journal conformance suite (`journal-conformance-*.ts`) share: the
 * registration context each part takes and the suite's helpers. Not part of `dumplings-ai/testing`'s
 * entry.
 *
 * @module
 */
import { type Journal, type RunRecord, runCursor, type StepRecord } from "../durable/journal.js";
import type { ConformanceExpect, ConformanceIt } from "./test-api.js";

/** @internal One registration of the journal suite, as each of its parts takes it. */
export interface JournalSuite<J extends Journal> {
  /** Registers a test. */
  it: ConformanceIt;
  /** Assertions. */
  expect: ConformanceExpect;
  /** The journal of the running test (a fresh one from the factory). */
  journal: () => J;
  /** A new run id, unique across runs of the suite. */
  newRunId: () => string;
  /** `clockToleranceMs` of the suite's options. */
  clockToleranceMs: number | undefined;
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Runs `fn` with `Date.now()` of this process shifted by `shiftMs` (a worker whose clock is skewed), then restores it. */
export async function withShiftedClock<T>(shiftMs: number, fn: () => Promise<T>): Promise<T> {
  const real = Date.now;
  Date.now = () => real.call(Date) + shiftMs;
  try {
    return await fn();
  } finally {
    Date.now = real;
  }
}

/** Runs sorted as `listRuns` lists them: newest created first, by `(createdAt, runId)`, ids byte by byte. */
export function newestCreated(runs: RunRecord[]): RunRecord[] {
  return [...runs].sort(
    (a, b) => b.createdAt - a.createdAt || Buffer.compare(Buffer.from(b.runId, "utf8"), Buffer.from(a.runId, "utf8")),
  );
}

/** Every run id of a `listRuns` walk, page by page (`runCursor` of each page's last run), in order. */
export async function walk(j: Journal, filter: { limit: number; workflow?: string; status?: RunRecord["status"] }) {
  const out: string[] = [];
  let after: string | undefined;
  for (let n = 0; n < 100; n++) {
    const page = await j.listRuns({ ...filter, ...(after !== undefined ? { after } : {}) });
    if (page.length === 0) break;
    expect_(page.length <= filter.limit, `a page of ${page.length} runs, more than ${filter.limit}`);
    out.push(...page.map((r) => r.runId));
    after = runCursor(page.at(-1) as RunRecord);
  }
  return out;
}

/** Throws `message` unless `ok` (a check inside a helper, which has no `expect`). */
export function expect_(ok: boolean, message: string): void {
  if (!ok) throw new Error(message);
}

/** Takes a lease that must be granted; returns its token. */
export async function lease(j: Journal, runId: string, owner: string, ttlMs = 10_000): Promise<number> {
  const l = await j.acquireLease(runId, owner, ttlMs);
  if (!l.acquired) throw new Error(`lease of ${runId} for ${owner} was refused (held by ${l.owner})`);
  return l.fencingToken;
}

export function rec(runId: string, seq: number, token: number, patch: Partial<StepRecord> = {}): StepRecord {
  return {
    runId,
    seq,
    name: `s${seq}`,
    inputHash: "h".repeat(64),
    status: "started",
    attempt: 1,
    startedAt: Date.now(),
    fencingToken: token,
    ...patch,
  };
}
