/**
 * A workflow is a durable run: an operator's `cancel()` (or `dumplings runs cancel`) ends it for
 * good. Found in a trial of the journal-backed store: a cancelled workflow went on at the next
 * `runOrResume`. Now no process takes its lease, writes a checkpoint or starts a side effect,
 * whether it was waiting on an interrupt or in the middle of a node.
 */
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { RunCancelledError } from "../../src/durable/errors.js";
import { SqliteJournal } from "../../src/durable/journal-sqlite.js";
import { cancel } from "../../src/durable/run.js";
import { signal } from "../../src/durable/signals.js";
import {
  CheckpointStore,
  END,
  type GraphNode,
  ResumableGraphRunner,
  SqliteColdStore,
} from "../../src/workflow/index.js";
import { tempDir } from "./helpers.js";

const tmp = tempDir("cancel");
afterAll(() => tmp.cleanup());
let n = 0;

async function open() {
  const file = path.join(tmp.dir, `c${n++}.db`);
  const store = await CheckpointStore.open({ cold: new SqliteColdStore({ path: file }) });
  // The operator's side: another connection to the same file, as `dumplings runs cancel` opens it.
  const journal = new SqliteJournal({ path: file });
  return {
    store,
    journal,
    close: async () => {
      await store.close();
      await journal.close();
    },
  };
}

describe("a cancelled workflow takes no more steps", () => {
  it("cancelled while waiting on an interrupt: runOrResume and resume refuse it, typed; nothing runs, even after a signal", async () => {
    const { store, journal, close } = await open();
    const ran = { charges: 0, after: 0 };
    const nodes: Record<string, GraphNode> = {
      ask: async (_s, ctx) => {
        const answer = await ctx.interrupt<{ ok: boolean }>({ reason: "charge?" });
        await ctx.sideEffect("charge", () => {
          ran.charges++;
        });
        return { next: "after", updates: { ok: answer.ok } };
      },
      after: async () => {
        ran.after++;
        return { next: END, updates: {} };
      },
    };
    try {
      const runner = new ResumableGraphRunner({ store, nodes });
      expect((await runner.runOrResume("w1")).status).toBe("waiting");
      await cancel(journal, "w1", { by: "ops@test", reason: "customer left" });
      const e = await runner.runOrResume("w1").catch((x: unknown) => x);
      expect(e).toBeInstanceOf(RunCancelledError);
      expect((e as RunCancelledError).code).toBe("RUN_CANCELLED");
      expect((e as RunCancelledError).by).toBe("ops@test");
      expect((e as RunCancelledError).reason).toBe("customer left");
      await expect(runner.resume("w1", { ok: true })).rejects.toBeInstanceOf(RunCancelledError);
      await signal("w1", "interrupt:late", { ok: true }, { journal }).catch(() => undefined);
      await expect(runner.runOrResume("w1")).rejects.toBeInstanceOf(RunCancelledError);
      expect(ran).toEqual({ charges: 0, after: 0 });
      expect((await store.summary("w1"))?.status).toBe("failed");
      expect((await store.history("w1")).map((h) => h.stepIndex)).toEqual([0, 1]);
    } finally {
      await close();
    }
  });

  it("cancelled in the middle of a node: its next side effect and its checkpoint are refused, typed; the next node never runs", async () => {
    const { store, journal, close } = await open();
    const ran = { before: 0, charges: 0, next: 0 };
    let release!: () => void;
    const gate = new Promise<void>((r) => {
      release = r;
    });
    let entered!: () => void;
    const inNode = new Promise<void>((r) => {
      entered = r;
    });
    const nodes: Record<string, GraphNode> = {
      work: async (_s, ctx) => {
        await ctx.sideEffect("before", () => {
          ran.before++;
        });
        entered();
        await gate;
        await ctx.sideEffect("charge", () => {
          ran.charges++;
        });
        return { next: "next", updates: { done: true } };
      },
      next: async () => {
        ran.next++;
        return { next: END, updates: {} };
      },
    };
    try {
      const runner = new ResumableGraphRunner({ store, nodes });
      const running = runner.runOrResume("w2").catch((x: unknown) => x);
      await inNode;
      await cancel(journal, "w2", { by: "ops@test" });
      release();
      const e = await running;
      // The refusal may reach the caller as the node's failure; its cause is the cancellation.
      const cancelled = e instanceof RunCancelledError ? e : (e as { cause?: unknown }).cause;
      expect(cancelled).toBeInstanceOf(RunCancelledError);
      expect(ran).toEqual({ before: 1, charges: 0, next: 0 });
      await expect(runner.runOrResume("w2")).rejects.toBeInstanceOf(RunCancelledError);
      expect(ran).toEqual({ before: 1, charges: 0, next: 0 });
    } finally {
      await close();
    }
  });
});

describe("dumplings workflows show of a cancelled workflow", () => {
  it("says it is cancelled and offers no signal to answer its interrupt (a new user followed the hint and got RUN_STATE)", async () => {
    const { workflowsCommand } = await import("../../src/cli/workflow-commands.js");
    const { store, journal, close } = await open();
    const file = (store.cold as SqliteColdStore).location;
    const nodes: Record<string, GraphNode> = {
      ask: async (_s, ctx) => {
        await ctx.interrupt<boolean>({ reason: "ship?" });
        return { next: END, updates: {} };
      },
    };
    let out = "";
    try {
      expect((await new ResumableGraphRunner({ store, nodes }).runOrResume("w3")).status).toBe("waiting");
      const show = async () => {
        out = "";
        const write = process.stdout.write.bind(process.stdout);
        process.stdout.write = ((chunk: string | Uint8Array) => {
          out += String(chunk);
          return true;
        }) as typeof process.stdout.write;
        try {
          await workflowsCommand()
            .exitOverride()
            .parseAsync(["show", "w3", "--store", `sqlite:${file}`], { from: "user" });
        } finally {
          process.stdout.write = write;
        }
        return out;
      };
      expect(await show()).toMatch(/answer it: dumplings signal/);
      await cancel(journal, "w3", { by: "ops@test" });
      const shown = await show();
      expect(shown).toMatch(/cancelled: it takes no more steps/);
      expect(shown).not.toMatch(/answer it/);
    } finally {
      await close();
    }
  });
});
