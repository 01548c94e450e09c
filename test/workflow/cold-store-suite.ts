/**
 * The workflow store suite: one call registers the tests every workflow
 * {@link ColdStore} must pass — the built-in SQLite and PostgreSQL stores, with
 * and without a Redis hot tier, and the store over a bare durable journal — by
 * driving `CheckpointStore` (and the runner and idempotency guard above it)
 * over a fresh store per test.
 *
 * It lives with the tests, no longer in `dumplings-ai/testing` (issue 22,
 * part 5): a workflow store is a durable journal now, whose contract is
 * `runJournalConformance` (public); this suite pins what the workflow store
 * adds over the journal, and the `ColdStore` extension surface is deprecated.
 *
 * Covered through the contract alone: save / latest / any step / history in
 * order, compare-and-set on the step index, invalid states refused on save and
 * named (workflow, step, path) on load, schema migrations on load, large values
 * in a blob directory (one blob per value, none orphaned by a delete) and, for a
 * store that keeps blobs itself (`readBlob`), in its own database (a blob two
 * workflows share survives the delete of one, none is orphaned), deleting
 * every row of a workflow, keyset pagination of `listWorkflows`, a run end to
 * end; and, for a store that keeps leases (the optional `acquireLease`,
 * `renewLease`, `releaseLease`), the lease (taken, refused to a second owner
 * with its holder and expiry, taken over after its expiry with a higher
 * fencing token, renewed, released) and the fenced writes (a stale token's
 * checkpoint, error record and side-effect start refused with
 * `WorkflowLeaseLostError`, nothing written; a token from before a delete or a
 * prune never passes a fence again). Tests that must reach below
 * the contract use optional hooks of the factory's {@link ColdStoreFixture} (aging rows for retention, counting
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
import { ConflictError, InvalidOptionError } from "../../src/core/errors.js";
import { checkOptions, optionKeys } from "../../src/core/options.js";
import { BLOB_REF_FIELD, blobRef } from "../../src/durable/checkpoints/blobs.js";
import type { ColdStore } from "../../src/durable/checkpoints/contract.js";
import type { RedisHotTier } from "../../src/durable/checkpoints/hot-redis.js";
import { JournalColdStore } from "../../src/durable/checkpoints/journal-store.js";
import { type ConformanceSuiteOptions, type ConformanceTestContext, suiteGroup } from "../../src/testing/test-api.js";
import {
  WorkflowConflictError,
  WorkflowLeaseLostError,
  WorkflowMigrationError,
  WorkflowNotFoundError,
  WorkflowStateError,
} from "../../src/workflow/errors.js";
import { IdempotencyGuard } from "../../src/workflow/idempotency.js";
import { ResumableGraphRunner } from "../../src/workflow/runner.js";
import { createWorkflowState, END, type WorkflowState } from "../../src/workflow/state.js";
import { CheckpointStore } from "../../src/workflow/store.js";

/** The keys of {@link ColdStoreConformanceOptions}: any other is an `InvalidOptionError`. */
const SUITE_OPTIONS = optionKeys<ColdStoreConformanceOptions>({ test: true, skip: true, largeTestTimeoutMs: true });

/**
 * What the factory of {@link runColdStoreConformance} returns for one test: a
 * fresh, empty cold store and, optionally, hooks that reach below the
 * {@link ColdStore} contract (they know the store's tables). Each hook closes
 * over this test's store (its file, schema or connection).
 */

