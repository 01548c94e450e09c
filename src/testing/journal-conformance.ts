/**
 * The journal conformance suite: one call registers the tests every durable-run
 * {@link Journal} must pass — the built-in SQLite, PostgreSQL and Redis journals
 * and a user's own. A journal's test file is a few lines calling
 * {@link runJournalConformance} with a factory of fresh journals.
 *
 * Covered: creating a run once, refusing non-JSON input, leases and fencing
 * tokens (takeover after expiry, renew/release with a stale token, one winner
 * among 12 concurrent takers), step records in seq order (gaps, renames,
 * rewrites of completed steps and stale tokens refused; JSON outputs exact),
 * the audit log, signals (one per name, a wait not suspended when its signal
 * already arrived, one winner among racing senders, timers), and deleting a run
 * with everything recorded for it.
 *
 * The suite imports no test runner: the caller passes its test functions as
 * `options.test` (see `ConformanceTestApi`; vitest's namespace fits).
 *
 * @module
 */
import { randomUUID } from "node:crypto";
import { NonJsonValueError } from "../core/errors.js";
import {
  JournalIntegrityError,
  RunNotFoundError,
  SignalConflictError,
  StaleFencingTokenError,
} from "../durable/errors.js";
import type { Journal, StepRecord } from "../durable/journal.js";
import { type ConformanceSuiteOptions, suiteGroup } from "./test-api.js";

