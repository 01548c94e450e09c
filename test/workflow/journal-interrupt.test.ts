/**
 * `ctx.interrupt()` on a journal: the waiting checkpoint is written and the workflow's run waits
 * for signal `interrupt:<id>`, so `signal()` and `dumplings signal` answer it from any process,
 * `runOrResume` then continues with the answer, and `runner.resume` sends the same signal.
 */
import { spawnSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import { SqliteJournal } from "../../src/durable/journal-sqlite.js";
import { signal } from "../../src/durable/signals.js";
import {
  CheckpointStore,
  END,
  type GraphNode,
  ResumableGraphRunner,
  SqliteColdStore,
  WorkflowNotWaitingError,
} from "../../src/workflow/index.js";
import { runCli } from "../cli/run-cli.js";
import { tempDir } from "./helpers.js";

const tmp = tempDir("journal-interrupt");
afterAll(() => tmp.cleanup());
let n = 0;
const ROOT = fileURLToPath(new URL("../../", import.meta.url));
const CHILD = fileURLToPath(new URL("../fixtures/workflow/interrupt-child.ts", import.meta.url));

/** The workflow store on a file, and the file's journal through another connection (as another process). */
async function open(file: string) {
  const store = await CheckpointStore.open({ cold: new SqliteColdStore({ path: file }) });
  const journal = new SqliteJournal({ path: file });
  return {
    journal,
    store,
    close: async () => {
      await store.close();
      await journal.close();
    },
  };
}

function graph(counter: { charges: number }): Record<string, GraphNode> {
  return {
    approve: async (_s, ctx) => {
      const answer = await ctx.interrupt<{ ok: boolean }>({ reason: "charge?" });
      await ctx.sideEffect("charge", () => {
        counter.charges++;
      });
      return { next: END, updates: { approved: answer.ok } };
    },
  };
}

describe("interrupt() on a journal waits for a signal", () => {
  it("a prune while a node waits keeps the side effects it made before the interrupt: the resumed node replays them", async () => {
    const file = path.join(tmp.dir, `i${n++}.db`);
    const counter = { charges: 0 };
    const nodes: Record<string, GraphNode> = {
      plan: async () => ({ next: "pay", updates: { planned: true } }),
      pay: async (_s, ctx) => {
        await ctx.sideEffect("charge", () => {
          counter.charges++;
        });
        const answer = await ctx.interrupt<{ ok: boolean }>({ reason: "ship?" });
        return { next: END, updates: { shipped: answer.ok } };
      },
    };
    const a = await open(file);
    try {
      const runner = new ResumableGraphRunner({ store: a.store, nodes });
      expect((await runner.runOrResume("p1")).status).toBe("waiting");
      expect(counter.charges).toBe(1);
      await new Promise((r) => setTimeout(r, 5)); // every record is now older than the cutoff below
      await a.store.prune({ olderThan: 1, keepLast: 1 });
      const done = await runner.resume("p1", { ok: true });
      expect(done.status).toBe("finished");
      expect(done.state.sharedMemory).toMatchObject({ planned: true, shipped: true });
      expect(counter.charges).toBe(1); // was 2: the prune had deleted the charge's record
    } finally {
      await a.close();
    }
  });

  it("the run waits on interrupt:<id>; signal() from another connection answers it; runOrResume continues", async () => {
    const file = path.join(tmp.dir, `i${n++}.db`);
    const counter = { charges: 0 };
    const a = await open(file);
    const b = await open(file); // another process, in effect: its own connection
    try {
      const first = await new ResumableGraphRunner({ store: a.store, nodes: graph(counter) }).runOrResume("w");
      expect(first.status).toBe("waiting");
      const name = `interrupt:${first.interrupt?.id}`;
      expect(await a.journal.getRun("w")).toMatchObject({ workflow: "graph", status: "waiting", waitingFor: name });
      const sent = await signal("w", name, { ok: true }, { journal: b.journal });
      expect(sent.wakes).toBe(true);
      const done = await new ResumableGraphRunner({ store: b.store, nodes: graph(counter) }).runOrResume("w");
      expect(done.status).toBe("finished");
      expect(done.state.sharedMemory).toEqual({ approved: true });
      expect(counter.charges).toBe(1);
      expect((await b.journal.getRun("w"))?.status).toBe("completed");
      // Run again: nothing more happens.
      expect((await new ResumableGraphRunner({ store: a.store, nodes: graph(counter) }).runOrResume("w")).status).toBe(
        "finished",
      );
      expect(counter.charges).toBe(1);
    } finally {
      await a.close();
      await b.close();
    }
  });

  it("runner.resume sends the signal; a second answer is refused, typed", async () => {
    const file = path.join(tmp.dir, `i${n++}.db`);
    const counter = { charges: 0 };
    const a = await open(file);
    try {
      const runner = new ResumableGraphRunner({ store: a.store, nodes: graph(counter) });
      const first = await runner.runOrResume("r");
      const name = `interrupt:${first.interrupt?.id}`;
      const done = await runner.resume("r", { ok: false });
      expect(done.state.sharedMemory).toEqual({ approved: false });
      expect(await a.journal.getSignal("r", name)).toMatchObject({ value: { ok: false } });
      await expect(runner.resume("r", { ok: true })).rejects.toBeInstanceOf(WorkflowNotWaitingError);
      // Answered by a signal first: resume refuses (naming it), runOrResume delivers the signal's answer.
      const second = await runner.runOrResume("s");
      await signal("s", `interrupt:${second.interrupt?.id}`, { ok: true }, { journal: a.journal });
      await expect(runner.resume("s", { ok: false })).rejects.toThrow(/already answered by signal/);
      expect((await runner.runOrResume("s")).state.sharedMemory).toEqual({ approved: true });
      expect(counter.charges).toBe(2);
    } finally {
      await a.close();
    }
  });

  it("interrupted in one process, answered with `dumplings signal`, finished by a second process: one charge", () => {
    const file = path.join(tmp.dir, `cli${n++}.db`);
    const charges = path.join(tmp.dir, `charges-${n}.txt`);
    const child = () => {
      const r = spawnSync(process.execPath, ["--import", "tsx", CHILD], {
        cwd: ROOT,
        env: { ...process.env, WF_JOURNAL: file, WF_ID: "order-1", WF_CHARGES: charges },
        encoding: "utf8",
      });
      expect(r.status, r.stderr).toBe(0);
      return JSON.parse(r.stdout.trim().split("\n").at(-1) as string) as {
        status: string;
        interrupt: string | null;
        memory: Record<string, unknown>;
      };
    };
    const first = child();
    expect(first.status).toBe("waiting");
    expect(existsSync(charges)).toBe(false);
    const cli = runCli([
      "signal",
      "--journal",
      `sqlite:${file}`,
      "order-1",
      `interrupt:${first.interrupt}`,
      '{"ok":true}',
    ]);
    expect(cli.code, cli.stderr).toBe(0);
    expect(cli.stdout).toMatch(/order-1/);
    const second = child();
    expect(second.status).toBe("finished");
    expect(second.memory).toMatchObject({ approved: true });
    expect(readFileSync(charges, "utf8").trim().split("\n")).toHaveLength(1);
    // A third process finds it finished: no second charge.
    expect(child().status).toBe("finished");
    expect(readFileSync(charges, "utf8").trim().split("\n")).toHaveLength(1);
  }, 60_000);
});
