/**
 * One behaviour suite for `CheckpointStore` run against every cold store
 * (SQLite file, PostgreSQL schema): the same assertions, so both stores are
 * held to the same contract.
 */
import { existsSync, readdirSync } from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ConflictError } from "../../src/core/errors.js";
import {
  BLOB_REF_FIELD,
  CheckpointStore,
  type ColdStore,
  createWorkflowState,
  END,
  IdempotencyGuard,
  ResumableGraphRunner,
  WorkflowMigrationError,
  WorkflowNotFoundError,
  type WorkflowState,
  WorkflowStateError,
} from "../../src/workflow/index.js";
import { tempDir } from "./helpers.js";

/** What a cold store needs to provide to the suite. */
export interface ColdFixture {
  /** A fresh cold store (new file / new schema). */
  make(): Promise<ColdStore>;
  /** Inserts `n` workflow summary rows in one transaction (for the 100,000-row index test). */
  bulkInsertSummaries(cold: ColdStore, n: number): Promise<void>;
  /** Marks every snapshot of a workflow as created at `createdAt` (ms). */
  ageSnapshots(cold: ColdStore, workflowId: string, createdAt: number): Promise<void>;
  /** Overwrites a stored snapshot's JSON (to simulate an old or corrupted row). */
  overwriteJson(cold: ColdStore, workflowId: string, stepIndex: number, json: string): Promise<void>;
  /** Number of side-effect records of a workflow. */
  countIdempotency(cold: ColdStore, workflowId: string): Promise<number>;
  /** Text that the `list` query plan must contain (index name), and text it must not contain. */
  planMustMatch: RegExp;
  planMustNotMatch: RegExp;
  /** Drops what the fixture created. */
  cleanup(): Promise<void>;
}

const step = (s: WorkflowState, patch: Partial<WorkflowState>): WorkflowState => ({
  ...s,
  stepIndex: s.stepIndex + 1,
  updatedAt: s.updatedAt + 1,
  ...patch,
});

