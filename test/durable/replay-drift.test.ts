/**
 * Replay that survives deploys (case pb-34), on the SQLite, PostgreSQL and
 * Redis journals. Recorded steps are matched by position and name: a changed
 * step input at a recorded position is drift (the recorded result stands, a
 * `step_drift` event says what changed); another step name there is a
 * structural divergence that blocks the run (`blocked` with the reason, never
 * left `running`), resumable once fixed: with the old program, with a
 * `patched()` guard, or after an operator's reset or retry. A DurableAgent run
 * paused for approval under program v1 completes under v2 (a sentence added to
 * the system prompt, a tool added), running the approved refund once. Timers
 * are judged by the store's clock.
 */
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { tool } from "ai";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { z } from "zod";
import { DurableAgent, type DurableAgentInput } from "../../src/durable/agent.js";
import { deprecatePatch, patched, sleep, step, waitForSignal } from "../../src/durable/context.js";
import { hashInput } from "../../src/durable/journal.js";
import { runDurable } from "../../src/durable/run.js";
import { approve, signal } from "../../src/durable/signals.js";
import { type ModelServer, type RecordedRequest, startModelServer } from "../../src/testing/model-server.js";
import { FINAL_TEXT, modelHandler, requestsOf, userMessages } from "../fixtures/durable/agent-fixture.js";
import { journalStores, type OpenedStore } from "../fixtures/durable/stores.js";

const stores = await journalStores();
const opened: OpenedStore[] = [];
let server: ModelServer;
beforeAll(async () => {
  server = await startModelServer({ handler: modelHandler });
});
afterAll(async () => {
  await server?.close();
  for (const o of opened) await o.destroy();
});

const PROMPT_V1 = "You are a support agent.";
const PROMPT_V2 = "You are a support agent. Never promise a delivery date.";

/** The support agent of program v1 or v2; tool bodies count their executions in `effects`. */
function supportAgent(version: 1 | 2, effects: string[]) {
  const provider = createOpenAICompatible({ name: "local", baseURL: server.url, apiKey: "test-key" });
  const tools = {
    lookup: tool({
      description: "Look up an order",
      inputSchema: z.object({ id: z.number() }),
      execute: async ({ id }) => {
        effects.push("lookup");
        return { id, total: 42 };
      },
    }),
    refund: tool({
      description: "Refund an order",
      inputSchema: z.object({ amount: z.number() }),
      needsApproval: true,
      execute: async ({ amount }) => {
        effects.push("refund");
        return { refunded: amount };
      },
    }),
  };
  const weather = tool({
    description: "Weather at a place",
    inputSchema: z.object({ city: z.string() }),
    execute: async () => {
      effects.push("weather");
      return { sky: "clear" };
    },
  });
  return new DurableAgent({
    model: provider("scripted-model"),
    system: version === 1 ? PROMPT_V1 : PROMPT_V2,
    tools: version === 1 ? tools : { ...tools, weather },
    llmRetry: { maxAttempts: 1 },
  });
}

const systemOf = (r: RecordedRequest | undefined) =>
  String(
    (r?.body.messages as { role: string; content: unknown }[] | undefined)?.find((m) => m.role === "system")?.content,
  );
const toolsOf = (r: RecordedRequest | undefined) =>
  ((r?.body.tools as { function: { name: string } }[] | undefined) ?? []).map((t) => t.function.name).sort();

