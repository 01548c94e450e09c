/**
 * Two calls on ONE runner for one workflow, with an explicit `owner` (a new user's trial, on
 * SQLite and PostgreSQL: both failed, on PostgreSQL one with a raw TypeError, because both passed
 * the in-process check before either took the lease, and the second took the lease back from the
 * first under it). The first call runs; the second fails fast with WorkflowLeaseHeldError, or,
 * with `leaseWaitMs`, waits for the first to finish. On a real SQLite file and a real PostgreSQL
 * schema: runOrResume twice, runOrResume + resume, updateState during a run, and waiting.
 */
import { randomUUID } from "node:crypto";
import path from "node:path";
import pg from "pg";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import type { JournalColdStore } from "../../src/durable/checkpoints/journal-store.js";
import {
  CheckpointStore,
  type ColdStore,
  END,
  type GraphNode,
  PostgresColdStore,
  ResumableGraphRunner,
  SqliteColdStore,
  WorkflowLeaseHeldError,
} from "../../src/workflow/index.js";
import { DATABASE_URL, postgresSkipReason } from "../helpers/services.js";
import { tempDir } from "./helpers.js";

interface Backend {
  name: string;
  skip: string | undefined;
  cold(dir: string): ColdStore;
  teardown(): Promise<void>;
}

function postgresBackend(skip: string | undefined): Backend {
  let schema = "";
  return {
    name: "PostgreSQL",
    skip,
    cold() {
      schema = `wf_calls_${randomUUID().replaceAll("-", "").slice(0, 16)}`;
      return new PostgresColdStore({ url: DATABASE_URL, schema, maxConnections: 4 });
    },
    async teardown() {
      const pool = new pg.Pool({ connectionString: DATABASE_URL, max: 1 });
      await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      await pool.end();
    },
  };
}

const backends: Backend[] = [
  {
    name: "SQLite",
    skip: undefined,
    cold: (dir) => new SqliteColdStore({ path: path.join(dir, "wf.db") }),
    async teardown() {},
  },
  postgresBackend(await postgresSkipReason()),
];