/** Registers the suite for one cold store. */
export function checkpointStoreSuite(label: string, fixture: () => ColdFixture, skip?: string): void {
  describe.skipIf(skip)(`CheckpointStore on ${label}`, () => {
    let fx: ColdFixture;
    let tmp: ReturnType<typeof tempDir>;
    const stores: CheckpointStore[] = [];
    const open = async (opts: { cold?: ColdStore; schemaVersion?: number; blobThreshold?: number } = {}) => {
      const s = await CheckpointStore.open({
        cold: opts.cold ?? (await fx.make()),
        blobDir: path.join(tmp.dir, "blobs"),
        schemaVersion: opts.schemaVersion,
        blobThreshold: opts.blobThreshold,
      });
      stores.push(s);
      return s;
    };

    beforeAll(() => {
      fx = fixture();
      tmp = tempDir(`suite-${label}`);
    });
    afterAll(async () => {
      for (const s of stores) await s.cold.close().catch(() => undefined);
      await fx.cleanup();
      tmp.cleanup();
    });

    it("saves, loads the latest, gets any step and lists the history in order", async () => {
      const store = await open();
      let s = createWorkflowState({ workflowId: "a", sharedMemory: { n: 0 }, now: 1000 });
      await store.save(s, { expectedStep: null, nodeName: "__start__" });
      for (let i = 1; i <= 3; i++) {
        s = step(s, { currentNode: "inc", sharedMemory: { n: i } });
        await store.save(s, { expectedStep: i - 1, nodeName: "inc" });
      }
      expect((await store.loadLatest("a"))?.sharedMemory).toEqual({ n: 3 });
      expect((await store.get("a", 1)).sharedMemory).toEqual({ n: 1 });
      expect((await store.history("a")).map((h) => [h.stepIndex, h.nodeName])).toEqual([
        [0, "__start__"],
        [1, "inc"],
        [2, "inc"],
        [3, "inc"],
      ]);
      await expect(store.get("a", 9)).rejects.toBeInstanceOf(WorkflowNotFoundError);
      expect(await store.loadLatest("missing")).toBeUndefined();
      expect(await store.history("missing")).toEqual([]);
    });

    it("compare-and-set on the step index: a stale writer gets ConflictError and nothing is written", async () => {
      const store = await open();
      const s0 = createWorkflowState({ workflowId: "cas", now: 1000 });
      await store.save(s0, { expectedStep: null });
      await expect(store.save(s0, { expectedStep: null })).rejects.toBeInstanceOf(ConflictError);
      await store.save(step(s0, { sharedMemory: { who: "first" } }), { expectedStep: 0 });
      const err = await store.save(step(s0, { sharedMemory: { who: "second" } }), { expectedStep: 0 }).catch((e) => e);
      expect(err).toBeInstanceOf(ConflictError);
      expect((err as ConflictError).actualRevision).toBe(1);
      expect((await store.loadLatest("cas"))?.sharedMemory).toEqual({ who: "first" });
      // Plain save (no expectedStep) is an upsert of that step's row.
      await store.save(step(s0, { sharedMemory: { who: "upserted" } }));
      expect((await store.get("cas", 1)).sharedMemory).toEqual({ who: "upserted" });
      expect((await store.history("cas")).length).toBe(2);
    });

    it("refuses invalid states on save and names workflow, step and path on load", async () => {
      const store = await open();
      const s0 = createWorkflowState({ workflowId: "bad", now: 1000 });
      await expect(store.save({ ...s0, stepIndex: -1 })).rejects.toBeInstanceOf(WorkflowStateError);
      await expect(store.save({ ...s0, sharedMemory: { x: Number.NaN } })).rejects.toThrow(/sharedMemory\.x/);
      expect(await store.loadLatest("bad")).toBeUndefined(); // nothing was written
      await store.save(s0, { expectedStep: null });
      const broken = {
        ...s0,
        historyRecords: [{ toolName: "t", arguments: {}, result: 1, latencyMs: "slow", timestamp: 1 }],
      };
      await fx.overwriteJson(store.cold, "bad", 0, JSON.stringify(broken));
      const err = await store.get("bad", 0).catch((e) => e);
      expect(err).toBeInstanceOf(WorkflowStateError);
      expect(err).toMatchObject({ workflowId: "bad", stepIndex: 0, path: "historyRecords[0].latencyMs" });
      await fx.overwriteJson(store.cold, "bad", 0, JSON.stringify({ ...s0, extra: 1 }));
      await expect(store.get("bad", 0)).rejects.toMatchObject({ path: "extra" });
    });

    it("upgrades old snapshots through registered migrations on load", async () => {
      const cold = await fx.make();
      const v1 = await open({ cold });
      const s0 = createWorkflowState({ workflowId: "mig", sharedMemory: { fullName: "Ada Lovelace" }, now: 1000 });
      await v1.save(s0, { expectedStep: null });
      const v2 = await open({ cold, schemaVersion: 2 });
      await expect(v2.get("mig", 0)).rejects.toBeInstanceOf(WorkflowMigrationError);
      v2.registerMigration(1, 2, (snap) => {
        const mem = snap.sharedMemory as { fullName: string };
        const [first, last] = mem.fullName.split(" ");
        return { ...snap, sharedMemory: { first: first ?? "", last: last ?? "" } };
      });
      const up = await v2.get("mig", 0);
      expect(up.sharedMemory).toEqual({ first: "Ada", last: "Lovelace" });
      expect(up.schemaVersion).toBe(2);
      // A snapshot from a newer version is refused, not misread.
      await v2.save(step(up, {}), { expectedStep: 0 });
      await expect(v1.get("mig", 1)).rejects.toBeInstanceOf(WorkflowMigrationError);
    });

    it("moves large values to the content-addressed blob store and loads them transparently", async () => {
      const store = await open({ blobThreshold: 1024 });
      const big = "x".repeat(5000);
      const s0 = createWorkflowState({ workflowId: "blob", sharedMemory: { big, small: 1 }, now: 1000 });
      await store.save(s0, { expectedStep: null });
      await store.save(step(s0, { sharedMemory: { big, small: 2 } }), { expectedStep: 0 });
      const row = await store.cold.read("blob", 1);
      expect(row!.stateJson.length).toBeLessThan(1000);
      expect(JSON.parse(row!.stateJson).sharedMemory.big[BLOB_REF_FIELD]).toMatch(/^sha256:[0-9a-f]{64}$/);
      expect((await store.loadLatest("blob"))?.sharedMemory).toEqual({ big, small: 2 });
      const blobFiles = () =>
        existsSync(path.join(tmp.dir, "blobs"))
          ? readdirSync(path.join(tmp.dir, "blobs"), { recursive: true }).filter((f) => String(f).length > 60)
          : [];
      expect(blobFiles()).toHaveLength(1); // the same value in two steps is one blob
      expect(await store.delete("blob")).toBe(true);
      expect(blobFiles()).toHaveLength(0); // no orphan blob
      expect(await store.loadLatest("blob")).toBeUndefined();
      expect(await store.delete("blob")).toBe(false);
    });

    it("deletes every row of a workflow (snapshots, summary, errors, side-effect records)", async () => {
      const store = await open();
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
      await expect(runner.runOrResume("del")).rejects.toThrow(/no/);
      expect(await fx.countIdempotency(store.cold, "del")).toBe(1);
      expect(await store.errors("del")).toHaveLength(1);
      expect(await store.delete("del")).toBe(true);
      expect(await store.history("del")).toEqual([]);
      expect(await store.errors("del")).toEqual([]);
      expect(await store.summary("del")).toBeUndefined();
      expect(await fx.countIdempotency(store.cold, "del")).toBe(0);
    });

    it("prunes old snapshots, keeping each workflow's newest steps and its resumability", async () => {
      const store = await open();
      const guard = new IdempotencyGuard({ store });
      for (const id of ["p1", "p2"]) {
        let s = createWorkflowState({ workflowId: id, now: 1000 });
        await store.save(s, { expectedStep: null });
        for (let i = 1; i <= 5; i++) {
          await guard.run(IdempotencyGuard.key(id, i - 1, 0), () => i, { workflowId: id, stepIndex: i - 1 });
          s = step(s, { currentNode: "n" });
          await store.save(s, { expectedStep: i - 1 });
        }
        await fx.ageSnapshots(store.cold, id, 1000);
      }
      const fresh = createWorkflowState({ workflowId: "p3" });
      await store.save(fresh, { expectedStep: null });
      await store.save(step(fresh, {}), { expectedStep: 0 });
      const out = await store.prune({ olderThan: 60_000, keepLast: 2 });
      expect(out.deletedSnapshots).toBe(8);
      expect((await store.history("p1")).map((h) => h.stepIndex)).toEqual([4, 5]);
      expect((await store.history("p3")).map((h) => h.stepIndex)).toEqual([0, 1]); // recent: untouched
      expect((await store.loadLatest("p2"))?.stepIndex).toBe(5);
      // Side-effect records of finished node runs are gone with them.
      expect(await fx.countIdempotency(store.cold, "p1")).toBe(0);
      await expect(store.prune({ olderThan: new Date(), keepLast: 0 })).rejects.toBeInstanceOf(RangeError);
    });

    it("lists workflows by status with keyset pagination, each once, newest first", async () => {
      const store = await open();
      for (let i = 0; i < 25; i++) {
        const s = createWorkflowState({ workflowId: `l${String(i).padStart(2, "0")}`, now: 10_000 + (i % 5) });
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
      expect(waiting.items.map((w) => w.workflowId).sort()).toEqual(
        ["l00", "l03", "l06", "l09", "l12", "l15", "l18", "l21", "l24"].sort(),
      );
      expect(waiting.nextCursor).toBeUndefined();
      const times = waiting.items.map((w) => w.updatedAt);
      expect([...times].sort((a, b) => b - a)).toEqual(times);
      await expect(store.listWorkflows({ cursor: "garbage" })).rejects.toBeInstanceOf(RangeError);
    });

    it("at 100,000 workflows the list query is served by the index (query plan), and pages are right", async () => {
      const store = await open();
      await fx.bulkInsertSummaries(store.cold, 100_000);
      for (const status of ["waiting", undefined] as const) {
        const plan = await store.cold.explainList(status);
        expect(plan).toMatch(fx.planMustMatch);
        expect(plan).not.toMatch(fx.planMustNotMatch);
      }
      const first = await store.listWorkflows({ status: "waiting", limit: 3 });
      expect(first.items).toHaveLength(3);
      expect(first.items.every((w) => w.status === "waiting")).toBe(true);
      const second = await store.listWorkflows({ status: "waiting", limit: 3, cursor: first.nextCursor });
      expect(second.items[0]!.updatedAt).toBeLessThanOrEqual(first.items[2]!.updatedAt);
      expect(second.items.map((w) => w.workflowId)).not.toContain(first.items[2]!.workflowId);
    });

    it("runs a workflow end to end", async () => {
      const store = await open();
      const runner = new ResumableGraphRunner({
        store,
        nodes: { only: (s) => ({ next: END, updates: { seen: s.workflowId } }) },
      });
      const out = await runner.runOrResume("e2e");
      expect(out.state.sharedMemory).toEqual({ seen: "e2e" });
    });
  });
}
