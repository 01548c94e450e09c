/**
 * Steps, replay, retries, signals and timers in one process over a real
 * SQLite journal file (crash tests with real processes are in crash.test.ts).
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { z } from "zod";
import { currentStep, defineStep, sleep, step, waitForSignal } from "../../src/durable/context.js";
import {
  NoRunContextError,
  ReplayMismatchError,
  SignalConflictError,
  StepFailedError,
} from "../../src/durable/errors.js";
import { hashInput } from "../../src/durable/journal.js";
import { SqliteJournal } from "../../src/durable/journal-sqlite.js";
import { runDurable } from "../../src/durable/run.js";
import { signal } from "../../src/durable/signals.js";
import { MemoryRunStream } from "../../src/durable/stream.js";

let dir: string;
let journal: SqliteJournal;
beforeEach(() => {
  dir = mkdtempSync(path.join(tmpdir(), "dumplings-steps-"));
  journal = new SqliteJournal({ path: path.join(dir, "j.db") });
});
afterEach(async () => {
  await journal.close();
  rmSync(dir, { recursive: true, force: true });
});

describe("step and replay", () => {
  it("runs each body once; a replay returns the recorded outputs without calling the bodies", async () => {
    const calls = new Map<string, number>();
    const count = (k: string) => calls.set(k, (calls.get(k) ?? 0) + 1);
    const add = defineStep("add", (i: { a: number; b: number }) => {
      count("add");
      return i.a + i.b;
    });
    const wf = async (input: unknown) => {
      const { x } = input as { x: number };
      const a = await add({ a: x, b: 1 });
      const b = await step(
        "obj",
        () => {
          count("obj");
          return { skip: undefined, list: [a], text: "ok" };
        },
        { input: { a } },
      );
      return { a, b };
    };
    const first = await runDurable("r1", wf, { journal, input: { x: 41 } });
    expect(first).toEqual({ runId: "r1", status: "completed", output: { a: 42, b: { list: [42], text: "ok" } } });
    expect(Object.fromEntries(calls)).toEqual({ add: 1, obj: 1 });
    // a finished run returns its outcome without running
    expect(await runDurable("r1", wf, { journal })).toEqual(first);
    // replaying the journal under a fresh run status (simulating a crash before the run row was updated)
    const steps = await journal.readSteps("r1");
    expect(steps.map((s) => [s.seq, s.name, s.status, s.attempt])).toEqual([
      [0, "add", "completed", 1],
      [1, "obj", "completed", 1],
    ]);
    expect(steps[0]?.inputHash).toBe(hashInput({ b: 1, a: 41 }));
  });

  it("replays after a failure midway: completed steps are not re-run", async () => {
    let flaky = 0;
    let first = 0;
    const wf = async () => {
      await step("first", () => ++first);
      return step("flaky", () => {
        flaky++;
        if (flaky === 1) throw new Error("boom");
        return "done";
      });
    };
    const a = await runDurable("r2", wf, { journal, input: null });
    expect(a).toMatchObject({ status: "failed", error: { name: "StepFailedError" } });
    // a failed step replays as failed without running again
    const events = await journal.readEvents("r2");
    expect(events.filter((e) => e.type === "step_failed")).toHaveLength(1);
    const again = await runDurable("r2", wf, { journal });
    expect(again.status).toBe("failed");
    expect([first, flaky]).toEqual([1, 1]);
  });

  it("a step body sees its idempotency key, the same on every attempt", async () => {
    const seen: unknown[] = [];
    const r = await runDurable(
      "k1",
      async () => {
        await step("a", () => 1);
        return step(
          "b",
          () => {
            const info = currentStep();
            seen.push(info);
            if (seen.length === 1) throw new Error("transient");
            return info?.idempotencyKey ?? null;
          },
          { retry: { maxAttempts: 2, backoffMs: 1 } },
        );
      },
      { journal, input: null },
    );
    expect(r).toMatchObject({ status: "completed", output: "k1:1" });
    expect(seen).toMatchObject([
      { runId: "k1", seq: 1, name: "b", attempt: 1, idempotencyKey: "k1:1", signal: { aborted: false } },
      { runId: "k1", seq: 1, name: "b", attempt: 2, idempotencyKey: "k1:1", signal: { aborted: false } },
    ]);
    expect(currentStep()).toBeUndefined();
  });

  it("retries with backoff, recording each attempt", async () => {
    let n = 0;
    const result = await runDurable(
      "r3",
      () =>
        step(
          "flaky",
          () => {
            n++;
            if (n < 3) throw new TypeError(`attempt ${n} failed`);
            return n;
          },
          { retry: { maxAttempts: 3, backoffMs: 5 } },
        ),
      { journal, input: null },
    );
    expect(result).toMatchObject({ status: "completed", output: 3 });
    const started = (await journal.readEvents("r3")).filter((e) => e.type === "step_started");
    expect(started.map((e) => e.attempt)).toEqual([1, 2, 3]);
    const [rec] = await journal.readSteps("r3");
    expect(rec).toMatchObject({ status: "completed", attempt: 3 });
    expect(rec?.error).toBeUndefined();
  });

  it("gives up after maxAttempts with a StepFailedError carrying the last error", async () => {
    const result = await runDurable(
      "r4",
      async () => {
        try {
          await step(
            "never",
            () => {
              throw new RangeError("nope");
            },
            { retry: { maxAttempts: 2, backoffMs: 1 } },
          );
        } catch (e) {
          expect(e).toBeInstanceOf(StepFailedError);
          expect(e).toMatchObject({ attempts: 2, recordedError: { name: "RangeError", message: "nope" } });
          return "handled";
        }
        return "unreachable";
      },
      { journal, input: null },
    );
    expect(result).toMatchObject({ status: "completed", output: "handled" });
    expect((await journal.readSteps("r4"))[0]).toMatchObject({ status: "failed", attempt: 2 });
  });

  it("refuses a non-JSON output with a typed error naming the path, without retrying", async () => {
    let n = 0;
    const result = await runDurable(
      "r5",
      () =>
        step(
          "bad",
          () => {
            n++;
            return { when: new Date() } as never;
          },
          { retry: { maxAttempts: 3, backoffMs: 1 } },
        ),
      { journal, input: null },
    );
    expect(n).toBe(1);
    expect(result).toMatchObject({ status: "failed" });
    const [rec] = await journal.readSteps("r5");
    expect(rec?.error).toMatchObject({ name: "NonJsonValueError", code: "NON_JSON_VALUE" });
    expect(rec?.error?.message).toContain('step "bad" output.when');
  });

  it("validates outputs with a zod schema on first run and on replay", async () => {
    const schema = z.object({ n: z.number() });
    const wf = () => step("typed", () => ({ n: 1 }), { schema });
    expect(await runDurable("r6", wf, { journal, input: null })).toMatchObject({ output: { n: 1 } });
    const bad = await runDurable("r6b", () => step("typed", () => ({ n: "x" }) as never, { schema }), {
      journal,
      input: null,
    });
    expect(bad).toMatchObject({ status: "failed" });
  });

  it("a renamed step blocks the run with a ReplayMismatchError naming both steps; a changed input is drift; the journal is untouched", async () => {
    const v1 = async () => {
      await step("a", () => 1);
      await waitForSignal("go");
      return step("b", () => 2);
    };
    expect(await runDurable("r7", v1, { journal, input: null })).toMatchObject({ status: "waiting" });
    const before = await journal.readSteps("r7");
    const renamed = async () => {
      await step("a-renamed", () => 1);
      return 0;
    };
    const blocked = await runDurable("r7", renamed, { journal });
    expect(blocked).toMatchObject({
      status: "blocked",
      error: { name: ReplayMismatchError.name, code: "REPLAY_MISMATCH" },
    });
    const reason = blocked.status === "blocked" ? blocked.error.message : "";
    expect(reason).toContain('"a"');
    expect(reason).toContain('"a-renamed"');
    expect(await journal.getRun("r7")).toMatchObject({ status: "blocked", error: { code: "REPLAY_MISMATCH" } });
    const changedInput = async () => {
      await step("a", () => 1, { input: { v: 2 } });
      return waitForSignal("go");
    };
    expect(await runDurable("r7", changedInput, { journal })).toMatchObject({ status: "waiting" });
    expect((await journal.readEvents("r7")).filter((e) => e.type === "step_drift")).toMatchObject([
      { seq: 0, name: "a" },
    ]);
    expect(await journal.readSteps("r7")).toEqual(before);
    // the original program still resumes it
    await signal("r7", "go", true, { journal });
    expect(await runDurable("r7", v1, { journal })).toMatchObject({ status: "completed", output: 2 });
  });
});

describe("signals and timers", () => {
  it("waits for a signal, resumes with its value; a second signal is a typed error", async () => {
    let after = 0;
    const wf = async () => {
      const v = await waitForSignal<{ ok: boolean }>("approval");
      after++;
      return v;
    };
    const a = await runDurable("s1", wf, { journal, input: null });
    expect(a).toEqual({ runId: "s1", status: "waiting", waitingFor: { kind: "signal", name: "approval" } });
    expect(await journal.getRun("s1")).toMatchObject({ status: "waiting", waitingFor: "approval" });
    let woke = 0;
    const sent = await signal("s1", "approval", { ok: true }, { journal, wake: async () => void woke++ });
    expect(sent.wakes).toBe(true);
    expect(woke).toBe(1);
    await expect(signal("s1", "approval", { ok: false }, { journal })).rejects.toBeInstanceOf(SignalConflictError);
    expect(await runDurable("s1", wf, { journal })).toMatchObject({ status: "completed", output: { ok: true } });
    expect(after).toBe(1);
  });

  it("an unrelated signal is recorded and consumed later without waking the run", async () => {
    const wf = async () => {
      await waitForSignal("first");
      return waitForSignal("second");
    };
    await runDurable("s2", wf, { journal, input: null });
    const early = await signal("s2", "second", "early", { journal });
    expect(early.wakes).toBe(false);
    await signal("s2", "first", 1, { journal });
    expect(await runDurable("s2", wf, { journal })).toMatchObject({ status: "completed", output: "early" });
  });

  it("sleep: short timers run inline; long ones suspend the run with wakeAt", async () => {
    const wf = async () => {
      await sleep("short", 20);
      await sleep("long", 60_000);
      return "woke";
    };
    const r = await runDurable("t1", wf, { journal, input: null, inlineSleepMaxMs: 100 });
    expect(r).toMatchObject({ status: "waiting", waitingFor: { kind: "timer", name: "long" } });
    const run = await journal.getRun("t1");
    expect(run?.wakeAt).toBeGreaterThan(Date.now() + 50_000);
    // a replay before the wake-up time keeps waiting, with the same recorded wakeAt
    const r2 = await runDurable("t1", wf, { journal, inlineSleepMaxMs: 100 });
    expect(r2).toMatchObject({ waitingFor: { wakeAt: run?.wakeAt } });
    const z = await runDurable("t2", async () => sleep("zero", 0), { journal, input: null });
    expect(z.status).toBe("completed");
  });
});

describe("context and fencing", () => {
  it("durable calls outside a run or nested in a step body are refused", async () => {
    await expect(step("x", () => 1)).rejects.toBeInstanceOf(NoRunContextError);
    const r = await runDurable("c1", () => step("outer", () => step("inner", () => 1)), { journal, input: null });
    expect(r).toMatchObject({ status: "failed", error: { message: expect.stringContaining("cannot nest") } });
  });

  it("streams events on the side channel, resumable from an index", async () => {
    const stream = new MemoryRunStream();
    const got: unknown[] = [];
    const sub = (async () => {
      for await (const e of stream.subscribe("m1", { until: (e) => (e.data as { type: string }).type === "run-end" }))
        got.push(e);
    })();
    const { currentRun } = await import("../../src/durable/context.js");
    await runDurable(
      "m1",
      async () => {
        await currentRun()?.emit({ type: "token", text: "a" });
        await currentRun()?.emit({ type: "token", text: "b" });
        return 1;
      },
      { journal, input: null, stream },
    );
    await sub;
    const token = (await journal.getRun("m1"))?.fencingToken;
    expect(got).toEqual([
      { index: 1, runId: "m1", fencingToken: token, data: { type: "token", text: "a" } },
      { index: 2, runId: "m1", fencingToken: token, data: { type: "token", text: "b" } },
      { index: 3, data: { type: "run-end", status: "completed" } },
    ]);
    expect(await stream.read("m1", 2)).toEqual([{ index: 3, data: { type: "run-end", status: "completed" } }]);
  });
});
