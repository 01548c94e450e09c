/**
 * Approvals recorded once (pb-33): a tool's `needsApproval` function runs once
 * per tool call, as a journaled step whose decision every replay reads; a
 * policy change or a policy outage between the pause and the resume changes
 * nothing for the paused call; a throwing policy is retried as a step, and
 * one that keeps failing fails the run without running the tool. On the
 * SQLite, PostgreSQL and Redis journals, pause and resume in separate
 * `runDurable` calls with separate agent instances.
 */
import { randomUUID } from "node:crypto";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { type ModelMessage, tool } from "ai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { DurableAgent } from "../../src/durable/agent.js";
import { runDurable } from "../../src/durable/run.js";
import { approve } from "../../src/durable/signals.js";
import { type ModelServer, type RecordedRequest, startModelServer } from "../../src/testing/model-server.js";
import { journalStores, type OpenedStore } from "../fixtures/durable/stores.js";

const stores = await journalStores();
const FINAL = "Refunded 50.";
let server: ModelServer;
const opened: OpenedStore[] = [];

const runOf = (r: RecordedRequest) => /\[([^\]"]+)\] refund/.exec(JSON.stringify(r.body.messages))?.[1] ?? "";
const requestsOf = (runId: string) => server.requests.filter((r) => runOf(r) === runId).length;

beforeAll(async () => {
  server = await startModelServer({
    handler: (request) => {
      const round = ((request.body.messages ?? []) as { role: string }[]).filter((m) => m.role === "assistant").length;
      return round === 0
        ? { toolCalls: [{ id: "call_R33", name: "refund", arguments: { amount: 50 } }] }
        : { text: FINAL };
    },
  });
});
afterAll(async () => {
  for (const o of opened) await o.destroy();
  await server?.close();
});

/** The approval policy service: amount > threshold needs a human; it counts its calls and can be down. */
interface Policy {
  threshold: number;
  calls: number;
  /** Throw on these call numbers (1-based); "all" = the service is down. */
  failOn: number[] | "all";
}

function makeAgent(policy: Policy, refunds: string[]) {
  const provider = createOpenAICompatible({ name: "local", baseURL: server.url, apiKey: "test-key" });
  return new DurableAgent({
    model: provider("scripted-model"),
    approvalPolicyRetry: { maxAttempts: 2, backoffMs: 1 },
    tools: {
      refund: tool({
        description: "Refund an amount",
        inputSchema: z.object({ amount: z.number() }),
        needsApproval: async ({ amount }) => {
          policy.calls++;
          if (policy.failOn === "all" || policy.failOn.includes(policy.calls)) throw new Error("policy service down");
          return amount > policy.threshold;
        },
        execute: async ({ amount }, { toolCallId }) => {
          refunds.push(toolCallId);
          return { refunded: amount };
        },
      }),
    },
  });
}

const input = (runId: string) => ({ messages: [{ role: "user", content: `[${runId}] refund 50` }] as ModelMessage[] });

for (const store of stores) {
  describe.skipIf(!!store.skip)(
    `approvals on the ${store.name} journal${store.skip ? ` (skipped: ${store.skip})` : ""}`,
    () => {
      const open = () => {
        const o = store.open();
        opened.push(o);
        return o.journal;
      };

      it("needsApproval runs once across pause and resume; a policy changed meanwhile changes nothing", async () => {
        const journal = open();
        const runId = `pb33-${randomUUID().slice(0, 8)}`;
        const policy: Policy = { threshold: 10, calls: 0, failOn: [] };
        const refunds: string[] = [];

        const paused = await runDurable(runId, makeAgent(policy, refunds).workflow(), {
          journal,
          input: input(runId) as never,
        });
        expect(paused).toMatchObject({ status: "waiting", waitingFor: { kind: "signal", name: "approval:call_R33" } });
        expect(policy.calls).toBe(1);
        expect(refunds).toEqual([]);
        const recorded = await journal.readSteps(runId);
        expect(recorded.map((s) => [s.name, s.status])).toEqual([
          ["llm", "completed"],
          ["needs-approval:refund", "completed"],
          ["signal:approval:call_R33", "waiting"],
        ]);
        expect(recorded[1]?.output).toEqual({ needsApproval: true });

        await approve(runId, "call_R33", { journal });
        policy.threshold = 100; // the policy would now say "no approval needed"

        // a new agent instance, as after a restart
        const done = await runDurable(runId, makeAgent(policy, refunds).workflow(), { journal });
        expect(done).toMatchObject({ status: "completed", output: { text: FINAL, llmSteps: 2 } });
        expect(policy.calls).toBe(1);
        expect(refunds).toEqual(["call_R33"]);
        expect(requestsOf(runId)).toBe(2);
        expect((await journal.readSteps(runId)).map((s) => s.name)).toEqual([
          "llm",
          "needs-approval:refund",
          "signal:approval:call_R33",
          "tool:refund",
          "llm",
        ]);
        expect((await journal.readEvents(runId)).filter((e) => String(e.type) === "step_drift")).toEqual([]);

        // a finished run replays nothing
        await runDurable(runId, makeAgent(policy, refunds).workflow(), { journal });
        expect(policy.calls).toBe(1);
        expect(refunds).toEqual(["call_R33"]);
      });

      it("a policy that throws on resume after the human approved still completes the run", async () => {
        const journal = open();
        const runId = `pb33-down-${randomUUID().slice(0, 8)}`;
        const policy: Policy = { threshold: 10, calls: 0, failOn: [] };
        const refunds: string[] = [];
        expect(
          (await runDurable(runId, makeAgent(policy, refunds).workflow(), { journal, input: input(runId) as never }))
            .status,
        ).toBe("waiting");
        await approve(runId, "call_R33", { journal });
        policy.failOn = "all"; // the policy service is down from now on

        const done = await runDurable(runId, makeAgent(policy, refunds).workflow(), { journal });
        expect(done).toMatchObject({ status: "completed", output: { text: FINAL } });
        expect(policy.calls).toBe(1);
        expect(refunds).toEqual(["call_R33"]);
      });

      it("a throwing policy is retried as a step; one that keeps throwing fails the run and runs no tool", async () => {
        const journal = open();
        // fails once, then answers: the second attempt of the step decides
        const flaky = `pb33-flaky-${randomUUID().slice(0, 8)}`;
        const policy: Policy = { threshold: 10, calls: 0, failOn: [1] };
        const refunds: string[] = [];
        const paused = await runDurable(flaky, makeAgent(policy, refunds).workflow(), {
          journal,
          input: input(flaky) as never,
        });
        expect(paused.status).toBe("waiting");
        expect(policy.calls).toBe(2);
        const started = (await journal.readEvents(flaky)).filter((e) => e.type === "step_started" && e.seq === 1);
        expect(started.map((e) => [e.name, e.attempt])).toEqual([
          ["needs-approval:refund", 1],
          ["needs-approval:refund", 2],
        ]);

        // down for good: the step fails after its attempts, the run fails, the tool never runs
        const down = `pb33-fail-${randomUUID().slice(0, 8)}`;
        const broken: Policy = { threshold: 10, calls: 0, failOn: "all" };
        const failed = await runDurable(down, makeAgent(broken, refunds).workflow(), {
          journal,
          input: input(down) as never,
        });
        expect(failed.status).toBe("failed");
        if (failed.status === "failed")
          expect(failed.error.message).toMatch(/needs-approval:refund.*policy service down/);
        expect(broken.calls).toBe(2);
        expect(refunds).toEqual([]);
        expect((await journal.readSteps(down)).map((s) => [s.name, s.status])).toEqual([
          ["llm", "completed"],
          ["needs-approval:refund", "failed"],
        ]);
      });

      it("a call the policy lets through runs without waiting, and the decision is recorded", async () => {
        const journal = open();
        const runId = `pb33-small-${randomUUID().slice(0, 8)}`;
        const policy: Policy = { threshold: 1000, calls: 0, failOn: [] };
        const refunds: string[] = [];
        const done = await runDurable(runId, makeAgent(policy, refunds).workflow(), {
          journal,
          input: input(runId) as never,
        });
        expect(done).toMatchObject({ status: "completed", output: { text: FINAL } });
        expect(policy.calls).toBe(1);
        expect(refunds).toEqual(["call_R33"]);
        const steps = await journal.readSteps(runId);
        expect(steps.map((s) => s.name)).toEqual(["llm", "needs-approval:refund", "tool:refund", "llm"]);
        expect(steps[1]?.output).toEqual({ needsApproval: false });
      });
    },
  );
}
