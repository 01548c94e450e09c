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
import { createHash, randomUUID } from "node:crypto";
import { InvalidOptionError, NonJsonValueError } from "../core/errors.js";
import { checkOptions, optionKeys } from "../core/options.js";
import {
  JournalIntegrityError,
  RunNotFoundError,
  RunStateError,
  SignalConflictError,
  StaleFencingTokenError,
} from "../durable/errors.js";
import { type Journal, type RunRecord, runCursor, type StepRecord } from "../durable/journal.js";
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

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Runs `fn` with `Date.now()` of this process shifted by `shiftMs` (a worker whose clock is skewed), then restores it. */
async function withShiftedClock<T>(shiftMs: number, fn: () => Promise<T>): Promise<T> {
  const real = Date.now;
  Date.now = () => real.call(Date) + shiftMs;
  try {
    return await fn();
  } finally {
    Date.now = real;
  }
}

/** Runs sorted as `listRuns` lists them: newest created first, by `(createdAt, runId)`, ids byte by byte. */
function newestCreated(runs: RunRecord[]): RunRecord[] {
  return [...runs].sort(
    (a, b) => b.createdAt - a.createdAt || Buffer.compare(Buffer.from(b.runId, "utf8"), Buffer.from(a.runId, "utf8")),
  );
}

