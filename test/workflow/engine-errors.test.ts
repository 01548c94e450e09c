/**
 * The engine's own refusals inside a node keep their documented codes (issue 25: "a crash inside a
 * side effect with no reconcile surfaces as WORKFLOW_NODE_FAILED, not the documented
 * SIDE_EFFECT_UNKNOWN"; issue 22: one replay-mismatch error for graphs and runs). Both are still
 * recorded with the step, the last checkpoint stays, and the workflow continues once the cause is
 * fixed. On a real SQLite file, the holder of the first lease abandoned as a dead process would.
 */
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { InvalidOptionError } from "../../src/core/errors.js";
import {
  CheckpointStore,
  END,
  type GraphNode,
  ReplayMismatchError,
  ResumableGraphRunner,
  SqliteColdStore,
  UnknownSideEffectError,
} from "../../src/workflow/index.js";
import { tempDir } from "./helpers.js";

const tmp = tempDir("engine-errors");
afterAll(() => tmp.cleanup());

describe("engine errors inside a node are not node failures", () => {
  it("a side effect a dead worker started, with no reconcile: SIDE_EFFECT_UNKNOWN; with reconcile it finishes", async () => {
    const file = path.join(tmp.dir, "unknown.db");
    const dead = await CheckpointStore.open({ cold: new SqliteColdStore({ path: file }) });
    let started!: () => void;
    const charging = new Promise<void>((r) => {
      started = r;
    });
    let charges = 0;
    const hanging: GraphNode = async (_s, ctx) => {
      await ctx.sideEffect("charge", () => {
        charges++;
        started();
        return new Promise<string>(() => undefined); // the process "dies" while the charge is in flight
      });
      return { next: END, updates: {} };
    };
    void new ResumableGraphRunner({ store: dead, nodes: { pay: hanging }, owner: "dead", leaseTtlMs: 200 })
      .runOrResume("w1")
      .catch(() => undefined);
    await charging;
    await dead.close(); // its renewals stop: the lease expires by the store's clock

    const store = await CheckpointStore.open({ cold: new SqliteColdStore({ path: file }) });
    try {
      const pay: GraphNode = async (_s, ctx) => {
        const receipt = await ctx.sideEffect("charge", () => {
          charges++;
          return "ch_again";
        });
        return { next: END, updates: { receipt } };
      };
      const runner = new ResumableGraphRunner({ store, nodes: { pay }, owner: "next", leaseWaitMs: 5_000 });
      const error = await runner.runOrResume("w1").catch((e: unknown) => e);
      expect(error).toBeInstanceOf(UnknownSideEffectError);
      expect(error).toMatchObject({ code: "SIDE_EFFECT_UNKNOWN" });
      expect(charges).toBe(1); // never re-run blindly
      expect((await store.errors("w1")).map((e) => e.error.code)).toEqual(["SIDE_EFFECT_UNKNOWN"]);
      expect((await store.loadLatest("w1"))?.stepIndex).toBe(0); // the last checkpoint stays

      const fixed = new ResumableGraphRunner({
        store,
        nodes: { pay },
        owner: "next",
        reconcile: async () => ({ outcome: "happened", result: "ch_first" }),
      });
      expect(await fixed.runOrResume("w1")).toMatchObject({
        status: "finished",
        state: { sharedMemory: { receipt: "ch_first" } },
      });
      expect(charges).toBe(1);
    } finally {
      await store.close();
    }
  });

  it("a node whose interrupts differ on replay: REPLAY_MISMATCH, the same error a durable run raises", async () => {
    const store = await CheckpointStore.open({ cold: new SqliteColdStore({ path: path.join(tmp.dir, "replay.db") }) });
    try {
      const ask: GraphNode = async (_s, ctx) => {
        const ok = await ctx.interrupt<boolean>({ reason: "ship?" });
        return { next: END, updates: { ok } };
      };
      expect((await new ResumableGraphRunner({ store, nodes: { ask } }).runOrResume("w2")).status).toBe("waiting");
      // A deploy renamed the node's question path: the recorded answer is for another interrupt id.
      const renamed = new ResumableGraphRunner({ store, nodes: { ask } });
      await renamed.resume("w2", true);
      const state = await store.loadLatest("w2");
      expect(state?.isFinished).toBe(true);
      // A changed program replays an answered node: its recorded answer belongs to another question. Forked
      // from the step after the answer (the node re-runs from its start with the answers recorded so far).
      const fork = await renamed.resumeFrom("w2", 2, { newWorkflowId: "w2-fork", run: false });
      expect(fork.state.nodeRun?.answers).toHaveLength(1);
      const forged = {
        ...fork.state,
        stepIndex: fork.state.stepIndex + 1,
        nodeRun: { ...fork.state.nodeRun!, answers: [{ id: "w2-fork:1:other:0", value: true }] },
      };
      await store.save(forged, { expectedStep: fork.state.stepIndex });
      const error = await renamed.runOrResume("w2-fork").catch((e: unknown) => e);
      expect(error).toBeInstanceOf(ReplayMismatchError);
      expect(error).toMatchObject({ code: "REPLAY_MISMATCH" });
      expect((await store.errors("w2-fork")).map((e) => e.error.code)).toEqual(["REPLAY_MISMATCH"]);
    } finally {
      await store.close();
    }
  });
});

// issue 25 item 8: the original design's graphs end with "END"; its initial state uses snake_case keys
describe("the seed's graphs and initial state", () => {
  it('a node returning next: "END" ends the graph when no node has that name; a node named END is run', async () => {
    const store = await CheckpointStore.open({ cold: new SqliteColdStore({ path: path.join(tmp.dir, "end.db") }) });
    try {
      const plain = new ResumableGraphRunner({ store, nodes: { a: async () => ({ next: "END", updates: { a: 1 } }) } });
      expect(await plain.runOrResume("e1")).toMatchObject({ status: "finished", state: { currentNode: END } });
      let ran = 0;
      const named = new ResumableGraphRunner({
        store,
        nodes: {
          a: async () => ({ next: "END" }),
          END: async () => {
            ran++;
            return { next: END };
          },
        },
      });
      expect((await named.runOrResume("e2")).status).toBe("finished");
      expect(ran).toBe(1);
    } finally {
      await store.close();
    }
  });

  it("runOrResume refuses unknown fields of initial (a seed-style shared_memory), naming the right one; nothing is created", async () => {
    const store = await CheckpointStore.open({ cold: new SqliteColdStore({ path: path.join(tmp.dir, "initial.db") }) });
    try {
      const runner = new ResumableGraphRunner({ store, nodes: { a: async () => ({ next: END }) } });
      const error = await runner.runOrResume("i1", { shared_memory: { order: 7 } } as never).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(InvalidOptionError);
      expect((error as Error).message).toMatch(/shared_memory.*did you mean sharedMemory/);
      expect(await store.loadLatest("i1")).toBeUndefined();
      expect((await runner.runOrResume("i1", { sharedMemory: { order: 7 } })).state.sharedMemory).toEqual({ order: 7 });
    } finally {
      await store.close();
    }
  });
});
