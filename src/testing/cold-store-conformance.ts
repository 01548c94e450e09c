/**
 * The cold store conformance suite: one call registers the tests every
 * workflow {@link ColdStore} must pass — the built-in SQLite and PostgreSQL
 * cold stores and a user's own — by driving `CheckpointStore` (and the runner
 * and idempotency guard above it) over a fresh cold store per test.
 *
 * Covered through the contract alone: save / latest / any step / history in
 * order, compare-and-set on the step index, invalid states refused on save and
 * named (workflow, step, path) on load, schema migrations on load, large values
 * in the blob store (one blob per value, none orphaned by a delete), deleting
 * every row of a workflow, keyset pagination of `listWorkflows`, a run end to
 * end. Tests that must reach below the contract use optional hooks of the
 * factory's {@link ColdStoreFixture} (aging rows for retention, counting
 * side-effect records, bulk-inserting 100,000 summaries and the expected query
 * plan); a test whose hook is missing is skipped, naming the hook.
 *
 * The suite imports no test runner: the caller passes its test functions as
 * `options.test` (see `ConformanceTestApi`; vitest's namespace fits).
 *
 * @module
 */
import { randomUUID } from "node:crypto";
import { existsSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { ConflictError } from "../core/errors.js";
import { checkOptions, optionKeys } from "../core/options.js";
import { BLOB_REF_FIELD } from "../workflow/blobs.js";
import type { ColdStore } from "../workflow/cold.js";
import { WorkflowMigrationError, WorkflowNotFoundError, WorkflowStateError } from "../workflow/errors.js";
import type { RedisHotTier } from "../workflow/hot-redis.js";
import { IdempotencyGuard } from "../workflow/idempotency.js";
import { ResumableGraphRunner } from "../workflow/runner.js";
import { createWorkflowState, END, type WorkflowState } from "../workflow/state.js";
import { CheckpointStore } from "../workflow/store.js";
import { type ConformanceSuiteOptions, type ConformanceTestContext, suiteGroup } from "./test-api.js";

/** The keys of {@link ColdStoreConformanceOptions}: any other is an `InvalidOptionError`. */
const SUITE_OPTIONS = optionKeys<ColdStoreConformanceOptions>({ test: true, skip: true, largeTestTimeoutMs: true });

/**
 * What the factory of {@link runColdStoreConformance} returns for one test: a
 * fresh, empty cold store and, optionally, hooks that reach below the
 * {@link ColdStore} contract (they know the store's tables). Each hook closes
 * over this test's store (its file, schema or connection).
 */
export interface ColdStoreFixture<C extends ColdStore = ColdStore> {
  /** A fresh, empty cold store (a new file, a new schema). The suite opens `CheckpointStore`s over it (which call `init()`). */
  cold: C;
  /**
   * Optional hot tier put in front of the cold store: the suite then runs every test through
   * both tiers (a Redis hot tier with a fresh key prefix per test), as a deployment does.
   */
  hot?: RedisHotTier;
  /** Called after the test (close the store, drop the schema, remove the file). @default calls `cold.close()` */
  destroy?: () => unknown;
  /**
   * Marks every snapshot and every side-effect record of `workflowId` as created at `createdAt`
   * (ms since the epoch: `workflow_snapshots.created_at`, `workflow_idempotency.started_at`).
   * Needed by the retention (`prune`) tests.
   */
  ageSnapshots?: (workflowId: string, createdAt: number) => Promise<void>;
  /** The number of side-effect records (`workflow_idempotency` rows) of `workflowId`. Needed by the tests that check they are deleted. */
  countIdempotencyRecords?: (workflowId: string) => Promise<number>;
  /**
   * Inserts `count` workflow summary rows in one transaction and refreshes the planner's
   * statistics: ids `bulk-<i>`, status cycling `running`, `waiting`, `finished`, `failed`,
   * `latest_step` 0, `updated_at` = `created_at` spread over a few hours. Needed by the
   * 100,000-workflow test, with {@link ColdStoreFixture.listPlan}.
   */
  bulkInsertSummaries?: (count: number) => Promise<void>;
  /**
   * What the plan of the `list` query ({@link ColdStore.explainList}) must show once the table
   * is large: `mustMatch` (the index's name) and `mustNotMatch` (a full scan, a sort).
   */
  listPlan?: { mustMatch: RegExp; mustNotMatch?: RegExp };
}

/** Options of {@link runColdStoreConformance}: the caller's `test` functions and a `skip` reason. */
export interface ColdStoreConformanceOptions extends ConformanceSuiteOptions {
  /** Timeout of the 100,000-workflow test, in ms. @default 120_000 */
  largeTestTimeoutMs?: number;
}

type Hook = "ageSnapshots" | "countIdempotencyRecords" | "bulkInsertSummaries" | "listPlan";

const step = (s: WorkflowState, patch: Partial<WorkflowState>): WorkflowState => ({
  ...s,
  stepIndex: s.stepIndex + 1,
  updatedAt: s.updatedAt + 1,
  ...patch,
});

/**
 * Replaces the JSON of a stored snapshot through the contract (an upsert of its row), as an
 * old or corrupted row would read.
 */
async function overwriteSnapshotJson(cold: ColdStore, workflowId: string, stepIndex: number, json: string) {
  const row = await cold.read(workflowId, stepIndex);
  const summary = await cold.summary(workflowId);
  if (!row || !summary) throw new Error(`no snapshot ${workflowId}@${stepIndex} to overwrite`);
  await cold.write(
    {
      ...row,
      stateJson: json,
      sessionId: summary.sessionId,
      status: summary.status,
      currentNode: summary.currentNode,
      parentWorkflowId: summary.parentWorkflowId,
      activeStep: stepIndex,
      blobRefs: [],
    },
    undefined,
  );
}

/**
 * Registers the conformance tests of a workflow cold store through the caller's test functions
 * (`options.test`).
 *
 * Call it at the top level of a test file. Each test gets a fresh fixture from `factory` (an
 * empty store), a fresh blob directory, and random workflow ids; the fixture's `destroy`
 * (default: `cold.close()`) runs after each test.
 *
 * @param name - label of the suite, shown in its title: `cold store conformance: <name>`
 * @param factory - returns a {@link ColdStoreFixture} with a fresh, empty store (sync or async)
 * @param options - `test` (the test functions, required), `skip` reason (the suite is registered
 *   as skipped, the reason in its title), `largeTestTimeoutMs` (@default 120_000)
 * @example
 * // test/my-cold-store.test.ts
 * import * as vitest from "vitest";
 * import { runColdStoreConformance } from "dumplings-ai/testing";
 * import { MyColdStore } from "../src/my-cold-store.js";
 *
 * runColdStoreConformance(
 *   "mine",
 *   () => {
 *     const cold = new MyColdStore({ namespace: crypto.randomUUID() });
 *     return { cold, destroy: () => cold.dropAndClose() }; // no hooks: their tests are skipped
 *   },
 *   { test: vitest },
 * );
 */
export function runColdStoreConformance<C extends ColdStore>(
  name: string,
  factory: () => ColdStoreFixture<C> | Promise<ColdStoreFixture<C>>,
  options: ColdStoreConformanceOptions,
): void {
  checkOptions("runColdStoreConformance", options, SUITE_OPTIONS);
  const { it, expect, beforeEach, afterEach } = options.test;
  suiteGroup(options, `cold store conformance: ${name}`, () => {
    let fx: ColdStoreFixture<C>;
    let blobDir: string;
    /** A random workflow id. */
    const wf = (label: string) => `${label}-${randomUUID()}`;
    const open = async (opts: { cold?: ColdStore; schemaVersion?: number; blobThreshold?: number } = {}) =>
      CheckpointStore.open({
        cold: opts.cold ?? fx.cold,
        hot: opts.cold ? undefined : fx.hot,
        blobDir,
        schemaVersion: opts.schemaVersion,
        blobThreshold: opts.blobThreshold,
      });
    /** The hooks a test needs, or a skip naming the missing ones. */
    const hooks = (ctx: ConformanceTestContext, ...names: Hook[]): Required<ColdStoreFixture<C>> => {
      const missing = names.filter((h) => fx[h] === undefined);
      if (missing.length > 0) ctx.skip(`the fixture has no ${missing.join(" or ")} hook`);
      return fx as Required<ColdStoreFixture<C>>;
    };

    beforeEach(async () => {
      blobDir = path.join(mkdtempSync(path.join(tmpdir(), "dumplings-cold-conformance-")), "blobs");
      fx = await factory();
    });
    afterEach(async () => {
      try {
        if (fx) await (fx.destroy ? fx.destroy() : fx.cold.close());
      } finally {
        rmSync(path.dirname(blobDir), { recursive: true, force: true });
      }
    });

    /** A workflow whose second node throws after one side effect of the first. */
    const failingRun = async (store: CheckpointStore, id: string) => {
      const runner = new ResumableGraphRunner({
        store,
        nodes: {
          a: async (_s, ctx) => {
            await ctx.sideEffect("e", () => 1);
            return { next: "b" };
          },
          b: () => {
            throw new Error("no");
          },
        },
      });
      await expect(runner.runOrResume(id)).rejects.toThrow(/no/);
    };

    /** Two workflows of six steps aged to t=1000 (each step guarded a side effect) and one recent. */
    const agedWorkflows = async (store: CheckpointStore, age: (id: string, at: number) => Promise<void>) => {
      const ids = { p1: wf("p1"), p2: wf("p2"), p3: wf("p3") };
      const guard = new IdempotencyGuard({ store });
      for (const id of [ids.p1, ids.p2]) {
        let s = createWorkflowState({ workflowId: id, now: 1000 });
        await store.save(s, { expectedStep: null });
        for (let i = 1; i <= 5; i++) {
          await guard.run(IdempotencyGuard.key(id, i - 1, 0), () => i, { workflowId: id, stepIndex: i - 1 });
          s = step(s, { currentNode: "n" });
          await store.save(s, { expectedStep: i - 1 });
        }
        await age(id, 1000);
      }
      const fresh = createWorkflowState({ workflowId: ids.p3 });
      await store.save(fresh, { expectedStep: null });
      await store.save(step(fresh, {}), { expectedStep: 0 });
      return ids;
    };

    it("saves, loads the latest, gets any step and lists the history in order", async () => {
      const store = await open();
      const id = wf("a");
      let s = createWorkflowState({ workflowId: id, sharedMemory: { n: 0 }, now: 1000 });
      await store.save(s, { expectedStep: null, nodeName: "__start__" });
      for (let i = 1; i <= 3; i++) {
        s = step(s, { currentNode: "inc", sharedMemory: { n: i } });
        await store.save(s, { expectedStep: i - 1, nodeName: "inc" });
      }
      expect((await store.loadLatest(id))?.sharedMemory).toEqual({ n: 3 });
      expect((await store.get(id, 1)).sharedMemory).toEqual({ n: 1 });
      expect((await store.history(id)).map((h) => [h.stepIndex, h.nodeName])).toEqual([
        [0, "__start__"],
        [1, "inc"],
        [2, "inc"],
        [3, "inc"],
      ]);
      await expect(store.get(id, 9)).rejects.toBeInstanceOf(WorkflowNotFoundError);
      const missing = wf("missing");
      expect(await store.loadLatest(missing)).toBeUndefined();
      expect(await store.history(missing)).toEqual([]);
    });

    it("compare-and-set on the step index: a stale writer gets ConflictError and nothing is written", async () => {
      const store = await open();
      const id = wf("cas");
      const s0 = createWorkflowState({ workflowId: id, now: 1000 });
      await store.save(s0, { expectedStep: null });
      await expect(store.save(s0, { expectedStep: null })).rejects.toBeInstanceOf(ConflictError);
      await store.save(step(s0, { sharedMemory: { who: "first" } }), { expectedStep: 0 });
      const err = await store
        .save(step(s0, { sharedMemory: { who: "second" } }), { expectedStep: 0 })
        .catch((e: unknown) => e);
      expect(err).toBeInstanceOf(ConflictError);
      expect((err as ConflictError).actualRevision).toBe(1);
      expect((await store.loadLatest(id))?.sharedMemory).toEqual({ who: "first" });
      // Plain save (no expectedStep) is an upsert of that step's row.
      await store.save(step(s0, { sharedMemory: { who: "upserted" } }));
      expect((await store.get(id, 1)).sharedMemory).toEqual({ who: "upserted" });
      expect((await store.history(id)).length).toBe(2);
    });

    it("refuses invalid states on save and names workflow, step and path on load", async () => {
      const store = await open();
      const id = wf("bad");
      const s0 = createWorkflowState({ workflowId: id, now: 1000 });
      await expect(store.save({ ...s0, stepIndex: -1 })).rejects.toBeInstanceOf(WorkflowStateError);
      await expect(store.save({ ...s0, sharedMemory: { x: Number.NaN } })).rejects.toThrow(/sharedMemory\.x/);
      expect(await store.loadLatest(id)).toBeUndefined(); // nothing was written
      await store.save(s0, { expectedStep: null });
      const broken = {
        ...s0,
        historyRecords: [{ toolName: "t", arguments: {}, result: 1, latencyMs: "slow", timestamp: 1 }],
      };
      await overwriteSnapshotJson(store.cold, id, 0, JSON.stringify(broken));
      const err = await store.get(id, 0).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(WorkflowStateError);
      expect(err).toMatchObject({ workflowId: id, stepIndex: 0, path: "historyRecords[0].latencyMs" });
      await overwriteSnapshotJson(store.cold, id, 0, JSON.stringify({ ...s0, extra: 1 }));
      await expect(store.get(id, 0)).rejects.toMatchObject({ path: "extra" });
    });

    it("upgrades old snapshots through registered migrations on load", async () => {
      const v1 = await open();
      const id = wf("mig");
      const s0 = createWorkflowState({ workflowId: id, sharedMemory: { fullName: "Ada Lovelace" }, now: 1000 });
      await v1.save(s0, { expectedStep: null });
      const v2 = await open({ schemaVersion: 2 });
      await expect(v2.get(id, 0)).rejects.toBeInstanceOf(WorkflowMigrationError);
      v2.registerMigration(1, 2, (snap) => {
        const mem = snap.sharedMemory as { fullName: string };
        const [first, last] = mem.fullName.split(" ");
        return { ...snap, sharedMemory: { first: first ?? "", last: last ?? "" } };
      });
      const up = await v2.get(id, 0);
      expect(up.sharedMemory).toEqual({ first: "Ada", last: "Lovelace" });
      expect(up.schemaVersion).toBe(2);
      // A snapshot from a newer version is refused, not misread.
      await v2.save(step(up, {}), { expectedStep: 0 });
      await expect(v1.get(id, 1)).rejects.toBeInstanceOf(WorkflowMigrationError);
    });

    it("moves large values to the content-addressed blob store and loads them transparently", async () => {
      const store = await open({ blobThreshold: 1024 });
      const id = wf("blob");
      const big = "x".repeat(5000);
      const s0 = createWorkflowState({ workflowId: id, sharedMemory: { big, small: 1 }, now: 1000 });
      await store.save(s0, { expectedStep: null });
      await store.save(step(s0, { sharedMemory: { big, small: 2 } }), { expectedStep: 0 });
      const row = await store.cold.read(id, 1);
      expect(row?.stateJson.length).toBeLessThan(1000);
      expect(JSON.parse(row?.stateJson ?? "{}").sharedMemory.big[BLOB_REF_FIELD]).toMatch(/^sha256:[0-9a-f]{64}$/);
      expect((await store.loadLatest(id))?.sharedMemory).toEqual({ big, small: 2 });
      const blobFiles = () =>
        existsSync(blobDir) ? readdirSync(blobDir, { recursive: true }).filter((f) => String(f).length > 60) : [];
      expect(blobFiles()).toHaveLength(1); // the same value in two steps is one blob
      expect(await store.delete(id)).toBe(true);
      expect(blobFiles()).toHaveLength(0); // no orphan blob
      expect(await store.loadLatest(id)).toBeUndefined();
      expect(await store.delete(id)).toBe(false);
    });

    it("deletes every row of a workflow (snapshots, summary, errors)", async () => {
      const store = await open();
      const id = wf("del");
      await failingRun(store, id);
      expect(await store.errors(id)).toHaveLength(1);
      expect(await store.summary(id)).toMatchObject({ workflowId: id, status: "failed" });
      expect(await store.delete(id)).toBe(true);
      expect(await store.history(id)).toEqual([]);
      expect(await store.errors(id)).toEqual([]);
      expect(await store.summary(id)).toBeUndefined();
    });

    it("deleting a workflow deletes its side-effect records", async (ctx) => {
      const { countIdempotencyRecords } = hooks(ctx, "countIdempotencyRecords");
      const store = await open();
      const id = wf("del");
      await failingRun(store, id);
      expect(await countIdempotencyRecords(id)).toBe(1);
      expect(await store.delete(id)).toBe(true);
      expect(await countIdempotencyRecords(id)).toBe(0);
    });

    it("prunes old snapshots, keeping each workflow's newest steps and its resumability", async (ctx) => {
      const { ageSnapshots } = hooks(ctx, "ageSnapshots");
      const store = await open();
      const ids = await agedWorkflows(store, ageSnapshots);
      const out = await store.prune({ olderThan: 60_000, keepLast: 2 });
      expect(out.deletedSnapshots).toBe(8);
      expect((await store.history(ids.p1)).map((h) => h.stepIndex)).toEqual([4, 5]);
      expect((await store.history(ids.p3)).map((h) => h.stepIndex)).toEqual([0, 1]); // recent: untouched
      expect((await store.loadLatest(ids.p2))?.stepIndex).toBe(5);
      await expect(store.prune({ olderThan: new Date(), keepLast: 0 })).rejects.toBeInstanceOf(RangeError);
    });

    it("pruning deletes the side-effect records of the pruned node runs", async (ctx) => {
      const { ageSnapshots, countIdempotencyRecords } = hooks(ctx, "ageSnapshots", "countIdempotencyRecords");
      const store = await open();
      const ids = await agedWorkflows(store, ageSnapshots);
      expect(await countIdempotencyRecords(ids.p1)).toBe(5);
      await store.prune({ olderThan: 60_000, keepLast: 2 });
      expect(await countIdempotencyRecords(ids.p1)).toBe(0);
    });

    it("lists workflows by status with keyset pagination, each once, newest first", async () => {
      const store = await open();
      const prefix = randomUUID();
      const ids = Array.from({ length: 25 }, (_, i) => `${prefix}-l${String(i).padStart(2, "0")}`);
      for (const [i, id] of ids.entries()) {
        const s = createWorkflowState({ workflowId: id, now: 10_000 + (i % 5) });
        await store.save(i % 3 === 0 ? { ...s, status: "waiting" } : s, { expectedStep: null });
      }
      const seen: string[] = [];
      let cursor: string | undefined;
      do {
        const page = await store.listWorkflows({ limit: 7, cursor });
        seen.push(...page.items.map((w) => w.workflowId));
        cursor = page.nextCursor;
      } while (cursor);
      expect(seen).toHaveLength(25);
      expect(new Set(seen).size).toBe(25);
      const waiting = await store.listWorkflows({ status: "waiting", limit: 100 });
      expect(waiting.items.map((w) => w.workflowId).sort()).toEqual(ids.filter((_, i) => i % 3 === 0).sort());
      expect(waiting.nextCursor).toBeUndefined();
      const times = waiting.items.map((w) => w.updatedAt);
      expect([...times].sort((a, b) => b - a)).toEqual(times);
      await expect(store.listWorkflows({ cursor: "garbage" })).rejects.toBeInstanceOf(RangeError);
    });

    it(
      "at 100,000 workflows the list query is served by the index (query plan), and pages are right",
      async (ctx) => {
        const { bulkInsertSummaries, listPlan } = hooks(ctx, "bulkInsertSummaries", "listPlan");
        const store = await open();
        await bulkInsertSummaries(100_000);
        for (const status of ["waiting", undefined] as const) {
          const plan = await store.cold.explainList(status);
          expect(plan).toMatch(listPlan.mustMatch);
          if (listPlan.mustNotMatch) expect(plan).not.toMatch(listPlan.mustNotMatch);
        }
        const first = await store.listWorkflows({ status: "waiting", limit: 3 });
        expect(first.items).toHaveLength(3);
        expect(first.items.every((w) => w.status === "waiting")).toBe(true);
        const second = await store.listWorkflows({ status: "waiting", limit: 3, cursor: first.nextCursor });
        const last = first.items[2];
        expect(second.items[0]?.updatedAt).toBeLessThanOrEqual(last?.updatedAt ?? Number.NaN);
        expect(second.items.map((w) => w.workflowId)).not.toContain(last?.workflowId);
      },
      options.largeTestTimeoutMs ?? 120_000,
    );

    it("runs a workflow end to end", async () => {
      const store = await open();
      const id = wf("e2e");
      const runner = new ResumableGraphRunner({
        store,
        nodes: { only: (s) => ({ next: END, updates: { seen: s.workflowId } }) },
      });
      const out = await runner.runOrResume(id);
      expect(out.state.sharedMemory).toEqual({ seen: id });
    });
  });
}
