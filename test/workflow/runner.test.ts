/**
 * ResumableGraphRunner on a real SQLite file: checkpoint per node, typed
 * errors, step events, time travel, interrupts and racing resumes, and the
 * public failure case PB-20 (interrupt in a loop must not replay side effects).
 */
import { readFileSync } from "node:fs";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { ConflictError } from "../../src/core/errors.js";
import {
  type CheckpointStore,
  END,
  type GraphNode,
  NodeFailedError,
  ResumableGraphRunner,
  type StepEvent,
  UnknownNodeError,
  WorkflowLeaseHeldError,
  WorkflowNotWaitingError,
  WorkflowStateError,
} from "../../src/workflow/index.js";
import { sqliteStore, tempDir } from "./helpers.js";

let tmp: ReturnType<typeof tempDir>;
let store: CheckpointStore;

beforeEach(async () => {
  tmp = tempDir("runner");
  store = await sqliteStore(tmp.dir);
});
afterEach(async () => {
  await store.close();
  tmp.cleanup();
});

const counter: GraphNode = (s) => ({
  next: (s.sharedMemory.n as number) + 1 >= 3 ? END : "inc",
  updates: { n: (s.sharedMemory.n as number) + 1 },
});

describe("ResumableGraphRunner", () => {
  it("checkpoints step 0 and one step per node, and emits start/finish events with durations", async () => {
    const events: StepEvent[] = [];
    const runner = new ResumableGraphRunner({ store, nodes: { inc: counter }, onStep: (e) => events.push(e) });
    const out = await runner.runOrResume("w1", { sharedMemory: { n: 0 } });
    expect(out.status).toBe("finished");
    expect(out.state.sharedMemory).toEqual({ n: 3 });
    expect(out.state.stepIndex).toBe(3);
    const history = await store.history("w1");
    expect(history.map((h) => [h.stepIndex, h.nodeName, h.state.sharedMemory.n])).toEqual([
      [0, "__start__", 0],
      [1, "inc", 1],
      [2, "inc", 2],
      [3, "inc", 3],
    ]);
    expect(events.filter((e) => e.type === "start")).toHaveLength(3);
    const finishes = events.filter((e) => e.type === "finish");
    expect(finishes.map((e) => e.stepIndex)).toEqual([1, 2, 3]);
    for (const e of finishes) expect(e.durationMs).toBeGreaterThanOrEqual(0);
    expect((await store.summary("w1"))?.status).toBe("finished");
    // Running a finished workflow again does nothing.
    const again = await runner.runOrResume("w1");
    expect(again.state.stepIndex).toBe(3);
  });

  it("resumes from the latest checkpoint, not from the start", async () => {
    const ran: number[] = [];
    let failAt = 2;
    const nodes: Record<string, GraphNode> = {
      inc: (s) => {
        const n = s.sharedMemory.n as number;
        if (n === failAt) throw new Error("boom at 2");
        ran.push(n);
        return { next: n + 1 >= 4 ? END : "inc", updates: { n: n + 1 } };
      },
    };
    const runner = new ResumableGraphRunner({ store, nodes });
    const events: StepEvent[] = [];
    runner.on("step", (e: StepEvent) => events.push(e));
    const err = await runner.runOrResume("w2", { sharedMemory: { n: 0 } }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(NodeFailedError);
    expect((err as NodeFailedError).stepIndex).toBe(2);
    expect((err as Error).message).toContain("boom at 2");
    // The last good checkpoint stays; the error is recorded with the step.
    expect((await store.loadLatest("w2"))?.stepIndex).toBe(2);
    const errors = await store.errors("w2");
    expect(errors).toHaveLength(1);
    expect(errors[0]).toMatchObject({ stepIndex: 2, nodeName: "inc" });
    expect(errors[0]!.error.message).toContain("boom at 2");
    expect((await store.summary("w2"))?.status).toBe("failed");
    expect(events.find((e) => e.type === "error")).toMatchObject({ node: "inc", stepIndex: 2 });
    failAt = -1;
    const out = await runner.runOrResume("w2");
    expect(out.state.sharedMemory.n).toBe(4);
    expect(ran).toEqual([0, 1, 2, 3]); // 0 and 1 were not run again
  });

  it("a cold-store failure stops the run without advancing (BackendError), and a restart resumes", async () => {
    const { BackendError } = await import("../../src/core/errors.js");
    const { SqliteColdStore } = await import("../../src/workflow/index.js");
    const ran: number[] = [];
    const nodes: Record<string, GraphNode> = {
      inc: (s) => {
        const n = s.sharedMemory.n as number;
        ran.push(n);
        // The database goes away while node 2 runs: its checkpoint cannot be written.
        if (n === 2 && ran.filter((x) => x === 2).length === 1)
          (store.cold as InstanceType<typeof SqliteColdStore>).db.close();
        return { next: n + 1 >= 4 ? END : "inc", updates: { n: n + 1 } };
      },
    };
    // A short lease: the failed worker cannot release it (its database is gone), so it expires.
    const err = await new ResumableGraphRunner({ store, nodes, leaseTtlMs: 300 })
      .runOrResume("cold-fail", { sharedMemory: { n: 0 } })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(BackendError);
    expect(ran).toEqual([0, 1, 2]); // nothing ran after the failed checkpoint
    store = await sqliteStore(tmp.dir); // a restart over the same file
    expect((await store.loadLatest("cold-fail"))?.stepIndex).toBe(2);
    // The restart waits for the failed worker's lease to expire, then takes it over.
    const out = await new ResumableGraphRunner({ store, nodes, leaseWaitMs: 5000 }).runOrResume("cold-fail");
    expect(out.state.sharedMemory.n).toBe(4);
    expect(ran).toEqual([0, 1, 2, 2, 3]);
  });

  it("refuses an unknown next node with a typed error and records it", async () => {
    const runner = new ResumableGraphRunner({ store, nodes: { a: () => ({ next: "nowhere" }) } });
    const err = await runner.runOrResume("w3").catch((e: unknown) => e);
    expect(err).toBeInstanceOf(UnknownNodeError);
    expect((err as UnknownNodeError).node).toBe("nowhere");
    expect((err as UnknownNodeError).code).toBe("WORKFLOW_UNKNOWN_NODE");
    expect((await store.errors("w3"))[0]?.error.code).toBe("WORKFLOW_UNKNOWN_NODE");
    expect((await store.loadLatest("w3"))?.stepIndex).toBe(0);
  });

  it("refuses non-JSON updates with the path, leaving the last checkpoint", async () => {
    const runner = new ResumableGraphRunner({
      store,
      nodes: { a: () => ({ next: END, updates: { when: new Date() as never } }) },
    });
    const err = await runner.runOrResume("w4").catch((e: unknown) => e);
    expect(err).toBeInstanceOf(NodeFailedError);
    expect(String((err as Error).message)).toContain("updates of node a.when");
    expect((await store.loadLatest("w4"))?.stepIndex).toBe(0);
  });

  it("time travel: resumeFrom forks a new id from an old step; updateState writes a new step", async () => {
    const runner = new ResumableGraphRunner({ store, nodes: { inc: counter } });
    await runner.runOrResume("w5", { sharedMemory: { n: 0 } });
    const fork = await runner.resumeFrom("w5", 1, { newWorkflowId: "w5-fork", updates: { n: 1, tag: "fork" } });
    expect(fork.state.workflowId).toBe("w5-fork");
    expect(fork.state.parent).toEqual({ workflowId: "w5", stepIndex: 1 });
    expect(fork.state.sharedMemory).toEqual({ n: 3, tag: "fork" });
    expect((await store.history("w5")).map((h) => h.state.sharedMemory.n)).toEqual([0, 1, 2, 3]);
    expect((await store.summary("w5-fork"))?.parentWorkflowId).toBe("w5");
    await expect(runner.resumeFrom("w5", 1, { newWorkflowId: "w5-fork" })).rejects.toBeInstanceOf(ConflictError);

    const updated = await runner.updateState("w5", { updates: { n: 10, note: "manual" } });
    expect(updated.stepIndex).toBe(4);
    const h = await store.history("w5");
    expect(h.map((x) => x.nodeName)).toEqual(["__start__", "inc", "inc", "inc", "__update__"]);
    expect(h[3]!.state.sharedMemory).toEqual({ n: 3 }); // the old step is untouched
    await expect(runner.updateState("w5", { currentNode: "missing" })).rejects.toBeInstanceOf(UnknownNodeError);
  });

  it("interrupt → waiting checkpoint → resume exactly once; racing resumes: one wins, the other is refused", async () => {
    let approvals = 0;
    const nodes: Record<string, GraphNode> = {
      draft: () => ({ next: "approve", updates: { draft: "hello" } }),
      approve: async (_s, ctx) => {
        const answer = await ctx.interrupt<{ ok: boolean }>({
          reason: "approve the draft?",
          payload: { draft: "hello" },
        });
        await ctx.sideEffect("count-approval", () => {
          approvals++;
        });
        return { next: END, updates: { approved: answer.ok } };
      },
    };
    const runner = new ResumableGraphRunner({ store, nodes });
    const first = await runner.runOrResume("w6");
    expect(first.status).toBe("waiting");
    expect(first.interrupt).toMatchObject({ reason: "approve the draft?", payload: { draft: "hello" }, index: 0 });
    expect((await store.summary("w6"))?.status).toBe("waiting");

    // Two independent runners (as two processes would) over the same file.
    const store2 = await sqliteStore(tmp.dir);
    const runner2 = new ResumableGraphRunner({ store: store2, nodes });
    const results = await Promise.allSettled([runner.resume("w6", { ok: true }), runner2.resume("w6", { ok: false })]);
    await store2.close();
    const won = results.filter((r) => r.status === "fulfilled");
    const lost = results.filter((r) => r.status === "rejected");
    expect(won).toHaveLength(1);
    expect(lost).toHaveLength(1);
    // The lease refuses the second while the first runs (WorkflowLeaseHeldError); once the first is done
    // the workflow no longer waits (WorkflowNotWaitingError, a ConflictError). Either way nothing was delivered.
    const reason = (lost[0] as PromiseRejectedResult).reason;
    expect(reason instanceof WorkflowLeaseHeldError || reason instanceof WorkflowNotWaitingError, String(reason)).toBe(
      true,
    );
    expect(approvals).toBe(1);
    const final = await store.loadLatest("w6");
    expect(final?.isFinished).toBe(true);
    expect(final?.pendingInterrupt).toBeNull();
    // A late resume is refused, typed.
    const late = await runner.resume("w6", { ok: true }).catch((e: unknown) => e);
    expect(late).toBeInstanceOf(WorkflowNotWaitingError);
    expect(late).toBeInstanceOf(ConflictError);
  });

  it("a fork of a waiting step keeps its recorded answers and can be resumed on its own", async () => {
    let effects = 0;
    const runner = new ResumableGraphRunner({
      store,
      nodes: {
        ask: async (_s, ctx) => {
          await ctx.sideEffect("effect", () => {
            effects++;
          });
          const a = await ctx.interrupt({ reason: "first" });
          const b = await ctx.interrupt({ reason: "second" });
          return { next: END, updates: { a, b } };
        },
      },
    });
    await runner.runOrResume("wf-src");
    const second = await runner.resume("wf-src", "A");
    expect(second.status).toBe("waiting");
    const fork = await runner.resumeFrom("wf-src", second.state.stepIndex, { newWorkflowId: "wf-fork" });
    expect(fork.status).toBe("waiting");
    expect(fork.interrupt?.id).toBe("wf-fork:0:ask:1");
    const done = await runner.resume("wf-fork", "B");
    expect(done.state.sharedMemory).toEqual({ a: "A", b: "B" });
    expect(effects).toBe(2); // the fork is a new execution: its side effect ran once, under its own key
    expect((await store.loadLatest("wf-src"))?.status).toBe("waiting"); // the source is untouched
  });

  it("resume bound to an interrupt id refuses to answer a different question", async () => {
    const runner = new ResumableGraphRunner({
      store,
      nodes: {
        ask: async (_s, ctx) => {
          const a = await ctx.interrupt({ reason: "first" });
          const b = await ctx.interrupt({ reason: "second" });
          return { next: END, updates: { a, b } };
        },
      },
    });
    const w = await runner.runOrResume("w7");
    const firstId = w.interrupt!.id;
    const second = await runner.resume("w7", 1, { interruptId: firstId });
    expect(second.interrupt?.reason).toBe("second");
    await expect(runner.resume("w7", 2, { interruptId: firstId })).rejects.toBeInstanceOf(WorkflowNotWaitingError);
    const done = await runner.resume("w7", 2, { interruptId: second.interrupt!.id });
    expect(done.state.sharedMemory).toEqual({ a: 1, b: 2 });
  });

  it("validates sharedMemory against the application's schema before checkpointing", async () => {
    const { z } = await import("zod");
    const { defineWorkflowState, CheckpointStore, SqliteColdStore } = await import("../../src/workflow/index.js");
    const Schema = defineWorkflowState(z.strictObject({ age: z.number().int().optional() }));
    const typed = await CheckpointStore.open({
      cold: new SqliteColdStore({ path: `${tmp.dir}/typed.db` }),
      schema: Schema,
      blobDir: `${tmp.dir}/blobs`,
    });
    const runner = new ResumableGraphRunner({
      store: typed,
      nodes: { a: () => ({ next: END, updates: { age: "thirty" } }) },
    });
    const err = await runner.runOrResume("w8").catch((e: unknown) => e);
    expect(err).toBeInstanceOf(WorkflowStateError);
    expect((err as WorkflowStateError).path).toBe("sharedMemory.age");
    expect((err as WorkflowStateError).workflowId).toBe("w8");
    expect((err as WorkflowStateError).stepIndex).toBe(1);
    await typed.close();
  });
});

describe("PB-20: interrupt() in a validation loop must not replay earlier side effects", () => {
  const pb20 = JSON.parse(readFileSync(new URL("../fixtures/workflow/pb-20.json", import.meta.url), "utf8")) as {
    input: { ops: { op: string; value?: unknown }[] };
  };

  it("3 prompts shown → exactly 3 executions; stable distinct interrupt ids; age 30 and nothing pending", async () => {
    let shown = 0;
    const nodes: Record<string, GraphNode> = {
      ask_age: async (_s, ctx) => {
        for (;;) {
          await ctx.sideEffect("log_prompt_shown", () => {
            shown++;
          });
          const answer = await ctx.interrupt({ reason: "What is your age?" });
          if (typeof answer === "number" && Number.isInteger(answer) && answer > 0) {
            return { next: END, updates: { age: answer } };
          }
        }
      },
    };
    const seenIds: string[] = [];
    // Every op runs in a fresh store + runner over the same file, as a restarted process would.
    const fresh = async () => {
      const s = await sqliteStore(tmp.dir, {}, "pb20.db");
      return { s, r: new ResumableGraphRunner({ store: s, nodes }) };
    };
    for (const op of pb20.input.ops) {
      const { s, r } = await fresh();
      if (op.op === "run") {
        const out = await r.runOrResume("t20");
        expect(out.status).toBe("waiting");
        seenIds.push(out.interrupt!.id);
      } else if (op.op === "resume") {
        const out = await r.resume("t20", op.value as number | string);
        if (out.status === "waiting") seenIds.push(out.interrupt!.id);
      } else if (op.op === "count") {
        expect(shown).toBe(3); // naive re-execution would give 1 + 2 + 3 + 3 = 9
      } else if (op.op === "load") {
        const final = await s.loadLatest("t20");
        expect(final?.sharedMemory.age).toBe(30);
        expect(final?.pendingInterrupt).toBeNull();
        expect(final?.nodeRun).toBeNull();
        expect(final?.isFinished).toBe(true);
        // The answers were consumed in order, each under the id of the interrupt that asked.
        const h = await s.history("t20");
        const lastRun = h.filter((x) => x.state.nodeRun).at(-1)!.state.nodeRun!;
        expect(lastRun.answers).toEqual([
          { id: seenIds[0], value: "abc" },
          { id: seenIds[1], value: -3 },
          { id: seenIds[2], value: 30 },
        ]);
      }
      await s.close();
    }
    expect(seenIds).toHaveLength(3);
    expect(new Set(seenIds).size).toBe(3);
    expect(seenIds).toEqual(["t20:0:ask_age:0", "t20:0:ask_age:1", "t20:0:ask_age:2"]);
  });
});