for (const store of stores) {
  describe.skipIf(!!store.skip)(
    `replay across deploys on ${store.name}${store.skip ? ` (skipped: ${store.skip})` : ""}`,
    () => {
      const open = () => {
        const o = store.open();
        opened.push(o);
        return o.journal;
      };

      it("pb-34: a run paused for approval under v1 completes under v2 (prompt sentence and tool added); the refund runs once", async () => {
        const journal = open();
        const runId = `pb34-${store.name}`;
        const effects: string[] = [];
        const input = { messages: userMessages(runId) };
        const paused = await runDurable(runId, supportAgent(1, effects).workflow(), { journal, input });
        expect(paused).toMatchObject({
          status: "waiting",
          waitingFor: { kind: "signal", name: "approval:call_refund" },
        });
        expect(effects).toEqual(["lookup"]);
        const before = await journal.readSteps(runId);

        // deploy v2, then the human approves, then the run resumes on v2
        await approve(runId, "call_refund", { journal });
        const done = await runDurable(runId, supportAgent(2, effects).workflow(), { journal });
        expect(done, JSON.stringify(done)).toMatchObject({ status: "completed", output: { text: FINAL_TEXT } });
        expect(effects).toEqual(["lookup", "refund"]);

        // the recorded model turns were used (no request repeated); only the next turn used v2
        const requests = requestsOf(server.requests, runId);
        expect(requests).toHaveLength(3);
        expect(requests.slice(0, 2).map(systemOf)).toEqual([PROMPT_V1, PROMPT_V1]);
        expect(systemOf(requests[2])).toBe(PROMPT_V2);
        expect(toolsOf(requests[0])).toEqual(["lookup", "refund"]);
        expect(toolsOf(requests[2])).toEqual(["lookup", "refund", "weather"]);

        // the recorded steps are untouched; each replayed llm step whose input changed is reported once
        const after = await journal.readSteps(runId);
        expect(after.slice(0, before.length - 1)).toEqual(before.slice(0, -1));
        const drift = (await journal.readEvents(runId)).filter((e) => e.type === "step_drift");
        expect(drift.filter((e) => e.name === "llm")).toHaveLength(2);
        expect(drift.filter((e) => e.name?.startsWith("tool:"))).toEqual([]);
        for (const e of drift) {
          expect(e.detail).toMatch(/^input changed: [0-9a-f]{12} → [0-9a-f]{12}; the recorded result was used$/);
          expect(before[e.seq ?? -1]?.name).toBe(e.name);
        }
        expect((await journal.getRun(runId))?.status).toBe("completed");
      });

      it("a structural change blocks the paused run with the reason; the patched program resumes it; new runs take the patch", async () => {
        const journal = open();
        const effects: string[] = [];
        const start = async (runId: string) => {
          const r = await runDurable(runId, supportAgent(1, effects).workflow(), {
            journal,
            input: { messages: userMessages(runId) },
          });
          expect(r.status).toBe("waiting");
          await approve(runId, "call_refund", { journal });
        };
        const blockedId = `pb34-blocked-${store.name}`;
        await start(blockedId);
        // v3 adds a step before the agent, without a patch: the journal holds "llm" where the program asks "fraud-check"
        let checks = 0;
        const fraudCheck = () => step("fraud-check", () => ++checks);
        const v3 = async (input: DurableAgentInput) => {
          await fraudCheck();
          return supportAgent(2, effects).workflow()(input);
        };
        const blocked = await runDurable(blockedId, v3, { journal });
        expect(blocked).toMatchObject({
          status: "blocked",
          error: { name: "ReplayMismatchError", code: "REPLAY_MISMATCH" },
        });
        const reason = blocked.status === "blocked" ? blocked.error.message : "";
        expect(reason).toContain('the journal holds step "llm" but the program asked for step "fraud-check"');
        const run = await journal.getRun(blockedId);
        expect(run).toMatchObject({ status: "blocked", error: { code: "REPLAY_MISMATCH", message: reason } });
        expect(run?.leaseOwner).toBeUndefined();
        expect((await journal.readEvents(blockedId)).some((e) => e.type === "run_blocked")).toBe(true);
        expect(checks).toBe(0);
        expect(effects).toEqual(["lookup"]);

        // the fix: the new step behind a patch. The blocked run (history from before the patch) skips it and completes
        const v3patched = async (input: DurableAgentInput) => {
          if (await patched("fraud-check")) await fraudCheck();
          return supportAgent(2, effects).workflow()(input);
        };
        const resumed = await runDurable(blockedId, v3patched, { journal });
        expect(resumed).toMatchObject({ status: "completed", output: { text: FINAL_TEXT } });
        expect(checks).toBe(0);
        expect(effects).toEqual(["lookup", "refund"]);

        // a new run takes the new path: the marker is recorded at its position, then the check runs
        const fresh = `pb34-new-${store.name}`;
        const r = await runDurable(fresh, v3patched, {
          journal,
          input: { messages: userMessages(fresh) },
        });
        expect(r.status).toBe("waiting");
        expect(checks).toBe(1);
        expect((await journal.readSteps(fresh)).slice(0, 3).map((s) => [s.seq, s.name, s.status])).toEqual([
          [0, "patch:fraud-check", "completed"],
          [1, "fraud-check", "completed"],
          [2, "llm", "completed"],
        ]);
        // and keeps it on replay: the marker is consumed, the check is not run again
        await approve(fresh, "call_refund", { journal });
        expect(await runDurable(fresh, v3patched, { journal })).toMatchObject({ status: "completed" });
        expect(checks).toBe(1);
      });

      it("the documented patch: paused v1 runs keep prompt v1 for their whole life, new runs get v2", async () => {
        const journal = open();
        const effects: string[] = [];
        const oldRun = `pb34-keep-${store.name}`;
        const v1 = supportAgent(1, effects);
        const v2 = supportAgent(2, effects);
        expect(
          (await runDurable(oldRun, v1.workflow(), { journal, input: { messages: userMessages(oldRun) } })).status,
        ).toBe("waiting");
        const support = async (input: DurableAgentInput) => ((await patched("prompt-v2")) ? v2 : v1).workflow()(input);
        await approve(oldRun, "call_refund", { journal });
        expect(await runDurable(oldRun, support, { journal })).toMatchObject({ status: "completed" });
        const requests = requestsOf(server.requests, oldRun);
        expect(requests.map(systemOf)).toEqual([PROMPT_V1, PROMPT_V1, PROMPT_V1]);
        expect((await journal.readEvents(oldRun)).filter((e) => e.type === "step_drift")).toEqual([]);

        const newRun = `pb34-v2-${store.name}`;
        await runDurable(newRun, support, {
          journal,
          input: { messages: userMessages(newRun) },
        });
        expect(requestsOf(server.requests, newRun).map(systemOf)).toEqual([PROMPT_V2, PROMPT_V2]);
        expect((await journal.readSteps(newRun))[0]?.name).toBe("patch:prompt-v2");
      });

      it("a changed step input replays the recorded result and records step_drift once per replay", async () => {
        const journal = open();
        let runs = 0;
        const wf = (greeting: string) => async () => {
          const text = await step("greet", () => `${greeting} (run ${++runs})`, { input: { greeting } });
          await waitForSignal("go");
          return text;
        };
        expect(await runDurable("drift", wf("hello"), { journal, input: null })).toMatchObject({ status: "waiting" });
        const recorded = await journal.readSteps("drift");
        // twice under the changed program: the recorded result stands, each replay reports the drift
        expect(await runDurable("drift", wf("hi"), { journal })).toMatchObject({ status: "waiting" });
        await signal("drift", "go", true, { journal });
        expect(await runDurable("drift", wf("hi"), { journal })).toEqual({
          runId: "drift",
          status: "completed",
          output: "hello (run 1)",
        });
        expect(runs).toBe(1);
        const drift = (await journal.readEvents("drift")).filter((e) => e.type === "step_drift");
        const [from, to] = [hashInput({ greeting: "hello" }), hashInput({ greeting: "hi" })];
        expect(drift).toMatchObject([
          {
            seq: 0,
            name: "greet",
            detail: `input changed: ${from.slice(0, 12)} → ${to.slice(0, 12)}; the recorded result was used`,
          },
          { seq: 0, name: "greet" },
        ]);
        expect((await journal.readSteps("drift"))[0]).toEqual(recorded[0]);
        // the unchanged program records no drift
        const events = (await journal.readEvents("drift")).length;
        expect(await runDurable("drift", wf("hello"), { journal })).toMatchObject({ status: "completed" });
        expect((await journal.readEvents("drift")).length).toBe(events);
      });

      it("a renamed step blocks the run; reset to the last good step continues it with the new program", async () => {
        const journal = open();
        const ran: string[] = [];
        const v1 = async () => {
          await step("a", () => ran.push("a"));
          await step("b", () => ran.push("b"));
          await waitForSignal("go");
          return "v1";
        };
        const v2 = async () => {
          await step("a", () => ran.push("a"));
          await step("b-v2", () => ran.push("b-v2"));
          await waitForSignal("go");
          return "v2";
        };
        expect(await runDurable("reset", v1, { journal, input: null })).toMatchObject({ status: "waiting" });
        const blocked = await runDurable("reset", v2, { journal });
        expect(blocked).toMatchObject({ status: "blocked", error: { code: "REPLAY_MISMATCH" } });
        expect(blocked.status === "blocked" && blocked.error.message).toContain('"b-v2"');
        // blocked again on the next try with the same program: not running, never failed
        expect((await runDurable("reset", v2, { journal })).status).toBe("blocked");
        expect((await journal.getRun("reset"))?.status).toBe("blocked");

        const reset = await journal.resetRun("reset", 0, "ops@example");
        expect(reset.status).toBe("pending");
        expect(await runDurable("reset", v2, { journal })).toMatchObject({ status: "waiting" });
        await signal("reset", "go", true, { journal });
        expect(await runDurable("reset", v2, { journal })).toMatchObject({ status: "completed", output: "v2" });
        expect(ran).toEqual(["a", "b", "b-v2"]);
        expect((await journal.readSteps("reset")).map((s) => s.name)).toEqual(["a", "b-v2", "signal:go"]);
      });

      it("a blocked run resumes with the program it was recorded with, or after an operator's retry", async () => {
        const journal = open();
        const v1 = async () => {
          await step("a", () => 1);
          return waitForSignal("go");
        };
        const v2 = async () => {
          await step("a-renamed", () => 1);
          return waitForSignal("go");
        };
        await runDurable("back", v1, { journal, input: null });
        await signal("back", "go", "ok", { journal });
        expect((await runDurable("back", v2, { journal })).status).toBe("blocked");
        // pb-34 "if refused": the old program still completes it
        expect(await runDurable("back", v1, { journal })).toMatchObject({ status: "completed", output: "ok" });

        await runDurable("retry", v1, { journal, input: null });
        expect((await runDurable("retry", v2, { journal })).status).toBe("blocked");
        expect((await journal.retryRun("retry", "ops@example")).status).toBe("pending");
        // still the wrong program: blocked again (the reason is kept), the journal unchanged
        const steps = await journal.readSteps("retry");
        expect((await runDurable("retry", v2, { journal })).status).toBe("blocked");
        expect(await journal.readSteps("retry")).toEqual(steps);
        await signal("retry", "go", "late", { journal });
        expect(await runDurable("retry", v1, { journal })).toMatchObject({ status: "completed", output: "late" });
      });

      it("patched(): true and recorded when live, true when its marker replays, false over older history; deprecatePatch consumes only its marker", async () => {
        const journal = open();
        const seen: string[] = [];
        const before = async () => {
          await step("one", () => 1);
          await waitForSignal("go");
          return step("two", () => 2);
        };
        // a run recorded before the patch existed, paused at the signal
        await runDurable("old", before, { journal, input: null });
        const withPatch = async () => {
          await step("one", () => 1);
          seen.push(`p1:${await patched("p1")}`);
          await waitForSignal("go");
          seen.push(`p2:${await patched("p2")}`);
          return step("two", () => 2);
        };
        await signal("old", "go", true, { journal });
        expect(await runDurable("old", withPatch, { journal })).toMatchObject({ status: "completed", output: 2 });
        // p1 sat over history from before the patch (false, nothing recorded); p2 was reached live (true, recorded)
        expect(seen).toEqual(["p1:false", "p2:true"]);
        expect((await journal.readSteps("old")).map((s) => s.name)).toEqual(["one", "signal:go", "patch:p2", "two"]);

        seen.length = 0;
        await runDurable("new", withPatch, { journal, input: null });
        await signal("new", "go", true, { journal });
        await runDurable("new", withPatch, { journal });
        expect(seen).toEqual(["p1:true", "p1:true", "p2:true"]);
        const newSteps = await journal.readSteps("new");
        expect(newSteps.map((s) => s.name)).toEqual(["one", "patch:p1", "signal:go", "patch:p2", "two"]);

        // another patch id at a marker's position is older history: false, nothing consumed
        const otherId = async () => {
          await step("one", () => 1);
          seen.push(`p9:${await patched("p9")}`);
          deprecatePatch("p1");
          await waitForSignal("go");
          deprecatePatch("p2");
          return step("two", () => 2);
        };
        seen.length = 0;
        await journal.resetRun("new", 4, "test"); // replay the whole journal again
        expect(await runDurable("new", otherId, { journal })).toMatchObject({ status: "completed", output: 2 });
        expect(seen).toEqual(["p9:false"]);
        expect(await journal.readSteps("new")).toEqual(newSteps);

        // deprecatePatch on a new run records nothing
        const deprecated = async () => {
          await step("one", () => 1);
          deprecatePatch("p1");
          return step("two", () => 2);
        };
        expect(await runDurable("fresh", deprecated, { journal, input: null })).toMatchObject({ status: "completed" });
        expect((await journal.readSteps("fresh")).map((s) => s.name)).toEqual(["one", "two"]);

        // patched() is a durable call: not inside a step body
        const nested = await runDurable("nested", () => step("outer", () => patched("x") as never), {
          journal,
          input: null,
        });
        expect(nested).toMatchObject({ status: "failed", error: { message: expect.stringContaining("cannot nest") } });
      });

      it("timers use the store's clock: a worker whose Date.now() runs 2 minutes ahead neither sets nor fires a timer early", async () => {
        const journal = open();
        const wf = async () => {
          await sleep("nap", 60_000);
          return "woke";
        };
        const real = Date.now.bind(Date);
        const skewed = vi.spyOn(Date, "now").mockImplementation(() => real() + 120_000);
        try {
          const r = await runDurable("timer", wf, { journal, input: null, inlineSleepMaxMs: 100 });
          expect(r).toMatchObject({ status: "waiting", waitingFor: { kind: "timer", name: "nap" } });
          const storeNow = await journal.now();
          const wakeAt = r.status === "waiting" && r.waitingFor.kind === "timer" ? r.waitingFor.wakeAt : 0;
          expect(Math.abs(wakeAt - (storeNow + 60_000))).toBeLessThan(5000);
          expect((await journal.getRun("timer"))?.wakeAt).toBe(wakeAt);
          // by the skewed clock the timer is due; by the store's it is not: still waiting, same wakeAt
          expect(Date.now()).toBeGreaterThan(wakeAt);
          expect(await runDurable("timer", wf, { journal, inlineSleepMaxMs: 100 })).toMatchObject({
            status: "waiting",
            waitingFor: { wakeAt },
          });
        } finally {
          skewed.mockRestore();
        }
      });
    },
  );
}
