/**
 * The journal conformance suite: one call registers the tests every durable-run
 * {@link Journal} must pass — the built-in SQLite, PostgreSQL and Redis journals
 * and a user's own. A journal's test file is a few lines calling
 * {@link runJournalConformance} with a factory of fresh journals.
 *
 * Covered: creating a run once, refusing non-JSON input, leases and fencing
 * tokens (takeover after expiry, renew/release with a stale token, one winner
 * among 12 concurrent takers; a lease taken with `reentrant: false` belongs to
 * one execution: refused to its own owner while live, one winner among
 * concurrent takers under one owner id), step records in seq order (gaps, renames,
 * rewrites of completed steps and stale tokens refused; JSON outputs exact),
 * the audit log, signals (one per name, a wait not suspended when its signal
 * already arrived, one winner among racing senders, timers), deleting a run
 * with everything recorded for it, and:
 *
 * - **time from the store**: `now()` is monotone and close to this machine's
 *   clock; a live lease stays refused to another owner, and every time the
 *   journal stamps (`createdAt`, `updatedAt`, `leaseExpiresAt`, event `at`,
 *   signal `sentAt`) stays the store's, while the caller's `Date.now()` is
 *   two minutes ahead or behind (the suite patches `Date.now` in its own
 *   process around the journal calls: a journal must not read it, case pb-32);
 * - **operators**: `cancelRun`, `resetRun`, `retryRun` (status transitions,
 *   the fencing token bumped so the former executor's writes are refused,
 *   events with `by`), a `blocked` run through `updateRun` (reason in `error`,
 *   `run_blocked` with `detail`), `appendEvent`, and a cancel atomic with the
 *   executor's writes;
 * - **what workflow graphs use**: `readSteps` with a query (`fromSeq`,
 *   `namePrefix`, `last`), snapshot steps and `pruneRuns` (holes never filled:
 *   the next seq is the highest + 1), blobs written with their step and deleted
 *   with their last reference, `listRuns` newest created first, paged by `runCursor`: a walk lists
 *   each run exactly once while runs are updated, cancelled, retried and created between its pages.
 *
 * The suite imports no test runner: the caller passes its test functions as
 * `options.test` (see `ConformanceTestApi`; vitest's namespace fits).
 *
 * @module
 */
import { randomUUID } from "node:crypto";
import { checkOptions, optionKeys } from "../core/options.js";
import type { Journal } from "../durable/journal.js";
import type { JournalSuite } from "./journal-conformance-kit.js";
import { operatorTests } from "./journal-conformance-operators.js";
import { retentionTests } from "./journal-conformance-retention.js";
import { runTests } from "./journal-conformance-runs.js";
import { signalTests } from "./journal-conformance-signals.js";
import { stepTests } from "./journal-conformance-steps.js";
import { type ConformanceSuiteOptions, suiteGroup } from "./test-api.js";

/** The keys of {@link JournalConformanceOptions}: any other is an `InvalidOptionError`. */
const SUITE_OPTIONS = optionKeys<JournalConformanceOptions>({
  test: true,
  skip: true,
  destroy: true,
  clockToleranceMs: true,
});

/** Options of {@link runJournalConformance}: the caller's `test` functions, a `skip` reason, and `destroy`. */
export interface JournalConformanceOptions<J extends Journal = Journal> extends ConformanceSuiteOptions {
  /** Called after each test with the journal the factory made (drop a schema, delete a key prefix, remove a temp dir…). @default calls `journal.close()` */
  destroy?: (journal: J) => unknown;
  /**
   * How far the store's clock (`journal.now()`) may be from this machine's
   * `Date.now()`, in ms: servers on this machine or a synchronised network
   * are within a few ms.
   * @default 2000
   */
  clockToleranceMs?: number;
}

/**
 * Registers the conformance tests of a durable-run journal through the caller's test functions
 * (`options.test`).
 *
 * Call it at the top level of a test file. Each test gets a fresh journal from `factory` and
 * uses random run ids; `options.destroy` (default: `journal.close()`) runs after each test.
 * A journal must be empty when the factory returns it (a new file, schema or key prefix).
 *
 * @param name - label of the suite, shown in its title: `journal conformance: <name>`
 * @param factory - returns a fresh, empty journal (sync or async)
 * @param options - `test` (the test functions, required), `skip` reason (the suite is
 *   registered as skipped, the reason in its title), `destroy`
 * @example
 * // test/my-journal.test.ts
 * import * as vitest from "vitest";
 * import { runJournalConformance } from "dumplings-ai/testing";
 * import { MyJournal } from "../src/my-journal.js";
 *
 * runJournalConformance("mine", () => new MyJournal({ prefix: crypto.randomUUID() }), {
 *   test: vitest,
 *   destroy: async (journal) => {
 *     await journal.clear();
 *     await journal.close();
 *   },
 * });
 */
export function runJournalConformance<J extends Journal>(
  name: string,
  factory: () => J | Promise<J>,
  options: JournalConformanceOptions<J>,
): void {
  checkOptions("runJournalConformance", options, SUITE_OPTIONS);
  const { it, expect, beforeEach, afterEach } = options.test;
  suiteGroup(options, `journal conformance: ${name}`, () => {
    let journal: J;
    const newRunId = () => `run-${randomUUID()}`;

    beforeEach(async () => {
      journal = await factory();
    });
    afterEach(async () => {
      if (!journal) return;
      if (options.destroy) await options.destroy(journal);
      else await journal.close();
    });

    const suite: JournalSuite<J> = {
      it,
      expect,
      journal: () => journal,
      newRunId,
      clockToleranceMs: options.clockToleranceMs,
    };
    runTests(suite);
    stepTests(suite);
    retentionTests(suite);
    signalTests(suite);
    operatorTests(suite);
  });
}