/** Options of {@link runJournalConformance}: the caller's `test` functions, a `skip` reason, and `destroy`. */
export interface JournalConformanceOptions<J extends Journal = Journal> extends ConformanceSuiteOptions {
  /** Called after each test with the journal the factory made (drop a schema, delete a key prefix, remove a temp dir…). @default calls `journal.close()` */
  destroy?: (journal: J) => unknown;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function rec(runId: string, seq: number, token: number, patch: Partial<StepRecord> = {}): StepRecord {
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

    it("creates a run once; a second create returns the stored run", async () => {
      const j = journal;
      const id = newRunId();
      const a = await j.createRun({ runId: id, workflow: "wf", input: { q: "héllo \ud83d", n: [1, 2.5] } });
      expect(a.created).toBe(true);
      expect(a.run).toMatchObject({ runId: id, workflow: "wf", status: "pending", fencingToken: 0 });
      const b = await j.createRun({ runId: id, workflow: "other", input: null });
      expect(b.created).toBe(false);
      expect(b.run.workflow).toBe("wf");
      expect(b.run.input).toEqual({ q: "héllo \ud83d", n: [1, 2.5] });
      expect(await j.getRun(`${id}-missing`)).toBeUndefined();
      const runs = await j.listRuns({ status: "pending" });
      expect(runs.map((r) => r.runId)).toContain(id);
      expect((await j.listRuns({ status: "completed" })).map((r) => r.runId)).not.toContain(id);
    });

    it("refuses a non-JSON run input and stores nothing", async () => {
      const j = journal;
      const id = newRunId();
      await expect(j.createRun({ runId: id, workflow: "wf", input: { a: 1n } as never })).rejects.toBeInstanceOf(
        NonJsonValueError,
      );
      expect(await j.getRun(id)).toBeUndefined();
    });

    it("leases: taking one increments the fencing token; a live lease of another owner is refused; an expired one is taken over", async () => {
      const j = journal;
      const id = newRunId();
      await j.createRun({ runId: id, workflow: "wf", input: null });
      const a = await j.acquireLease(id, "A", 150);
      expect(a).toMatchObject({ acquired: true, fencingToken: 1 });
      const b = await j.acquireLease(id, "B", 150);
      expect(b).toMatchObject({ acquired: false, owner: "A" });
      const again = await j.acquireLease(id, "A", 150);
      expect(again).toMatchObject({ acquired: true, fencingToken: 2 });
      await sleep(200);
      const c = await j.acquireLease(id, "B", 5000);
      expect(c).toMatchObject({ acquired: true, fencingToken: 3 });
      await expect(j.renewLease(id, 2, 1000)).rejects.toBeInstanceOf(StaleFencingTokenError);
      expect(await j.renewLease(id, 3, 1000)).toBeGreaterThan(Date.now());
      await j.releaseLease(id, 2); // stale: no effect
      expect((await j.getRun(id))?.leaseOwner).toBe("B");
      await j.releaseLease(id, 3);
      expect((await j.getRun(id))?.leaseOwner).toBeUndefined();
      const d = await j.acquireLease(id, "C", 1000);
      expect(d).toMatchObject({ acquired: true, fencingToken: 4 });
      await expect(j.acquireLease(`${id}-x`, "A", 10)).rejects.toBeInstanceOf(RunNotFoundError);
    });

    it("exactly one of many concurrent lease takers wins", async () => {
      const j = journal;
      const id = newRunId();
      await j.createRun({ runId: id, workflow: "wf", input: null });
      const results = await Promise.all(Array.from({ length: 12 }, (_, i) => j.acquireLease(id, `owner-${i}`, 10_000)));
      expect(results.filter((r) => r.acquired)).toHaveLength(1);
      expect((await j.getRun(id))?.fencingToken).toBe(1);
    });

    it("writes steps in seq order; refuses gaps, renames, rewrites of completed steps and stale tokens", async () => {
      const j = journal;
      const id = newRunId();
      await j.createRun({ runId: id, workflow: "wf", input: null });
      const lease = await j.acquireLease(id, "A", 10_000);
      if (!lease.acquired) throw new Error("lease");
      const t = lease.fencingToken;
      await j.writeStep(t, rec(id, 0, t));
      await expect(j.writeStep(t, rec(id, 2, t))).rejects.toBeInstanceOf(JournalIntegrityError);
      const output = { text: "naïve \u2028 \ud83d end", n: 12345678901234, nested: [{}, [], null, false] };
      await j.writeStep(t, rec(id, 0, t, { status: "completed", output, finishedAt: Date.now() }));
      await expect(j.writeStep(t, rec(id, 0, t, { status: "started", attempt: 2 }))).rejects.toBeInstanceOf(
        JournalIntegrityError,
      );
      await j.writeStep(t, rec(id, 1, t));
      await expect(j.writeStep(t, rec(id, 1, t, { name: "renamed" }))).rejects.toBeInstanceOf(JournalIntegrityError);
      await expect(
        j.writeStep(t, rec(id, 1, t, { status: "completed", output: { d: new Date() } as never })),
      ).rejects.toBeInstanceOf(NonJsonValueError);
      // another owner takes over after expiry: the old token is fenced out
      await j.releaseLease(id, t);
      const b = await j.acquireLease(id, "B", 10_000);
      if (!b.acquired) throw new Error("lease B");
      const err = await j
        .writeStep(t, rec(id, 1, t, { status: "completed", output: "zombie", finishedAt: Date.now() }))
        .catch((e: unknown) => e);
      expect(err).toBeInstanceOf(StaleFencingTokenError);
      expect(err).toMatchObject({ token: t, currentToken: b.fencingToken });
      await j.writeStep(
        b.fencingToken,
        rec(id, 1, b.fencingToken, { status: "failed", attempt: 3, error: { name: "TypeError", message: "x" } }),
      );
      const steps = await j.readSteps(id);
      expect(steps.map((s) => [s.seq, s.name, s.status])).toEqual([
        [0, "s0", "completed"],
        [1, "s1", "failed"],
      ]);
      expect(steps[0]?.output).toEqual(output);
      expect(steps[1]).toMatchObject({ attempt: 3, error: { name: "TypeError", message: "x" }, fencingToken: 2 });
      await expect(j.updateRun(t, id, { status: "completed", output: 1 })).rejects.toBeInstanceOf(
        StaleFencingTokenError,
      );
      const events = await j.readEvents(id);
      expect(events.map((e) => e.index)).toEqual(events.map((_, i) => i));
      expect(events.map((e) => e.type)).toEqual([
        "run_created",
        "lease_acquired",
        "step_started",
        "step_completed",
        "step_started",
        "lease_acquired",
        "step_failed",
      ]);
    });

    it("signals: one per name (the second is refused); a wait is not suspended when its signal already arrived", async () => {
      const j = journal;
      const id = newRunId();
      await j.createRun({ runId: id, workflow: "wf", input: null });
      const lease = await j.acquireLease(id, "A", 10_000);
      if (!lease.acquired) throw new Error("lease");
      const t = lease.fencingToken;
      expect(await j.updateRun(t, id, { status: "waiting", waitingFor: "go" })).toEqual({ ok: true });
      const run = await j.sendSignal(id, "go", { approved: true, reason: "ok" });
      expect(run).toMatchObject({ status: "waiting", waitingFor: "go" });
      await expect(j.sendSignal(id, "go", { approved: false })).rejects.toBeInstanceOf(SignalConflictError);
      expect((await j.getSignal(id, "go"))?.value).toEqual({ approved: true, reason: "ok" });
      await j.sendSignal(id, "early", [1, "two"]);
      expect(await j.updateRun(t, id, { status: "running" })).toEqual({ ok: true });
      const res = await j.updateRun(t, id, { status: "waiting", waitingFor: "early" });
      expect(res.ok).toBe(false);
      if (!res.ok) expect(res.signal.value).toEqual([1, "two"]);
      expect((await j.getRun(id))?.status).toBe("running");
      expect((await j.listSignals(id)).map((s) => s.name).sort()).toEqual(["early", "go"]);
      await expect(j.sendSignal(`${id}-x`, "go", 1)).rejects.toBeInstanceOf(RunNotFoundError);
      const waitingTimer = await j.updateRun(t, id, { status: "waiting", wakeAt: 1234 });
      expect(waitingTimer.ok).toBe(true);
      expect(await j.getRun(id)).toMatchObject({ status: "waiting", wakeAt: 1234 });
      await j.updateRun(t, id, { status: "completed", output: { done: true } });
      expect(await j.getRun(id)).toMatchObject({ status: "completed", output: { done: true } });
      expect((await j.getRun(id))?.waitingFor).toBeUndefined();
    });

    it("exactly one of two racing signals for one name is taken", async () => {
      const j = journal;
      const id = newRunId();
      await j.createRun({ runId: id, workflow: "wf", input: null });
      const results = await Promise.allSettled([
        j.sendSignal(id, "approval:c1", { approved: true }),
        j.sendSignal(id, "approval:c1", { approved: false }),
        j.sendSignal(id, "approval:c1", { approved: false }),
      ]);
      expect(results.filter((r) => r.status === "fulfilled")).toHaveLength(1);
      for (const r of results) if (r.status === "rejected") expect(r.reason).toBeInstanceOf(SignalConflictError);
    });

    it("deletes a run with everything recorded for it", async () => {
      const j = journal;
      const id = newRunId();
      await j.createRun({ runId: id, workflow: "wf", input: 1 });
      const lease = await j.acquireLease(id, "A", 10_000);
      if (!lease.acquired) throw new Error("lease");
      await j.writeStep(lease.fencingToken, rec(id, 0, lease.fencingToken));
      await j.sendSignal(id, "x", 1);
      await j.deleteRun(id);
      expect(await j.getRun(id)).toBeUndefined();
      expect(await j.readSteps(id)).toEqual([]);
      expect(await j.listSignals(id)).toEqual([]);
      expect(await j.readEvents(id)).toEqual([]);
      // the id can be reused
      expect((await j.createRun({ runId: id, workflow: "wf", input: 2 })).created).toBe(true);
    });
  });
}
