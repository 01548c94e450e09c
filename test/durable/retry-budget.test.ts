/**
 * Retry budgets counted from the journal (case pb-31), on the SQLite,
 * PostgreSQL and Redis journals: a step body that SIGKILLs its own process
 * runs exactly `maxAttempts` times over any number of restarts, then the step
 * and the run are failed with a reason naming the budget and the crashes; an
 * attempt that threw and attempts that crashed share one budget. Errors no
 * retry can fix fail at once; delays use full jitter.
 */
import { randomUUID } from "node:crypto";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { APICallError } from "ai";
import { afterAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { NonJsonValueError } from "../../src/core/errors.js";
import { currentStep, isRetryableError, retryDelayMs, step } from "../../src/durable/context.js";
import { NonRetryableError, RetryBudgetExhaustedError, StepFailedError } from "../../src/durable/errors.js";
import { hashInput, type Journal } from "../../src/durable/journal.js";
import { runDurable } from "../../src/durable/run.js";
import { type ChildResult, fixture, runChild } from "../fixtures/durable/spawn.js";
import { journalStores, type OpenedStore } from "../fixtures/durable/stores.js";

const stores = await journalStores();
const dir = mkdtempSync(path.join(tmpdir(), "dumplings-budget-"));
const opened: OpenedStore[] = [];
afterAll(async () => {
  for (const o of opened) await o.destroy();
  rmSync(dir, { recursive: true, force: true });
});

const lines = (file: string) => (existsSync(file) ? readFileSync(file, "utf8").split("\n").filter(Boolean) : []);

/** Leaves a `started` record of attempt `attempt` as a dead executor would (it took the lease, wrote, died). */
async function interruptedAttempt(journal: Journal, runId: string, name: string, attempt: number) {
  await journal.createRun({ runId, workflow: "w", input: null });
  const lease = await journal.acquireLease(runId, "dead-worker", 60_000);
  if (!lease.acquired) throw new Error("lease not acquired");
  await journal.writeStep(lease.fencingToken, {
    runId,
    seq: 0,
    name,
    inputHash: hashInput(null),
    status: "started",
    attempt,
    startedAt: Date.now(),
    fencingToken: lease.fencingToken,
  });
  await journal.releaseLease(runId, lease.fencingToken);
}

for (const store of stores) {
  describe.skipIf(!!store.skip)(
    `retry budgets on ${store.name}${store.skip ? ` (skipped: ${store.skip})` : ""}`,
    () => {
      const open = () => {
        const o = store.open();
        opened.push(o);
        return o;
      };

      it("pb-31: a body that SIGKILLs its process with maxAttempts 3 runs exactly 3 times over 6 restarts; then the run is failed with the reason", async () => {
        const { journal, env } = open();
        const runId = `pb31-${randomUUID()}`;
        const effects = path.join(dir, `${runId}.effects`);
        const childEnv = { ...env, RUN_ID: runId, EFFECTS: effects, MODE: "kill", MAX_ATTEMPTS: "3" };
        const results: ChildResult[] = [];
        for (let start = 0; start < 7; start++) results.push(await runChild(fixture("budget-child.ts"), childEnv));

        // the first three processes died in the body; the fourth found the budget spent without running it
        expect(results.slice(0, 3).map((r) => r.signal)).toEqual(["SIGKILL", "SIGKILL", "SIGKILL"]);
        expect(lines(effects)).toEqual(["grind 1", "grind 2", "grind 3"]);
        for (const r of results.slice(3)) {
          expect(r.code, r.stderr).toBe(0);
          expect(r.json).toMatchObject({ status: "failed", error: { name: "StepFailedError", code: "STEP_FAILED" } });
        }
        const reason = String((results[3]?.json?.error as { message?: string } | undefined)?.message);
        expect(reason).toContain("RetryBudgetExhaustedError");
        expect(reason).toContain("3 attempt(s) started of 3 allowed");
        expect(reason).toContain("3 of them interrupted by a crash");

        const run = await journal.getRun(runId);
        expect(run).toMatchObject({ status: "failed", error: { code: "STEP_FAILED" } });
        expect(run?.error?.message).toContain("retry budget spent");
        const [rec] = await journal.readSteps(runId);
        expect(rec).toMatchObject({
          name: "grind",
          status: "failed",
          attempt: 3,
          error: { name: "RetryBudgetExhaustedError", code: "RETRY_BUDGET_EXHAUSTED" },
        });
        const events = await journal.readEvents(runId);
        expect(events.filter((e) => e.type === "step_started").map((e) => e.attempt)).toEqual([1, 2, 3]);
        expect(events.filter((e) => e.type === "step_failed")).toHaveLength(1);
      }, 120_000);

      it("pb-31 variant: attempt 1 throws (handled), attempt 2 kills the process: one budget, 3 executions in all", async () => {
        const { journal, env } = open();
        const runId = `pb31m-${randomUUID()}`;
        const effects = path.join(dir, `${runId}.effects`);
        const childEnv = { ...env, RUN_ID: runId, EFFECTS: effects, MODE: "mixed", MAX_ATTEMPTS: "3" };
        const results: ChildResult[] = [];
        for (let start = 0; start < 4; start++) results.push(await runChild(fixture("budget-child.ts"), childEnv));
        expect(results.slice(0, 2).map((r) => r.signal)).toEqual(["SIGKILL", "SIGKILL"]);
        expect(lines(effects)).toEqual(["grind 1", "grind 2", "grind 3"]);
        expect(results[2]?.json).toMatchObject({ status: "failed" });
        expect(results[3]?.json).toEqual(results[2]?.json);
        const [rec] = await journal.readSteps(runId);
        expect(rec).toMatchObject({ status: "failed", attempt: 3, error: { code: "RETRY_BUDGET_EXHAUSTED" } });
        // attempt 1 threw in a live process: only attempts 2 and 3 were interrupted; the last error is kept
        expect(rec?.error?.message).toContain("2 of them interrupted by a crash");
        expect(rec?.error?.message).toContain("last error: Error: transient failure of attempt 1");
      }, 60_000);

      it("an interrupted attempt runs again within the budget; maxStartedAttempts: 1 never starts a body twice", async () => {
        const { journal } = open();
        // default policy: an attempt interrupted by a crash is run again (at-least-once), as attempt 2
        let runs = 0;
        const body = () => {
          runs++;
          return currentStep()?.attempt ?? 0;
        };
        await interruptedAttempt(journal, "again", "x", 1);
        expect(await runDurable("again", () => step("x", body), { journal })).toMatchObject({
          status: "completed",
          output: 2,
        });
        expect(runs).toBe(1);

        // the default budget for crashes is max(maxAttempts, 3) started attempts
        await interruptedAttempt(journal, "spent", "x", 3);
        const spent = await runDurable("spent", () => step("x", body), { journal });
        expect(spent).toMatchObject({ status: "failed", error: { code: "STEP_FAILED" } });
        expect(runs).toBe(1);

        // a body that must never start twice
        await interruptedAttempt(journal, "once", "x", 1);
        let caught: unknown;
        const once = await runDurable(
          "once",
          async () => {
            try {
              return await step("x", body, { retry: { maxStartedAttempts: 1 } });
            } catch (e) {
              caught = e;
              throw e;
            }
          },
          { journal },
        );
        expect(once.status).toBe("failed");
        expect(runs).toBe(1);
        expect(caught).toBeInstanceOf(StepFailedError);
        const cause = (caught as StepFailedError).cause;
        expect(cause).toBeInstanceOf(RetryBudgetExhaustedError);
        expect(cause).toMatchObject({ attempts: 1, budget: 1, interrupted: 1 });
        expect((await journal.readSteps("once"))[0]).toMatchObject({ status: "failed", attempt: 1 });
      });

      it("errors no retry can fix fail at once; transient ones are retried up to maxAttempts", async () => {
        const { journal } = open();
        const http = (status: number) => Object.assign(new Error(`HTTP ${status}`), { status });
        const api = (statusCode: number) =>
          new APICallError({ message: `API ${statusCode}`, url: "http://x", requestBodyValues: {}, statusCode });
        const cases: [string, () => unknown, number][] = [
          ["NonRetryableError", () => new NonRetryableError("card declined"), 1],
          ["wrapped NonRetryableError", () => new Error("outer", { cause: new NonRetryableError("inner") }), 1],
          ["AbortError", () => new DOMException("aborted by the caller", "AbortError"), 1],
          ["NonJsonValueError", () => new NonJsonValueError("output.x", "a function"), 1],
          ["APICallError 401", () => api(401), 1],
          ["APICallError 400", () => api(400), 1],
          ["statusCode 403", () => Object.assign(new Error("forbidden"), { statusCode: 403 }), 1],
          ["status 404", () => http(404), 1],
          ["isRetryable false", () => Object.assign(new Error("no"), { isRetryable: false }), 1],
          ["APICallError 429", () => api(429), 3],
          ["APICallError 503", () => api(503), 3],
          ["status 408", () => http(408), 3],
          ["status 409", () => http(409), 3],
          ["status 500", () => http(500), 3],
          ["plain Error", () => new Error("flaky"), 3],
        ];
        for (const [label, make, expected] of cases) {
          let attempts = 0;
          const runId = `nr-${label.replaceAll(" ", "-")}`;
          const r = await runDurable(
            runId,
            () =>
              step(
                "call",
                () => {
                  attempts++;
                  throw make();
                },
                { retry: { maxAttempts: 3, backoffMs: 1 } },
              ),
            { journal, input: null },
          );
          expect([label, r.status, attempts]).toEqual([label, "failed", expected]);
          expect((await journal.readSteps(runId))[0]).toMatchObject({ status: "failed", attempt: expected });
        }
        // a zod schema that refuses the output is a validation error: no retry
        let parsed = 0;
        const r = await runDurable(
          "nr-zod",
          () =>
            step(
              "typed",
              () => {
                parsed++;
                return { n: "x" } as never;
              },
              { schema: z.object({ n: z.number() }), retry: { maxAttempts: 3, backoffMs: 1 } },
            ),
          { journal, input: null },
        );
        expect(r).toMatchObject({ status: "failed" });
        expect(parsed).toBe(1);
        expect((await journal.readSteps("nr-zod"))[0]?.error).toMatchObject({ name: "ZodError" });
      });
    },
  );
}

describe("backoff and classification", () => {
  it("full jitter: each delay is uniform in [0, min(maxBackoffMs, backoffMs × 2^(attempt-1))]", () => {
    const policy = { backoffMs: 100, maxBackoffMs: 1000 };
    expect(retryDelayMs(policy, 1, () => 0)).toBe(0);
    expect(retryDelayMs(policy, 1, () => 0.5)).toBe(50);
    expect(retryDelayMs(policy, 3, () => 0.5)).toBe(200);
    expect(retryDelayMs(policy, 3, () => 0.999999)).toBe(400);
    expect(retryDelayMs(policy, 10, () => 0.999999)).toBe(1000); // capped
    expect(retryDelayMs({}, 1, () => 1)).toBe(100); // defaults: 100 ms base, 30 s cap
    expect(retryDelayMs({}, 20, () => 1)).toBe(30_000);
    // sampled: spread over the whole range (not "equal jitter", which never goes below half the cap)
    const samples = Array.from({ length: 2000 }, () => retryDelayMs(policy, 4, Math.random));
    expect(Math.min(...samples)).toBeLessThan(80);
    expect(Math.max(...samples)).toBeGreaterThan(720);
    expect(Math.max(...samples)).toBeLessThanOrEqual(800);
    const mean = samples.reduce((a, b) => a + b, 0) / samples.length;
    expect(mean).toBeGreaterThan(340);
    expect(mean).toBeLessThan(460);
  });

  it("isRetryableError reads the first error of the cause chain that says something", () => {
    expect(isRetryableError(new Error("x"))).toBe(true);
    expect(isRetryableError("a string")).toBe(true);
    expect(isRetryableError(Object.assign(new Error("x"), { isRetryable: true, statusCode: 400 }))).toBe(true);
    expect(isRetryableError(new Error("outer", { cause: Object.assign(new Error("in"), { statusCode: 401 }) }))).toBe(
      false,
    );
    // AI SDK RetryError keeps the last error as `lastError`
    expect(isRetryableError(Object.assign(new Error("retries"), { lastError: { statusCode: 429 } }))).toBe(true);
    expect(isRetryableError(Object.assign(new Error("retries"), { lastError: { statusCode: 422 } }))).toBe(false);
  });
});