/** The deprecated lease methods of a cold store (the runner now leases through the store's journal). */
type LeasingColdStore = Required<Pick<ColdStore, "acquireLease" | "renewLease" | "releaseLease">>;
/** Whether the graph runner can lease through this store (a store over a durable journal). */
const keepsLeases = (cold: ColdStore): boolean => cold instanceof JournalColdStore;

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
 * // test/workflow/store-mine.test.ts
 * import * as vitest from "vitest";
 * import { runColdStoreConformance } from "./cold-store-suite.js";
 * import { MyColdStore } from "../../src/workflow/my-cold-store.js";
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
    /** The store's leases, or a skip when it keeps none. */
    const leasing = (ctx: ConformanceTestContext): LeasingColdStore => {
      if (!keepsLeases(fx.cold)) ctx.skip("the cold store keeps no leases (acquireLease, renewLease, releaseLease)");
      return fx.cold as unknown as LeasingColdStore;
    };
    /** Runners of the suite: with leases when the store keeps them (without, a runner needs `lease: false`). */
    const runnerLease = () => (keepsLeases(fx.cold) ? {} : { lease: false });
    const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
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
        ...runnerLease(),
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

    it("keeps large values with the checkpoints when the store keeps blobs (readBlob): shared ones survive a delete", async (ctx) => {
      const cold = fx.cold;
      if (typeof cold.readBlob !== "function") ctx.skip("the cold store keeps no blobs of its own (no readBlob)");
      const store = await CheckpointStore.open({ cold, hot: fx.hot, blobThreshold: 1024, legacyBlobDirs: [] });
      const [a, b] = [wf("blob-a"), wf("blob-b")];
      const shared = "s".repeat(5000);
      const own = "o".repeat(5000);
      const ref = (v: string) => blobRef(Buffer.from(JSON.stringify(v)));
      const s0 = createWorkflowState({ workflowId: a, sharedMemory: { shared, own, n: 0 }, now: 1000 });
      await store.save(s0, { expectedStep: null });
      await store.save(step(s0, { sharedMemory: { shared, own, n: 1 } }), { expectedStep: 0 });
      await store.save(createWorkflowState({ workflowId: b, sharedMemory: { shared }, now: 1000 }), {
        expectedStep: null,
      });
      expect(existsSync(blobDir)).toBe(false); // nothing in a directory
      expect(Buffer.from((await cold.readBlob!(ref(own))) ?? []).toString("utf8")).toBe(JSON.stringify(own));
      expect((await store.loadLatest(a))?.sharedMemory).toEqual({ shared, own, n: 1 });
      expect(await store.delete(a)).toBe(true);
      expect(await cold.readBlob!(ref(own))).toBeUndefined(); // deleted with its last reference
      expect((await store.loadLatest(b))?.sharedMemory).toEqual({ shared }); // still referenced by b
      expect(await store.delete(b)).toBe(true);
      expect(await cold.readBlob!(ref(shared))).toBeUndefined();
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
      // 8 checkpoints; a store over a journal also counts the side-effect records pruned with them.
      expect(out.deletedSnapshots).toBeGreaterThan(7);
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
      // The node runs before the kept checkpoints (4, 5) lose their records; a store over a journal keeps
      // the record of the node run between the two kept checkpoints (it lies after checkpoint 4).
      expect(await countIdempotencyRecords(ids.p1)).toBeLessThan(2);
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
      const times = waiting.items.map((w) => w.createdAt);
      expect([...times].sort((a, b) => b - a)).toEqual(times);
      await expect(store.listWorkflows({ cursor: "garbage" })).rejects.toBeInstanceOf(InvalidOptionError);
      // a cursor of an earlier release ([updatedAt, workflowId], update order) is refused, saying what to do
      const old = Buffer.from(JSON.stringify([10_004, ids[4]]), "utf8").toString("base64url");
      await expect(store.listWorkflows({ cursor: old })).rejects.toThrow(/earlier release.*first page/);
    });

    it("a walk of listWorkflows lists each workflow exactly once while workflows take steps and start between its pages", async () => {
      const store = await open();
      const prefix = randomUUID();
      const ids: string[] = [];
      const states = new Map<string, WorkflowState>();
      for (let i = 0; i < 10; i++) {
        const id = `${prefix}-m${String(i).padStart(2, "0")}`;
        const s: WorkflowState = { ...createWorkflowState({ workflowId: id, now: 10_000 + i }), status: "waiting" };
        await store.save(s, { expectedStep: null });
        states.set(id, s);
        ids.push(id);
        if (i % 3 === 2) await sleep(3); // some workflows share a millisecond, others do not
      }
      for (const status of [undefined, "waiting"] as const) {
        const seen: string[] = [];
        let cursor: string | undefined;
        for (let n = 0; n < 30; n++) {
          const page = await store.listWorkflows({ limit: 3, cursor, ...(status ? { status } : {}) });
          seen.push(...page.items.map((w) => w.workflowId));
          cursor = page.nextCursor;
          if (cursor === undefined) break;
          await sleep(2);
          // the oldest workflow not listed yet runs a node and waits again (its run's status changes twice, its
          // updatedAt becomes the newest), and a new one starts
          const oldest = ids.filter((id) => !seen.includes(id)).at(-1);
          if (oldest !== undefined) {
            let s = states.get(oldest) as WorkflowState;
            for (const next of ["running", "waiting"] as const) {
              const after = step(s, { status: next });
              await store.save(after, { expectedStep: s.stepIndex });
              s = after;
            }
            states.set(oldest, s);
          }
          const fresh = createWorkflowState({ workflowId: `${prefix}-new-${status}-${n}`, now: 1 });
          await store.save({ ...fresh, status: "waiting" }, { expectedStep: null });
        }
        for (const id of ids)
          expect(
            seen.filter((x) => x === id),
            `${id} (status ${status})`,
          ).toHaveLength(1);
        expect(new Set(seen).size, "no workflow twice").toBe(seen.length);
      }
    });

    it(
      "at 100,000 workflows the list query is served by the index (query plan, where the fixture can read it), and pages are right",
      async (ctx) => {
        const { bulkInsertSummaries } = hooks(ctx, "bulkInsertSummaries");
        const store = await open();
        await bulkInsertSummaries(100_000);
        // A journal-backed store lists through the journal's listRuns (its indexes are the journal's own):
        // explainList gives that query's plan on an SQL journal; the pages below are checked all the same.
        const listPlan = fx.listPlan;
        for (const status of listPlan ? (["waiting", undefined] as const) : []) {
          const plan = await store.cold.explainList(status);
          expect(plan).toMatch(listPlan!.mustMatch);
          if (listPlan!.mustNotMatch) expect(plan).not.toMatch(listPlan!.mustNotMatch);
        }
        const first = await store.listWorkflows({ status: "waiting", limit: 3 });
        expect(first.items).toHaveLength(3);
        expect(first.items.every((w) => w.status === "waiting")).toBe(true);
        const second = await store.listWorkflows({ status: "waiting", limit: 3, cursor: first.nextCursor });
        const last = first.items[2];
        expect(second.items[0]?.createdAt).toBeLessThanOrEqual(last?.createdAt ?? Number.NaN);
        expect(second.items.map((w) => w.workflowId)).not.toContain(last?.workflowId);
      },
      options.largeTestTimeoutMs ?? 120_000,
    );

    it("runs a workflow end to end", async () => {
      const store = await open();
      const id = wf("e2e");
      const runner = new ResumableGraphRunner({
        store,
        ...runnerLease(),
        nodes: { only: (s) => ({ next: END, updates: { seen: s.workflowId } }) },
      });
      const out = await runner.runOrResume(id);
      expect(out.state.sharedMemory).toEqual({ seen: id });
    });

    it("a checkpoint conflict names the workflow and its steps, not a session's revision", async () => {
      const store = await open();
      const id = wf("wording");
      const s0 = createWorkflowState({ workflowId: id, now: 1000 });
      await store.save(s0, { expectedStep: null });
      const created = await store.save(s0, { expectedStep: null }).catch((e: unknown) => e);
      expect(created).toBeInstanceOf(ConflictError);
      expect(created).toBeInstanceOf(WorkflowConflictError);
      expect(created).toMatchObject({ workflowId: id, expectedStep: null, actualStep: 0, code: "CONFLICT" });
      const text = (created as Error).message;
      expect(text).toMatch(/checkpoint conflict/);
      expect(text).toMatch(/already exists \(latest step 0/);
      expect(/session|force|revision/.test(text)).toBe(false);
      await store.save(step(s0, {}), { expectedStep: 0 });
      const stale = await store.save(step(s0, {}), { expectedStep: 0 }).catch((e: unknown) => e);
      expect(stale).toMatchObject({ expectedStep: 0, actualStep: 1 });
      expect((stale as Error).message).toMatch(/continues from step 0, but the latest stored step is 1/);
    });

    it("leases: one owner at a time, refused with the holder and expiry, taken over after expiry with a higher token", async (ctx) => {
      const leases = leasing(ctx);
      await open(); // creates the tables
      const id = wf("lease");
      const a = await leases.acquireLease(id, "worker-a", 30_000);
      expect(a).toMatchObject({ acquired: true, fencingToken: 1 });
      const refused = await leases.acquireLease(id, "worker-b", 30_000);
      expect(refused).toMatchObject({ acquired: false, owner: "worker-a", fencingToken: 1 });
      expect((refused as { expiresAt: number }).expiresAt).toBe((a as { expiresAt: number }).expiresAt);
      // Renewed with the current token; released; then anyone's.
      expect(await leases.renewLease(id, 1, 30_000)).toBeGreaterThan(0);
      await leases.releaseLease(id, 1);
      await expect(leases.renewLease(id, 1, 30_000)).rejects.toBeInstanceOf(WorkflowLeaseLostError);
      const b = await leases.acquireLease(id, "worker-b", 60);
      expect(b).toMatchObject({ acquired: true, fencingToken: 2 });
      // A lease nobody renews expires (by the store's clock) and is taken over with a higher token.
      await sleep(150);
      const c = await leases.acquireLease(id, "worker-c", 30_000);
      expect(c).toMatchObject({ acquired: true, fencingToken: 3 });
      // The old holder's token is stale: renewing and releasing with it change nothing.
      await expect(leases.renewLease(id, 2, 30_000)).rejects.toMatchObject({
        code: "STALE_FENCING_TOKEN",
        fencingToken: 2,
        currentToken: 3,
        owner: "worker-c",
      });
      await leases.releaseLease(id, 2);
      expect(await leases.acquireLease(id, "worker-a", 30_000)).toMatchObject({ acquired: false, owner: "worker-c" });
      // A live lease belongs to one execution: its own owner is refused too (as a durable run's lease).
      expect(await leases.acquireLease(id, "worker-c", 30_000)).toMatchObject({ acquired: false, owner: "worker-c" });
    });

    it("leases: a stale token's checkpoint, error record and side-effect start are refused and write nothing", async (ctx) => {
      const leases = leasing(ctx);
      const store = await open();
      const id = wf("fence");
      await leases.acquireLease(id, "old", 60);
      const s0 = createWorkflowState({ workflowId: id, now: 1000 });
      await store.save(s0, { expectedStep: null, fencingToken: 1 });
      const guard = new IdempotencyGuard({ store });
      const key = IdempotencyGuard.key(id, 0, 0);
      let runs = 0;
      await sleep(150); // the old holder pauses past its lease
      // Expired, not taken over yet: nobody else ran, so its checkpoint goes in; a side effect does not start.
      const s1 = step(s0, { sharedMemory: { by: "old" } });
      await store.save(s1, { expectedStep: 0, fencingToken: 1 });
      await expect(
        guard.run(key, () => ++runs, { workflowId: id, stepIndex: 0, fencingToken: 1 }),
      ).rejects.toBeInstanceOf(WorkflowLeaseLostError);
      expect(runs).toBe(0);
      await leases.acquireLease(id, "new", 30_000); // taken over: token 2
      const stale = await store
        .save(step(s1, { sharedMemory: { by: "old, late" } }), { expectedStep: 1, fencingToken: 1 })
        .catch((e: unknown) => e);
      expect(stale).toBeInstanceOf(WorkflowLeaseLostError);
      expect(stale).toMatchObject({ workflowId: id, fencingToken: 1, currentToken: 2, owner: "new" });
      expect((stale as Error).message).toMatch(/another worker took the workflow over/);
      expect((await store.loadLatest(id))?.sharedMemory).toEqual({ by: "old" });
      await expect(
        store.recordError({ workflowId: id, stepIndex: 1, nodeName: "n", error: { m: "x" }, createdAt: 1 }, 1),
      ).rejects.toBeInstanceOf(WorkflowLeaseLostError);
      expect(await store.errors(id)).toEqual([]);
      expect((await store.summary(id))?.status).toBe("running");
      await expect(
        guard.run(key, () => ++runs, { workflowId: id, stepIndex: 0, fencingToken: 1 }),
      ).rejects.toBeInstanceOf(WorkflowLeaseLostError);
      expect(runs).toBe(0);
      // The holder's writes go in.
      expect(await guard.run(key, () => ++runs, { workflowId: id, stepIndex: 0, fencingToken: 2 })).toBe(1);
      const s2 = step(s1, { sharedMemory: { by: "new" } });
      await store.save(s2, { expectedStep: 1, fencingToken: 2 });
      expect((await store.loadLatest(id))?.sharedMemory).toEqual({ by: "new" });
      // A released lease fences too.
      await leases.releaseLease(id, 2);
      await expect(store.save(step(s2, {}), { expectedStep: 2, fencingToken: 2 })).rejects.toMatchObject({
        code: "STALE_FENCING_TOKEN",
        owner: null,
      });
    });

    it("leases: a stale worker's failed side effect leaves its start record for the new holder to reconcile", async (ctx) => {
      const leases = leasing(ctx);
      const store = await open();
      const id = wf("abandon");
      await leases.acquireLease(id, "old", 60);
      const guard = new IdempotencyGuard({ store });
      const key = IdempotencyGuard.key(id, 0, 0);
      const failed = guard.run(
        key,
        async () => {
          await sleep(150); // the old holder's lease expires while the effect runs…
          await leases.acquireLease(id, "new", 30_000); // …and another worker takes it over (token 2)
          throw new Error("503");
        },
        { workflowId: id, fencingToken: 1 },
      );
      await expect(failed).rejects.toThrow("503");
      // The start stays: the new holder is asked whether it happened, never re-runs it blindly.
      let asked = 0;
      const out = await guard.run(key, () => "again", {
        workflowId: id,
        fencingToken: 2,
        reconcile: () => {
          asked++;
          return { outcome: "happened", result: "reconciled" };
        },
      });
      expect(out).toBe("reconciled");
      expect(asked).toBe(1);
    });

    it("leases: free leases of deleted workflows go with prune; the others stay; a token never goes back", async (ctx) => {
      const leases = leasing(ctx);
      const store = await open();
      const gone = wf("gone");
      const kept = wf("kept");
      for (const id of [gone, kept]) {
        await leases.acquireLease(id, "w", 30_000);
        await store.save(createWorkflowState({ workflowId: id }), { expectedStep: null, fencingToken: 1 });
        await leases.releaseLease(id, 1);
      }
      await store.delete(gone);
      const live = wf("live"); // held by a worker about to write its first checkpoint
      await leases.acquireLease(live, "w", 30_000);
      // The delete ended the lease (its token went up: token 1 passes no fence now); the token goes on counting…
      await expect(
        store.save(createWorkflowState({ workflowId: gone }), { expectedStep: null, fencingToken: 1 }),
      ).rejects.toBeInstanceOf(WorkflowLeaseLostError);
      const again = await leases.acquireLease(gone, "w", 30_000);
      expect(again).toMatchObject({ acquired: true });
      const before = (again as { fencingToken: number }).fencingToken;
      expect(before).toBeGreaterThan(1);
      await leases.releaseLease(gone, before);
      await store.prune({ olderThan: new Date(Date.now() + 60_000) });
      // …and after prune removed its free lease (older than the cutoff), the next one starts above it;
      // a live workflow's lease stays.
      const after = await leases.acquireLease(gone, "w", 30_000);
      expect(after).toMatchObject({ acquired: true });
      expect((after as { fencingToken: number }).fencingToken).toBeGreaterThan(before);
      for (const stale of [1, before]) {
        await expect(
          store.save(createWorkflowState({ workflowId: gone }), { expectedStep: null, fencingToken: stale }),
        ).rejects.toBeInstanceOf(WorkflowLeaseLostError);
        await expect(leases.renewLease(gone, stale, 30_000)).rejects.toBeInstanceOf(WorkflowLeaseLostError);
      }
      expect(await leases.acquireLease(kept, "w", 30_000)).toMatchObject({ fencingToken: 2 });
      expect(await leases.acquireLease(live, "other", 30_000)).toMatchObject({ acquired: false, owner: "w" });
    });
  });
}
