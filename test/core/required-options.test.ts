/**
 * A required option that is missing (or of the wrong kind) is a typed `InvalidOptionError` naming the component
 * and the option and saying what to pass, never a raw `TypeError` from its first use ("Cannot read properties of
 * undefined (reading 'createRun')", "options.cold.init is not a function"). Nothing is created.
 */
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { BaseAgent } from "../../src/agent/base-agent.js";
import { MemoryBackend } from "../../src/backends/memory.js";
import { InvalidOptionError, InvalidStateError } from "../../src/core/errors.js";
import { DurableAgent } from "../../src/durable/agent.js";
import { SqliteJournal } from "../../src/durable/journal-sqlite.js";
import { runDurable } from "../../src/durable/run.js";
import { approve, reject, signal } from "../../src/durable/signals.js";
import { exportStateString, saveState } from "../../src/persistence/api.js";
import { ResumableGraphRunner } from "../../src/workflow/runner.js";
import { CheckpointStore } from "../../src/workflow/store.js";

const dir = mkdtempSync(path.join(tmpdir(), "dumplings-required-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** What `fn` threw (sync or async), or a marker when it did not throw. */
async function thrown(fn: () => unknown): Promise<unknown> {
  try {
    await fn();
  } catch (error) {
    return error;
  }
  return "did not throw";
}

function expectOption(error: unknown, component: string, option: string, says: RegExp): void {
  expect(error).toBeInstanceOf(InvalidOptionError);
  expect(error).toMatchObject({ code: "INVALID_OPTION", component, option });
  expect((error as Error).message).toMatch(says);
}

const fn = async () => "x";

describe("required options", () => {
  it("runDurable without a journal, or without options", async () => {
    expectOption(
      await thrown(() => runDurable("r", fn, { input: null } as never)),
      "runDurable",
      "journal",
      /is required: runDurable\(runId, fn, \{ journal, input \}\)/,
    );
    expectOption(
      await thrown(() => (runDurable as unknown as (id: string, f: typeof fn) => unknown)("r", fn)),
      "runDurable",
      "journal",
      /is required/,
    );
    expectOption(
      await thrown(() => runDurable("r", fn, { journal: "sqlite:/tmp/x.db", input: null } as never)),
      "runDurable",
      "journal",
      /must be a journal .*got string/,
    );
  });

  it("approve, reject and signal without a journal", async () => {
    expectOption(await thrown(() => approve("r", "c", {} as never)), "approve", "journal", /is required/);
    expectOption(await thrown(() => reject("r", "c", {} as never)), "reject", "journal", /is required/);
    expectOption(await thrown(() => signal("r", "go", true, {} as never)), "signal", "journal", /is required/);
  });

  it("CheckpointStore.open without cold, or with a SPEC string, or a hot tier that is not one", async () => {
    expectOption(
      await thrown(() => CheckpointStore.open({} as never)),
      "CheckpointStore.open",
      "cold",
      /is required: pass cold: new SqliteColdStore/,
    );
    const file = path.join(dir, "x.db");
    expectOption(
      await thrown(() => CheckpointStore.open({ cold: `sqlite:${file}` } as never)),
      "CheckpointStore.open",
      "cold",
      new RegExp(
        `got the string .*new SqliteColdStore\\(\\{ path: ${JSON.stringify(file).replace(/[/.]/g, "\\$&")} \\}\\)`,
      ),
    );
    expect(existsSync(file)).toBe(false);
    expectOption(
      await thrown(() => CheckpointStore.open({ cold: { init: async () => {} }, hot: "redis://x" } as never)),
      "CheckpointStore.open",
      "hot",
      /must be a RedisHotTier/,
    );
  });

  it("ResumableGraphRunner without a store, without nodes, or with no node", async () => {
    const nodes = { a: async () => ({ next: "__end__" }) };
    expectOption(
      await thrown(() => new ResumableGraphRunner({ nodes } as never)),
      "ResumableGraphRunner",
      "store",
      /is required/,
    );
    const store = { loadLatest: async () => undefined } as never;
    expectOption(
      await thrown(() => new ResumableGraphRunner({ store } as never)),
      "ResumableGraphRunner",
      "nodes",
      /is required/,
    );
    expectOption(
      await thrown(() => new ResumableGraphRunner({ store, nodes: {} })),
      "ResumableGraphRunner",
      "nodes",
      /at least one node/,
    );
  });

  it("DurableAgent without a model", async () => {
    expectOption(await thrown(() => new DurableAgent({} as never)), "DurableAgent", "model", /is required/);
    expectOption(
      await thrown(() => new DurableAgent({ model: null } as never)),
      "DurableAgent",
      "model",
      /must be an AI SDK language model, got null/,
    );
  });

  // a new user's trial: bare TypeErrors ("Invalid value used as weak map key", "agent.toState is not a
  // function", "state.history must be an array"), and a run created as failed for good
  it("saveState and exportStateString of something that is not an agent", async () => {
    for (const agent of [null, undefined, {}, "agent", []]) {
      expectOption(await thrown(() => saveState(agent as never, "k")), "saveState", "agent", /must be an agent/);
      expectOption(
        await thrown(() => exportStateString(agent as never)),
        "exportStateString",
        "agent",
        /must be an agent/,
      );
    }
    for (const [history, got] of [
      ["oops", "string"],
      [null, "null"],
      [undefined, "undefined"],
      [{ 0: "m" }, "object"],
    ] as const) {
      const agent = new BaseAgent({ name: "h" });
      (agent as unknown as { history: unknown }).history = history;
      for (const call of [
        () => saveState(agent, "k", { backend: new MemoryBackend() }),
        () => exportStateString(agent),
      ]) {
        const error = await thrown(call);
        expect(error, String(history)).toBeInstanceOf(InvalidStateError);
        expect((error as Error).message).toMatch(new RegExp(`history: must be an array of messages, got ${got}`));
      }
    }
  });

  it("runDurable with a workflow that is not a function creates no run", async () => {
    const journal = new SqliteJournal({ path: path.join(dir, "fn.db") });
    try {
      expectOption(
        await thrown(() => runDurable("r-fn", "notafunction" as never, { journal, input: {} })),
        "runDurable",
        "workflowFn",
        /must be the workflow function.*got string/,
      );
      expect(await journal.getRun("r-fn")).toBeUndefined();
      // a class is a function to typeof, but cannot be called: refused too
      expectOption(
        await thrown(() => runDurable("r-fn", class Flow {} as never, { journal, input: {} })),
        "runDurable",
        "workflowFn",
        /got a class/,
      );
      expect(await journal.getRun("r-fn")).toBeUndefined();
      // lease durations a timer cannot hold (a renewal every millisecond) or too short to renew
      for (const leaseTtlMs of [1e10, 50, 0, Number.NaN]) {
        expectOption(
          await thrown(() => runDurable("r-fn", fn, { journal, input: {}, leaseTtlMs })),
          "runDurable",
          "leaseTtlMs",
          /from 100 to 2147483647/,
        );
      }
      expectOption(
        await thrown(() => runDurable("r-fn", fn, { journal, input: {}, leaseWaitMs: 1e12 })),
        "runDurable",
        "leaseWaitMs",
        /from 0 to 2147483647/,
      );
      expect(await journal.getRun("r-fn")).toBeUndefined();
      // the same id then starts with a real workflow
      expect(await runDurable("r-fn", fn, { journal, input: {} })).toMatchObject({ status: "completed", output: "x" });
    } finally {
      await journal.close();
    }
  });
});

// issue 25 item 9: "leaseWaitMs: NaN is reported as got null" (JSON prints NaN and Infinity as null)
describe("option values are named as given", () => {
  it("NaN, Infinity, a number as text, a function: each shown as it was passed", async () => {
    const dir = mkdtempSync(path.join(tmpdir(), "shown-"));
    const journal = new SqliteJournal({ path: path.join(dir, "runs.db") });
    try {
      for (const [value, shown] of [
        [Number.NaN, "got NaN"],
        [Number.POSITIVE_INFINITY, "got Infinity"],
        ["5000", 'got "5000"'],
        [() => 1, "got a function"],
      ] as const) {
        const error = await thrown(() =>
          runDurable("r", async () => 1, { journal, input: null, leaseWaitMs: value as never }),
        );
        expectOption(error, "runDurable", "leaseWaitMs", new RegExp(shown.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")));
      }
      const store = { loadLatest: async () => undefined, cold: {} } as never;
      expectOption(
        await thrown(
          () => new ResumableGraphRunner({ store, nodes: { a: async () => ({ next: "x" }) }, leaseTtlMs: Number.NaN }),
        ),
        "ResumableGraphRunner",
        "leaseTtlMs",
        /got NaN/,
      );
    } finally {
      await journal.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