/** Every run id of a `listRuns` walk, page by page (`runCursor` of each page's last run), in order. */
async function walk(j: Journal, filter: { limit: number; workflow?: string; status?: RunRecord["status"] }) {
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
function expect_(ok: boolean, message: string): void {
  if (!ok) throw new Error(message);
}

/** Takes a lease that must be granted; returns its token. */
async function lease(j: Journal, runId: string, owner: string, ttlMs = 10_000): Promise<number> {
  const l = await j.acquireLease(runId, owner, ttlMs);
  if (!l.acquired) throw new Error(`lease of ${runId} for ${owner} was refused (held by ${l.owner})`);
  return l.fencingToken;
}

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

    it("reentrant: false: a live lease is refused to its own owner too (one execution per lease); expired or released, it is taken", async () => {
      const j = journal;
      const id = newRunId();
      await j.createRun({ runId: id, workflow: "wf", input: null });
      const once = { reentrant: false };
      expect(await j.acquireLease(id, "web-1", 150, once)).toMatchObject({ acquired: true, fencingToken: 1 });
      // a second execution under the same owner id (another slot of one worker) must not take it back
      expect(await j.acquireLease(id, "web-1", 150, once)).toMatchObject({ acquired: false, owner: "web-1" });
      expect(await j.getRun(id)).toMatchObject({ fencingToken: 1, leaseOwner: "web-1" });
      expect(await j.renewLease(id, 1, 150)).toBeGreaterThan(0); // the holder's token still holds it
      await sleep(200);
      expect(await j.acquireLease(id, "web-1", 10_000, once)).toMatchObject({ acquired: true, fencingToken: 2 });
      await j.releaseLease(id, 2);
      expect(await j.acquireLease(id, "web-1", 10_000, once)).toMatchObject({ acquired: true, fencingToken: 3 });
      expect(await j.acquireLease(id, "web-2", 10_000, once)).toMatchObject({ acquired: false, owner: "web-1" });
      // many executions of one worker racing for a free lease: exactly one wins
      const raced = newRunId();
      await j.createRun({ runId: raced, workflow: "wf", input: null });
      const results = await Promise.all(Array.from({ length: 8 }, () => j.acquireLease(raced, "web-1", 10_000, once)));
      expect(results.filter((r) => r.acquired)).toHaveLength(1);
      expect((await j.getRun(raced))?.fencingToken).toBe(1);
      for (const bad of [{ reentrant: "no" }, { reentrnt: false }, 5]) {
        await expect(j.acquireLease(raced, "web-1", 1000, bad as never), JSON.stringify(bad)).rejects.toBeInstanceOf(
          InvalidOptionError,
        );
      }
      expect((await j.getRun(raced))?.fencingToken).toBe(1);
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

    it("readSteps with a query: fromSeq, namePrefix (characters, not bytes), last n newest, in seq order; bad queries refused", async () => {
      const j = journal;
      const id = newRunId();
      await j.createRun({ runId: id, workflow: "wf", input: null });
      const t = await lease(j, id, "A");
      const names = ["checkpoint:0:a", "effect:0:0:x", "checkpoint:1:b", "ü:1", "checkpoint:2:c", "üb:2", "check"];
      for (const [seq, name] of names.entries()) {
        await j.writeStep(t, rec(id, seq, t, { name, status: "completed", output: { seq }, finishedAt: Date.now() }));
      }
      const seqs = async (q?: Parameters<Journal["readSteps"]>[1]) => (await j.readSteps(id, q)).map((s) => s.seq);
      expect(await seqs()).toEqual([0, 1, 2, 3, 4, 5, 6]);
      expect(await seqs({})).toEqual([0, 1, 2, 3, 4, 5, 6]);
      const newest = await j.readSteps(id, { namePrefix: "checkpoint:", last: 1 });
      expect(newest).toHaveLength(1);
      expect(newest[0]).toMatchObject({
        runId: id,
        seq: 4,
        name: "checkpoint:2:c",
        status: "completed",
        output: { seq: 4 },
      });
      expect(newest[0]).toEqual((await j.readSteps(id))[4]);
      expect(await seqs({ namePrefix: "checkpoint:" })).toEqual([0, 2, 4]);
      expect(await seqs({ namePrefix: "checkpoint:", last: 2 })).toEqual([2, 4]);
      expect(await seqs({ namePrefix: "checkpoint:", fromSeq: 1 })).toEqual([2, 4]);
      expect(await seqs({ namePrefix: "checkpoint:", fromSeq: 5 })).toEqual([]);
      expect(await seqs({ fromSeq: 5 })).toEqual([5, 6]);
      expect(await seqs({ last: 3 })).toEqual([4, 5, 6]);
      expect(await seqs({ last: 100 })).toEqual([0, 1, 2, 3, 4, 5, 6]);
      expect(await seqs({ namePrefix: "ü" })).toEqual([3, 5]);
      expect(await seqs({ namePrefix: "üb" })).toEqual([5]);
      expect(await seqs({ namePrefix: "check" })).toEqual([0, 2, 4, 6]);
      expect(await seqs({ namePrefix: "checkpoint:0:a-longer" })).toEqual([]);
      expect(await seqs({ namePrefix: "" })).toEqual([0, 1, 2, 3, 4, 5, 6]);
      expect(await j.readSteps(`${id}-none`, { namePrefix: "checkpoint:", last: 1 })).toEqual([]);
      for (const bad of [
        { fromSeq: -1 },
        { fromSeq: 1.5 },
        { last: 0 },
        { last: -1 },
        { namePrefix: 3 },
        { lastN: 1 },
      ]) {
        await expect(j.readSteps(id, bad as never), JSON.stringify(bad)).rejects.toBeInstanceOf(InvalidOptionError);
      }
    });

    it("listRuns: newest created first by (createdAt, runId), of a status and a workflow, in pages by runCursor", async () => {
      const j = journal;
      const base = newRunId();
      const ids: string[] = [];
      for (let i = 0; i < 7; i++) {
        const id = `${base}-${i}`; // one base: runs of one millisecond sort by their index
        ids.push(id);
        await j.createRun({ runId: id, workflow: i % 2 === 0 ? "graph" : "agent", input: i });
        if (i === 2) await sleep(3); // some runs share a millisecond, others do not
      }
      const t3 = await lease(j, ids[3] as string, "A");
      await j.updateRun(t3, ids[3] as string, { status: "completed", output: 3 });
      const stored = await Promise.all(ids.map(async (id) => (await j.getRun(id)) as RunRecord));
      const all = await j.listRuns();
      expect(all.map((r) => r.runId)).toEqual(newestCreated(stored).map((r) => r.runId));
      expect(all[0]?.runId).toBe(ids[6]); // the run updated last keeps its place
      for (let i = 1; i < all.length; i++) {
        expect((all[i - 1] as RunRecord).createdAt >= (all[i] as RunRecord).createdAt).toBe(true);
      }
      // pages of 1, 2 and 3 walk the same list
      for (const limit of [1, 2, 3]) {
        expect(await walk(j, { limit })).toEqual(all.map((r) => r.runId));
      }
      const graphs = all.filter((r) => r.workflow === "graph").map((r) => r.runId);
      expect((await j.listRuns({ workflow: "graph" })).map((r) => r.runId)).toEqual(graphs);
      const first = await j.listRuns({ workflow: "graph", limit: 2 });
      expect(first.map((r) => r.runId)).toEqual(graphs.slice(0, 2));
      expect(
        (await j.listRuns({ workflow: "graph", after: runCursor(first[1] as RunRecord) })).map((r) => r.runId),
      ).toEqual(graphs.slice(2));
      expect((await j.listRuns({ workflow: "agent", status: "completed" })).map((r) => r.runId)).toEqual([ids[3]]);
      expect(await j.listRuns({ workflow: "graph", status: "completed" })).toEqual([]);
      expect(await j.listRuns({ workflow: "none" })).toEqual([]);
      expect(await walk(j, { limit: 1, workflow: "graph", status: "pending" })).toEqual(graphs);
      // bad filters
      for (const bad of [
        { limit: 0 },
        { limit: 1.5 },
        { after: "not a cursor" },
        { after: 7 },
        { after: Buffer.from(JSON.stringify([Date.now(), ids[0]]), "utf8").toString("base64url") }, // update order: 0.4's
        { workflows: "x" },
        { status: "bogus" },
        { status: "" },
      ]) {
        await expect(j.listRuns(bad as never), JSON.stringify(bad)).rejects.toBeInstanceOf(InvalidOptionError);
      }
    });

    it("listRuns: a walk lists each run exactly once while runs are updated, cancelled, retried and created between its pages", async () => {
      const j = journal;
      // the whole journal, then one workflow's runs (each walk on runs of its own)
      for (const [w, filter] of [
        ["w1", {}],
        ["w2", { workflow: "w2" }],
      ] as const) {
        const ids: string[] = [];
        for (let i = 0; i < 9; i++) {
          const id = `${newRunId()}-${i}`;
          ids.push(id);
          await j.createRun({ runId: id, workflow: w, input: i });
          if (i % 3 === 2) await sleep(3); // some runs share a millisecond, others do not
        }
        const before = (await j.listRuns(filter)).map((r) => r.runId);
        const seen: string[] = [];
        const touched = new Set<string>(); // changed once each, so every change is legal
        let after: string | undefined;
        for (let n = 0; n < 40; n++) {
          const page = await j.listRuns({ ...filter, limit: 2, ...(after !== undefined ? { after } : {}) });
          if (page.length === 0) break;
          seen.push(...page.map((r) => r.runId));
          after = runCursor(page.at(-1) as RunRecord);
          await sleep(2); // the updates below get a later time than anything listed so far
          // a run not listed yet is leased and completed (it was the oldest: its update makes it the newest
          // changed), a listed one is cancelled, another not listed is retried, and a new run is created
          const unlisted = ids.filter((id) => !seen.includes(id) && !touched.has(id));
          const oldest = unlisted.at(-1);
          if (oldest !== undefined) {
            touched.add(oldest);
            const t = await lease(j, oldest, `w${n}`);
            await j.updateRun(
              t,
              oldest,
              n % 2 === 0
                ? { status: "completed", output: n }
                : { status: "failed", error: { name: "E", message: "y" } },
            );
          }
          const listed = seen.filter((id) => ids.includes(id)).at(-1);
          if (listed !== undefined) await j.cancelRun(listed, "op", "walk").catch(() => undefined);
          const failed = unlisted.find((id) => id !== oldest);
          if (failed !== undefined) {
            touched.add(failed);
            const t = await lease(j, failed, `x${n}`);
            await j.updateRun(t, failed, { status: "failed", error: { name: "E", message: "x" } });
            await j.retryRun(failed, "op");
          }
          await j.createRun({ runId: `${newRunId()}-new-${n}`, workflow: w, input: n });
        }
        for (const id of ids) {
          expect(
            seen.filter((x) => x === id),
            `${id} in ${JSON.stringify(filter)}`,
          ).toHaveLength(1);
        }
        expect(new Set(seen).size, "no run twice").toBe(seen.length);
        // the runs of before the walk in their order, whatever was created meanwhile
        expect(seen.filter((id) => before.includes(id))).toEqual(before.filter((id) => seen.includes(id)));
      }
    });

    it("snapshot steps and pruneRuns: only steps finished before the cutoff and before the keepLast-th newest snapshot go; the next seq stays highest + 1", async () => {
      const j = journal;
      const old = Date.now() - 10 * 60_000;
      const plain = newRunId();
      await j.createRun({ runId: plain, workflow: "wf", input: null });
      const tp = await lease(j, plain, "A");
      for (let seq = 0; seq < 3; seq++) {
        await j.writeStep(tp, rec(plain, seq, tp, { status: "completed", output: seq, finishedAt: old }));
      }
      const id = newRunId();
      await j.createRun({ runId: id, workflow: "graph", input: null });
      const t = await lease(j, id, "A");
      const done = (seq: number, finishedAt: number) =>
        rec(id, seq, t, { name: `checkpoint:${seq}`, status: "completed", output: { seq }, finishedAt });
      await j.writeStep(t, done(0, old));
      await j.writeStep(t, rec(id, 1, t, { name: "checkpoint:1" }), { snapshot: true });
      await j.writeStep(t, done(1, old), { snapshot: true, sync: false });
      await j.writeStep(t, done(2, old));
      await j.writeStep(t, done(3, Date.now()));
      await j.writeStep(t, done(4, old), { snapshot: true });
      await j.writeStep(t, rec(id, 5, t, { name: "effect:5" }));
      const steps = await j.readSteps(id);
      expect(steps.map((s) => s.snapshot === true)).toEqual([false, true, false, false, true, false]);
      expect(steps.filter((s) => "snapshot" in s).map((s) => s.seq)).toEqual([1, 4]);
      // keepLast 2: the 2nd newest snapshot is #1, so only #0 goes
      expect(await j.pruneRuns({ olderThanMs: 60_000, keepLast: 2 })).toEqual({ deletedSteps: 1, deletedBlobs: 0 });
      expect((await j.readSteps(id)).map((s) => s.seq)).toEqual([1, 2, 3, 4, 5]);
      // keepLast 1: #1 and #2 go; #3 finished after the cutoff stays; the plain run loses nothing
      expect(await j.pruneRuns({ olderThanMs: 60_000 })).toEqual({ deletedSteps: 2, deletedBlobs: 0 });
      expect((await j.readSteps(id)).map((s) => s.seq)).toEqual([3, 4, 5]);
      expect((await j.readSteps(plain)).map((s) => s.seq)).toEqual([0, 1, 2]);
      expect(await j.pruneRuns({ olderThanMs: 60_000, vacuum: "full" })).toEqual({ deletedSteps: 0, deletedBlobs: 0 });
      expect((await j.readSteps(id, { namePrefix: "checkpoint:", last: 1 })).map((s) => [s.seq, s.snapshot])).toEqual([
        [4, true],
      ]);
      expect((await j.readSteps(id, { fromSeq: 1, last: 2 })).map((s) => s.seq)).toEqual([4, 5]);
      // outputs: false may leave out output and error, and keeps every other field
      const strip = ({ output: _o, error: _e, ...rest }: StepRecord) => rest;
      expect((await j.readSteps(id, { outputs: false })).map(strip)).toEqual((await j.readSteps(id)).map(strip));
      expect((await j.readSteps(id, { namePrefix: "checkpoint:", last: 1, outputs: false })).map((s) => s.seq)).toEqual(
        [4],
      );
      await expect(j.readSteps(id, { outputs: "no" } as never)).rejects.toBeInstanceOf(InvalidOptionError);
      // holes are never filled: the next seq is the highest + 1
      for (const seq of [0, 2, 7]) {
        await expect(j.writeStep(t, rec(id, seq, t, { name: `checkpoint:${seq}` })), `#${seq}`).rejects.toBeInstanceOf(
          JournalIntegrityError,
        );
      }
      await j.writeStep(t, rec(id, 5, t, { name: "effect:5", status: "completed", output: 5, finishedAt: old }));
      await j.writeStep(t, rec(id, 6, t));
      expect((await j.readSteps(id)).map((s) => s.seq)).toEqual([3, 4, 5, 6]);
      // a reset keeps the steps up to toSeq; the run goes on after its highest kept seq
      await j.resetRun(id, 4, "ops");
      const t2 = await lease(j, id, "B");
      await expect(j.writeStep(t2, rec(id, 6, t2))).rejects.toBeInstanceOf(JournalIntegrityError);
      await j.writeStep(t2, rec(id, 5, t2, { name: "again" }));
      expect((await j.readSteps(id)).map((s) => [s.seq, s.name])).toEqual([
        [3, "checkpoint:3"],
        [4, "checkpoint:4"],
        [5, "again"],
      ]);
      // everything finished before now, keepLast above the number of snapshots: nothing goes
      expect(await j.pruneRuns({ olderThanMs: 0, keepLast: 5 })).toEqual({ deletedSteps: 0, deletedBlobs: 0 });
      for (const bad of [
        {},
        { olderThanMs: -1 },
        { olderThanMs: Number.NaN },
        { olderThanMs: 1, keepLast: 0 },
        { olderThanMs: 1, keepLast: 1.5 },
        { olderThanMs: 1, vacuum: "all" },
        { olderThanMs: 1, keep: 2 },
        { olderThanMs: 1, finishedBefore: 5 },
        { finishedBefore: Number.NaN },
        { finishedBefore: 5, finishedFrom: "1" },
      ]) {
        await expect(j.pruneRuns(bad as never), JSON.stringify(bad)).rejects.toBeInstanceOf(InvalidOptionError);
      }
      await expect(j.writeStep(t2, rec(id, 6, t2), { snapshots: true } as never)).rejects.toBeInstanceOf(
        InvalidOptionError,
      );
    });

    it("writeStep with create: true never replaces a record, not even a started one of its name", async () => {
      const j = journal;
      const id = newRunId();
      await j.createRun({ runId: id, workflow: "wf", input: null });
      const t = await lease(j, id, "A");
      await j.writeStep(t, rec(id, 0, t, { name: "effect:pay" }), { create: true });
      // another starter that read the same next seq: refused, the first record stays
      await expect(
        j.writeStep(t, rec(id, 0, t, { name: "effect:pay", attempt: 2 }), { create: true }),
      ).rejects.toBeInstanceOf(JournalIntegrityError);
      expect((await j.readSteps(id)).map((s) => [s.seq, s.name, s.attempt])).toEqual([[0, "effect:pay", 1]]);
      // without it, a started record of the same name is replaced (the step's next attempt)
      await j.writeStep(t, rec(id, 0, t, { name: "effect:pay", attempt: 2 }));
      expect((await j.readSteps(id)).map((s) => s.attempt)).toEqual([2]);
      await j.writeStep(t, rec(id, 1, t, { name: "effect:ship" }), { create: true });
      expect((await j.readSteps(id)).map((s) => s.seq)).toEqual([0, 1]);
      await expect(j.writeStep(t, rec(id, 2, t), { create: "yes" } as never)).rejects.toBeInstanceOf(
        InvalidOptionError,
      );
    });

    it("pruneRuns with a window (finishedFrom, finishedBefore): only the records that finished inside it go", async () => {
      const j = journal;
      const id = newRunId();
      await j.createRun({ runId: id, workflow: "graph", input: null });
      const t = await lease(j, id, "A");
      const base = Date.UTC(2020, 0, 1);
      const at = [base, base + 1000, base + 2000, base + 3000];
      for (const [seq, finishedAt] of at.entries()) {
        await j.writeStep(
          t,
          rec(id, seq, t, { name: `checkpoint:${seq}`, status: "completed", output: seq, finishedAt }),
          {
            snapshot: true,
          },
        );
      }
      // [base + 1000, base + 3000): #1 and #2; #3 is the newest snapshot and stays anyway
      expect(await j.pruneRuns({ finishedFrom: at[1]!, finishedBefore: at[3]! })).toEqual({
        deletedSteps: 2,
        deletedBlobs: 0,
      });
      expect((await j.readSteps(id)).map((s) => s.seq)).toEqual([0, 3]);
      // the bound is exclusive above, inclusive below
      expect(await j.pruneRuns({ finishedFrom: at[0]! + 1, finishedBefore: at[3]! + 1 })).toEqual({
        deletedSteps: 0,
        deletedBlobs: 0,
      });
      expect(await j.pruneRuns({ finishedBefore: at[0]! + 1 })).toEqual({ deletedSteps: 1, deletedBlobs: 0 });
      expect((await j.readSteps(id)).map((s) => s.seq)).toEqual([3]);
    });

    it("blobs: written once with their step, read back by reference, deleted with their last reference (rewrite, deleteRun, resetRun, pruneRuns)", async () => {
      const j = journal;
      const blob = (text: string) => {
        const bytes = new Uint8Array(Buffer.from(text, "utf8"));
        return [createHash("sha256").update(bytes).digest("hex"), bytes] as const;
      };
      const [a, aBytes] = blob(`alpha ${randomUUID()}`);
      const [b, bBytes] = blob(`beta ${randomUUID()}`);
      const [c, cBytes] = blob(`gamma ${randomUUID()}`);
      const [d, dBytes] = blob(`delta ${randomUUID()}`);
      const binary = new Uint8Array([0, 255, 1, 128, 0, 10, 13]);
      const e = createHash("sha256").update(binary).digest("hex");
      const one = newRunId();
      const two = newRunId();
      for (const id of [one, two]) await j.createRun({ runId: id, workflow: "graph", input: null });
      const t1 = await lease(j, one, "A");
      const t2 = await lease(j, two, "A");
      const done = (id: string, seq: number, t: number, output: unknown = { seq }) =>
        rec(id, seq, t, { status: "completed", output: output as never, finishedAt: Date.now() - 600_000 });
      await j.writeStep(t1, rec(one, 0, t1));
      await j.writeStep(t1, done(one, 0, t1, { a, b }), {
        blobs: new Map([
          [a, aBytes],
          [b, bBytes],
          [e, binary],
        ]),
        blobRefs: [a, b],
      });
      expect(await j.readBlob(a)).toEqual(aBytes);
      expect(await j.readBlob(b)).toEqual(bBytes);
      expect(await j.readBlob(e)).toEqual(binary);
      expect(await j.readBlob(c)).toBeUndefined();
      // a stored blob is referenced without its bytes; a missing one is refused and nothing is written
      await j.writeStep(t2, done(two, 0, t2, { a }), { blobRefs: [a], snapshot: true });
      await expect(j.writeStep(t2, done(two, 1, t2), { blobRefs: [c] })).rejects.toBeInstanceOf(JournalIntegrityError);
      expect((await j.readSteps(two)).map((s) => s.seq)).toEqual([0]);
      for (const bad of [
        { blobs: new Map([[a, bBytes]]) },
        { blobs: new Map([["sha256:x", aBytes]]) },
        { blobRefs: ["not-a-hash"] },
        { blobs: { [a]: aBytes } },
      ]) {
        await expect(j.writeStep(t2, done(two, 1, t2), bad as never)).rejects.toBeInstanceOf(InvalidOptionError);
      }
      // a record that is not completed rewritten with other references: the blob it held goes
      await j.writeStep(t2, rec(two, 1, t2), { blobs: new Map([[c, cBytes]]), blobRefs: [c] });
      expect(await j.readBlob(c)).toEqual(cBytes);
      await j.writeStep(t2, done(two, 1, t2), { blobs: new Map([[d, dBytes]]), blobRefs: [d] });
      expect(await j.readBlob(c)).toBeUndefined();
      expect(await j.readBlob(d)).toEqual(dBytes);
      // deleteRun: b was run one's alone, a is still run two's
      await j.deleteRun(one);
      expect(await j.readBlob(b)).toBeUndefined();
      expect(await j.readBlob(a)).toEqual(aBytes);
      // pruneRuns: run two's #0 (a) goes before its snapshot #2
      await j.writeStep(t2, done(two, 2, t2, { d }), { blobRefs: [d], snapshot: true });
      expect(await j.pruneRuns({ olderThanMs: 60_000 })).toEqual({ deletedSteps: 2, deletedBlobs: 1 });
      expect(await j.readBlob(a)).toBeUndefined();
      expect(await j.readBlob(d)).toEqual(dBytes);
      // retryRun dropping a failed last record drops its blob
      const [f, fBytes] = blob(`phi ${randomUUID()}`);
      const error = { name: "Error", message: "x" };
      await j.writeStep(t2, rec(two, 3, t2, { status: "failed", error }), {
        blobs: new Map([[f, fBytes]]),
        blobRefs: [f],
      });
      expect(await j.readBlob(f)).toEqual(fBytes);
      await j.updateRun(t2, two, { status: "failed", error });
      await j.retryRun(two, "ops");
      expect(await j.readBlob(f)).toBeUndefined();
      expect(await j.readBlob(d)).toEqual(dBytes);
      // resetRun dropping the last record that references d
      await j.resetRun(two, -1, "ops");
      expect(await j.readBlob(d)).toBeUndefined();
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

    it("a run that ended (completed, failed, cancelled) refuses a new signal; a reset run takes signals again", async () => {
      const j = journal;
      for (const end of ["completed", "failed", "cancelled"] as const) {
        const id = newRunId();
        await j.createRun({ runId: id, workflow: "wf", input: null });
        const lease = await j.acquireLease(id, "A", 10_000);
        if (!lease.acquired) throw new Error("lease");
        await j.updateRun(lease.fencingToken, id, { status: "waiting", waitingFor: "approval:c1" });
        await j.sendSignal(id, "early", 1);
        if (end === "cancelled") await j.cancelRun(id, "ops", "no longer needed");
        else {
          await j.updateRun(lease.fencingToken, id, { status: "running" });
          await j.updateRun(
            lease.fencingToken,
            id,
            end === "completed" ? { status: end, output: 1 } : { status: end, error: { name: "Error", message: "x" } },
          );
        }
        const refused = await j.sendSignal(id, "approval:c1", { approved: true }).catch((e: unknown) => e);
        expect(refused, end).toBeInstanceOf(RunStateError);
        expect(refused).toMatchObject({ code: "RUN_STATE", runId: id, status: end, action: "signal" });
        // a signal sent before the end is still a conflict, not a status error
        await expect(j.sendSignal(id, "early", 2)).rejects.toBeInstanceOf(SignalConflictError);
        expect((await j.listSignals(id)).map((x) => x.name)).toEqual(["early"]);
        expect((await j.readEvents(id)).filter((e) => e.type === "signal_received")).toHaveLength(1);
        await j.resetRun(id, -1, "ops");
        expect(await j.sendSignal(id, "approval:c1", { approved: true })).toMatchObject({ status: "pending" });
      }
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

    it("now() is the store's clock: monotone and close to this machine's clock", async () => {
      const j = journal;
      const tolerance = options.clockToleranceMs ?? 2000;
      const readings: number[] = [];
      for (let i = 0; i < 20; i++) readings.push(await j.now());
      for (const t of readings) expect(Number.isInteger(t)).toBe(true);
      for (let i = 1; i < readings.length; i++) expect(readings[i]!).not.toBeLessThan(readings[i - 1]!);
      const before = Date.now();
      const t = await j.now();
      const after = Date.now();
      expect(t).toBeGreaterThan(before - tolerance);
      expect(t).toBeLessThan(after + tolerance);
      await sleep(30);
      expect((await j.now()) - t).toBeGreaterThan(20);
    });

    it("time comes from the store: a worker whose clock is 2 minutes ahead cannot take a live lease, and stamps nothing with its clock", async () => {
      const j = journal;
      const id = newRunId();
      const t0 = await j.now();
      const token = await withShiftedClock(120_000, async () => {
        await j.createRun({ runId: id, workflow: "wf", input: null });
        const a = await lease(j, id, "A", 60_000);
        // B's clock is 2 minutes ahead: by its clock A's lease expired a minute ago; by the store's it is live
        const b = await j.acquireLease(id, "B", 60_000);
        expect(b).toMatchObject({ acquired: false, owner: "A" });
        await j.sendSignal(id, "go", 1);
        await j.appendEvent(id, { type: "step_drift", seq: 0, name: "s0", detail: "input changed" });
        return a;
      });
      const t1 = await j.now();
      const within = (t: number | undefined, lo: number, hi: number, what: string) => {
        expect(t, what).not.toBeUndefined();
        expect(t!, what).not.toBeLessThan(lo);
        expect(t!, what).toBeLessThanOrEqual(hi);
      };
      const run = await j.getRun(id);
      within(run?.createdAt, t0, t1, "createdAt");
      within(run?.updatedAt, t0, t1, "updatedAt");
      within(run?.leaseExpiresAt, t0 + 60_000, t1 + 60_000, "leaseExpiresAt");
      within((await j.getSignal(id, "go"))?.sentAt, t0, t1, "sentAt");
      const events = await j.readEvents(id);
      expect(events.map((e) => e.type)).toEqual(["run_created", "lease_acquired", "signal_received", "step_drift"]);
      for (const e of events) within(e.at, t0, t1, `event ${e.type}`);
      // a clock 2 minutes behind neither shortens a renewed lease nor lets the holder keep an expired one longer
      const renewedAt = await j.now();
      const expiresAt = await withShiftedClock(-120_000, () => j.renewLease(id, token, 60_000));
      within(expiresAt, renewedAt + 60_000, (await j.now()) + 60_000, "renewed expiresAt");
      // and a short lease expires by the store's clock even for a caller whose clock is behind
      const short = newRunId();
      await j.createRun({ runId: short, workflow: "wf", input: null });
      await lease(j, short, "A", 100);
      await sleep(150);
      const taken = await withShiftedClock(-120_000, () => j.acquireLease(short, "B", 1000));
      expect(taken).toMatchObject({ acquired: true, fencingToken: 2 });
    });

    it("updateRun blocked: the run keeps its reason in error, records run_blocked with the reason as detail", async () => {
      const j = journal;
      const id = newRunId();
      await j.createRun({ runId: id, workflow: "wf", input: null });
      const t = await lease(j, id, "A");
      const reason = {
        name: "ReplayMismatchError",
        message: 'step #1 is "tool:x" in the journal',
        code: "REPLAY_MISMATCH",
      };
      expect(await j.updateRun(t, id, { status: "blocked", error: reason })).toEqual({ ok: true });
      expect(await j.getRun(id)).toMatchObject({ status: "blocked", error: reason });
      expect((await j.listRuns({ status: "blocked" })).map((r) => r.runId)).toContain(id);
      expect((await j.listRuns({ status: "running" })).map((r) => r.runId)).not.toContain(id);
      const last = (await j.readEvents(id)).at(-1);
      expect(last).toMatchObject({ type: "run_blocked", detail: reason.message, fencingToken: t });
    });

    it("appendEvent: numbered after the others, stamped by the store, every field kept; a missing run is refused", async () => {
      const j = journal;
      const id = newRunId();
      await j.createRun({ runId: id, workflow: "wf", input: null });
      const detail = 'input of "llm" changed: système prompt \u2028 ✓';
      await j.appendEvent(id, { type: "step_drift", seq: 3, name: "llm", attempt: 2, detail });
      await j.appendEvent(id, { type: "run_reset", seq: -1, by: "ops@host" });
      const events = await j.readEvents(id);
      expect(events.map((e) => e.index)).toEqual([0, 1, 2]);
      expect(events[1]).toMatchObject({ runId: id, type: "step_drift", seq: 3, name: "llm", attempt: 2, detail });
      expect(events[1]?.by).toBeUndefined();
      expect(events[2]).toMatchObject({ type: "run_reset", seq: -1, by: "ops@host" });
      expect(events[2]?.detail).toBeUndefined();
      await expect(j.appendEvent(`${id}-x`, { type: "step_drift" })).rejects.toBeInstanceOf(RunNotFoundError);
    });

    it("cancelRun: a waiting run ends cancelled, its executor is fenced off, the event names who and why; an ended run is left as it is", async () => {
      const j = journal;
      const id = newRunId();
      await j.createRun({ runId: id, workflow: "wf", input: null });
      const t = await lease(j, id, "A");
      await j.writeStep(t, rec(id, 0, t, { status: "completed", output: 1, finishedAt: Date.now() }));
      await j.updateRun(t, id, { status: "waiting", waitingFor: "approval" });
      const cancelled = await j.cancelRun(id, "alice@ops", "customer withdrew");
      expect(cancelled).toMatchObject({ runId: id, status: "cancelled", fencingToken: t + 1 });
      expect(cancelled.leaseOwner).toBeUndefined();
      expect(cancelled.leaseExpiresAt).toBeUndefined();
      expect(cancelled.waitingFor).toBeUndefined();
      expect(await j.getRun(id)).toEqual(cancelled);
      // the executor that held the lease can write nothing more
      await expect(j.writeStep(t, rec(id, 1, t))).rejects.toBeInstanceOf(StaleFencingTokenError);
      await expect(j.updateRun(t, id, { status: "completed", output: 1 })).rejects.toBeInstanceOf(
        StaleFencingTokenError,
      );
      await expect(j.renewLease(id, t, 1000)).rejects.toBeInstanceOf(StaleFencingTokenError);
      expect((await j.readSteps(id)).map((s) => s.seq)).toEqual([0]);
      const events = await j.readEvents(id);
      expect(events.at(-1)).toMatchObject({
        type: "run_cancelled",
        by: "alice@ops",
        detail: "customer withdrew",
        fencingToken: t + 1,
      });
      expect((await j.listRuns({ status: "cancelled" })).map((r) => r.runId)).toContain(id);
      // cancelling again, or cancelling a completed run, changes nothing and records nothing
      expect(await j.cancelRun(id, "bob", "again")).toEqual(cancelled);
      const done = newRunId();
      await j.createRun({ runId: done, workflow: "wf", input: null });
      const td = await lease(j, done, "A");
      await j.updateRun(td, done, { status: "completed", output: "ok" });
      const before = await j.readEvents(done);
      expect(await j.cancelRun(done, "bob")).toMatchObject({ status: "completed", output: "ok", fencingToken: td });
      expect(await j.readEvents(done)).toEqual(before);
      expect((await j.readEvents(id)).length).toBe(events.length);
      // a pending run without any lease is cancelled too; reason is optional
      const fresh = newRunId();
      await j.createRun({ runId: fresh, workflow: "wf", input: null });
      expect(await j.cancelRun(fresh, "carol")).toMatchObject({ status: "cancelled", fencingToken: 1 });
      expect((await j.readEvents(fresh)).at(-1)?.detail).toBeUndefined();
      await expect(j.cancelRun(`${id}-x`, "bob")).rejects.toBeInstanceOf(RunNotFoundError);
    });

    it("cancelRun is atomic with the executor's writes: each write lands before the cancel or is refused", async () => {
      const j = journal;
      const id = newRunId();
      await j.createRun({ runId: id, workflow: "wf", input: null });
      const t = await lease(j, id, "A");
      let written = 0;
      let cancel: Promise<unknown> | undefined;
      const writer = (async () => {
        for (let seq = 0; seq < 400; seq++) {
          // the operator's cancel is sent while the executor keeps writing
          if (seq === 3) cancel = j.cancelRun(id, "alice");
          try {
            await j.writeStep(t, rec(id, seq, t, { status: "completed", output: seq, finishedAt: Date.now() }));
            written++;
          } catch (e) {
            return e;
          }
          await new Promise((r) => setImmediate(r));
        }
        return undefined;
      })();
      expect(await writer).toBeInstanceOf(StaleFencingTokenError);
      await cancel;
      expect((await j.readSteps(id)).map((s) => s.seq)).toEqual(Array.from({ length: written }, (_, i) => i));
      const types = (await j.readEvents(id)).map((e) => e.type);
      expect(types.filter((x) => x === "step_completed")).toHaveLength(written);
      expect(types.at(-1)).toBe("run_cancelled");
    });

    it("resetRun: keeps steps 0..toSeq, the run is pending again with a new token (a completed run too), the event names who", async () => {
      const j = journal;
      const id = newRunId();
      await j.createRun({ runId: id, workflow: "wf", input: { q: 1 } });
      const t = await lease(j, id, "A");
      for (let seq = 0; seq < 4; seq++) {
        await j.writeStep(t, rec(id, seq, t, { status: "completed", output: { seq }, finishedAt: Date.now() }));
      }
      await j.updateRun(t, id, { status: "completed", output: { done: true } });
      // reset of a completed run is allowed: it re-runs from step toSeq + 1 on its next resume
      const reset = await j.resetRun(id, 1, "bob@ops");
      expect(reset).toMatchObject({ runId: id, status: "pending", input: { q: 1 }, fencingToken: t + 1 });
      for (const field of ["output", "error", "waitingFor", "wakeAt", "leaseOwner", "leaseExpiresAt"] as const) {
        expect(reset[field], field).toBeUndefined();
      }
      expect(await j.getRun(id)).toEqual(reset);
      expect((await j.readSteps(id)).map((s) => [s.seq, s.status, s.output])).toEqual([
        [0, "completed", { seq: 0 }],
        [1, "completed", { seq: 1 }],
      ]);
      expect((await j.readEvents(id)).at(-1)).toMatchObject({ type: "run_reset", seq: 1, by: "bob@ops" });
      await expect(j.writeStep(t, rec(id, 2, t))).rejects.toBeInstanceOf(StaleFencingTokenError);
      await expect(j.updateRun(t, id, { status: "running" })).rejects.toBeInstanceOf(StaleFencingTokenError);
      // the next executor continues at seq 2: no gap, and the kept steps stay completed
      const t2 = await lease(j, id, "B");
      expect(t2).toBe(t + 2);
      await expect(j.writeStep(t2, rec(id, 1, t2, { attempt: 2 }))).rejects.toBeInstanceOf(JournalIntegrityError);
      await j.writeStep(t2, rec(id, 2, t2, { name: "another" }));
      // -1 drops every step
      expect(await j.resetRun(id, -1, "carol")).toMatchObject({ status: "pending", fencingToken: t2 + 1 });
      expect(await j.readSteps(id)).toEqual([]);
      // a seq beyond the journal keeps everything
      const t3 = await lease(j, id, "C");
      await j.writeStep(t3, rec(id, 0, t3));
      await j.resetRun(id, 99, "carol");
      expect((await j.readSteps(id)).map((s) => s.seq)).toEqual([0]);
      // bad seqs change nothing
      const before = await j.getRun(id);
      for (const bad of [-2, 0.5, Number.NaN]) {
        await expect(j.resetRun(id, bad, "x")).rejects.toBeInstanceOf(InvalidOptionError);
      }
      expect(await j.getRun(id)).toEqual(before);
      await expect(j.resetRun(`${id}-x`, 0, "x")).rejects.toBeInstanceOf(RunNotFoundError);
    });

    it("retryRun: a failed run is pending again without its failed last step; a blocked run keeps its steps; others are refused", async () => {
      const j = journal;
      const id = newRunId();
      await j.createRun({ runId: id, workflow: "wf", input: null });
      const t = await lease(j, id, "A");
      await j.writeStep(t, rec(id, 0, t, { status: "completed", output: 0, finishedAt: Date.now() }));
      await j.writeStep(t, rec(id, 1, t, { name: "tool:pay", status: "started" }));
      // a running run cannot be retried
      const refused = await j.retryRun(id, "bob").catch((e: unknown) => e);
      expect(refused).toBeInstanceOf(RunStateError);
      expect(refused).toMatchObject({
        code: "RUN_STATE",
        runId: id,
        status: (await j.getRun(id))?.status,
        action: "retry",
      });
      expect((await j.getRun(id))?.fencingToken).toBe(t);
      const error = { name: "Error", message: "card declined" };
      await j.writeStep(t, rec(id, 1, t, { name: "tool:pay", status: "failed", attempt: 3, error }));
      await j.updateRun(t, id, { status: "failed", error });
      const retried = await j.retryRun(id, "bob@ops");
      expect(retried).toMatchObject({ status: "pending", fencingToken: t + 1 });
      expect(retried.error).toBeUndefined();
      expect(retried.leaseOwner).toBeUndefined();
      expect((await j.readSteps(id)).map((s) => s.seq)).toEqual([0]);
      expect((await j.readEvents(id)).at(-1)).toMatchObject({
        type: "run_retried",
        by: "bob@ops",
        seq: 1,
        name: "tool:pay",
        fencingToken: t + 1,
      });
      await expect(j.writeStep(t, rec(id, 1, t, { name: "tool:pay" }))).rejects.toBeInstanceOf(StaleFencingTokenError);
      // the step runs again at the same seq with a fresh attempt count
      const t2 = await lease(j, id, "B");
      await j.writeStep(t2, rec(id, 1, t2, { name: "tool:pay", attempt: 1 }));
      // blocked: the steps are kept (the last one did not fail)
      await j.writeStep(
        t2,
        rec(id, 1, t2, { name: "tool:pay", status: "completed", output: 1, finishedAt: Date.now() }),
      );
      await j.updateRun(t2, id, { status: "blocked", error: { name: "ReplayMismatchError", message: "diverged" } });
      expect(await j.retryRun(id, "carol")).toMatchObject({ status: "pending", fencingToken: t2 + 1 });
      expect((await j.readSteps(id)).map((s) => s.seq)).toEqual([0, 1]);
      const last = (await j.readEvents(id)).at(-1);
      expect(last).toMatchObject({ type: "run_retried", by: "carol" });
      expect(last?.seq).toBeUndefined();
      // pending, completed and cancelled runs are refused
      await expect(j.retryRun(id, "carol")).rejects.toBeInstanceOf(RunStateError);
      await j.cancelRun(id, "carol");
      await expect(j.retryRun(id, "carol")).rejects.toBeInstanceOf(RunStateError);
      expect((await j.getRun(id))?.status).toBe("cancelled");
      await expect(j.retryRun(`${id}-x`, "x")).rejects.toBeInstanceOf(RunNotFoundError);
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