for (const backend of backends) {
  describe.skipIf(backend.skip)(`two calls on one runner for one workflow: ${backend.name}`, () => {
    let tmp: ReturnType<typeof tempDir>;
    let store: CheckpointStore;
    let charges: number;
    /** Resolves the gate the `a` node waits on (when gated). */
    let open: () => void;
    let gate: Promise<void>;
    /** Resolves once the `a` node has started. */
    let entered: Promise<void>;
    let enter: () => void;

    const runner = (extra: { leaseWaitMs?: number; gated?: boolean; entry?: string } = {}) => {
      const a: GraphNode = async (_s, ctx) => {
        enter();
        if (extra.gated) await gate;
        const r = await ctx.sideEffect("charge", () => ++charges);
        return { next: END, updates: { r } };
      };
      const ask: GraphNode = async (_s, ctx) => {
        const answer = await ctx.interrupt<string>({ reason: "approve?" });
        const r = await ctx.sideEffect("charge", () => ++charges);
        return { next: END, updates: { answer, r } };
      };
      return new ResumableGraphRunner({
        store,
        owner: "worker-1",
        nodes: { a, ask },
        entry: extra.entry ?? "a",
        // fail fast unless told otherwise (the default waits up to 2 × leaseTtlMs, as runDurable)
        leaseWaitMs: extra.leaseWaitMs ?? 0,
      });
    };

    beforeEach(async () => {
      tmp = tempDir("same-runner", { memory: true });
      store = await CheckpointStore.open({ cold: backend.cold(tmp.dir), blobDir: path.join(tmp.dir, "blobs") });
      charges = 0;
      gate = new Promise((r) => {
        open = r;
      });
      entered = new Promise((r) => {
        enter = r;
      });
    });
    afterEach(async () => {
      await store.close();
      await backend.teardown();
      tmp.cleanup();
    });

    it("the trial's repro: runOrResume twice at once: the first runs, the second fails fast, typed", async () => {
      const r = runner();
      const [first, second] = await Promise.allSettled([r.runOrResume("job-1"), r.runOrResume("job-1")]);
      expect(first).toMatchObject({ status: "fulfilled", value: { status: "finished" } });
      expect(second.status).toBe("rejected");
      const error = (second as PromiseRejectedResult).reason;
      expect(error).toBeInstanceOf(WorkflowLeaseHeldError);
      expect(error).toMatchObject({ code: "LEASE_HELD", workflowId: "job-1", owner: "worker-1", fencingToken: 1 });
      expect(charges).toBe(1);
      expect((await store.loadLatest("job-1"))?.sharedMemory).toEqual({ r: 1 });
      // The runner is free again: the next call runs (nothing left to run) with the next token.
      expect(await r.runOrResume("job-1")).toMatchObject({ status: "finished" });
      expect(charges).toBe(1);
    });

    it("runOrResume + resume at once: the first runs; the resume fails fast with the lease error, not a stale token", async () => {
      const r = runner();
      const [started, early] = await Promise.allSettled([r.runOrResume("job-2"), r.resume("job-2", "yes")]);
      expect(started).toMatchObject({ status: "fulfilled", value: { status: "finished" } });
      expect((early as PromiseRejectedResult).reason).toBeInstanceOf(WorkflowLeaseHeldError);

      // A waiting workflow: resume and runOrResume at once deliver the answer once and charge once.
      const asking = runner({ entry: "ask" });
      expect(await asking.runOrResume("job-3")).toMatchObject({ status: "waiting" });
      const [resumed, other] = await Promise.allSettled([asking.resume("job-3", "yes"), asking.runOrResume("job-3")]);
      expect(resumed).toMatchObject({ status: "fulfilled", value: { status: "finished" } });
      expect((other as PromiseRejectedResult).reason).toBeInstanceOf(WorkflowLeaseHeldError);
      expect((await store.loadLatest("job-3"))?.sharedMemory).toEqual({ answer: "yes", r: 2 });
      expect(charges).toBe(2);
    });

    it("updateState during a run on the same runner is refused (nothing written); the run finishes", async () => {
      const r = runner({ gated: true });
      const run = r.runOrResume("job-4");
      await entered;
      const refused = await r.updateState("job-4", { updates: { x: 1 } }).catch((e: unknown) => e);
      expect(refused).toBeInstanceOf(WorkflowLeaseHeldError);
      expect(refused).toMatchObject({ owner: "worker-1" });
      open();
      expect(await run).toMatchObject({ status: "finished" });
      expect((await store.loadLatest("job-4"))?.sharedMemory).toEqual({ r: 1 });
      // After the run, updateState goes in.
      expect((await r.updateState("job-4", { updates: { x: 1 } })).sharedMemory).toEqual({ r: 1, x: 1 });
    });

    it("with leaseWaitMs the second call waits for the first to finish, then runs with the next token", async () => {
      const r = runner({ leaseWaitMs: 10_000, gated: true });
      const tokens: number[] = [];
      // the runner takes the run's lease in the store's journal, as runDurable does
      const { journal } = store.cold as JournalColdStore;
      const acquire = journal.acquireLease.bind(journal);
      journal.acquireLease = async (id, owner, ttl, options) => {
        const out = await acquire(id, owner, ttl, options);
        if (out.acquired) tokens.push(out.fencingToken);
        return out;
      };
      const first = r.runOrResume("job-5");
      const second = r.runOrResume("job-5");
      const update = r.updateState("job-5", { updates: { x: 1 } });
      await entered;
      await new Promise((resolve) => setTimeout(resolve, 50));
      expect(tokens).toEqual([1]); // the others wait in the runner, they did not take the lease back
      open();
      expect(await first).toMatchObject({ status: "finished" });
      expect(await second).toMatchObject({ status: "finished" });
      expect((await update).sharedMemory).toEqual({ r: 1, x: 1 });
      expect(tokens).toEqual([1, 2, 3]);
      expect(charges).toBe(1);
    });

    it("by default a second worker waits for the holder, as runDurable does (issue 22: one lease behaviour)", async () => {
      runner({ gated: true }); // the graph's nodes, gated
      const nodes: Record<string, GraphNode> = {
        a: async (_s, ctx) => {
          enter();
          await gate;
          return { next: END, updates: { r: await ctx.sideEffect("charge", () => ++charges) } };
        },
      };
      const holder = new ResumableGraphRunner({ store, nodes, owner: "worker-1", leaseWaitMs: 0 });
      const other = new ResumableGraphRunner({ store, nodes, owner: "worker-2" }); // default leaseWaitMs
      const first = holder.runOrResume("job-default");
      await entered;
      const second = other.runOrResume("job-default");
      await new Promise((resolve) => setTimeout(resolve, 100));
      open(); // the holder finishes; the waiting worker then takes the lease and finds the workflow done
      expect(await first).toMatchObject({ status: "finished" });
      expect(await second).toMatchObject({ status: "finished" });
      expect(charges).toBe(1);
    });

    it("with leaseWaitMs too short for the first call, the second fails with the lease error in time", async () => {
      const r = runner({ leaseWaitMs: 100, gated: true });
      const first = r.runOrResume("job-6");
      await entered;
      const t0 = Date.now();
      await expect(r.runOrResume("job-6")).rejects.toBeInstanceOf(WorkflowLeaseHeldError);
      expect(Date.now() - t0).toBeGreaterThanOrEqual(90);
      expect(Date.now() - t0).toBeLessThan(5_000);
      open();
      expect(await first).toMatchObject({ status: "finished" });
    });
  });
}
