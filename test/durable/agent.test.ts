/**
 * DurableAgent over the AI SDK against the real local model server (OpenAI
 * chat-completions over SSE): llm and tool steps are journaled, approvals wait
 * durably, a rejection reaches the model as a refusal, tokens go to the side
 * channel, and a replay makes no model request for a recorded step.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { type ModelMessage, tool } from "ai";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { z } from "zod";
import { DurableAgent, durableTool } from "../../src/durable/agent.js";
import { ApprovalConflictError, SignalConflictError } from "../../src/durable/errors.js";
import { SqliteJournal } from "../../src/durable/journal-sqlite.js";
import { runDurable } from "../../src/durable/run.js";
import { approve, reject } from "../../src/durable/signals.js";
import { MemoryRunStream } from "../../src/durable/stream.js";
import { type ModelServer, startModelServer } from "../../src/testing/model-server.js";

let dir: string;
let journal: SqliteJournal;
let server: ModelServer;
beforeEach(() => {
  dir = mkdtempSync(path.join(tmpdir(), "dumplings-agent-"));
  journal = new SqliteJournal({ path: path.join(dir, "j.db") });
});
afterEach(async () => {
  await server?.close();
  await journal.close();
  rmSync(dir, { recursive: true, force: true });
});

function makeAgent(url: string, calls: Map<string, number>) {
  const provider = createOpenAICompatible({ name: "local", baseURL: url, apiKey: "test-key" });
  const bump = (k: string) => calls.set(k, (calls.get(k) ?? 0) + 1);
  return new DurableAgent({
    model: provider("scripted-model"),
    system: "You are a billing assistant.",
    tools: {
      lookup: tool({
        description: "Look up an order",
        inputSchema: z.object({ id: z.number() }),
        execute: async ({ id }) => {
          bump("lookup");
          return { id, total: 42 };
        },
      }),
      refund: tool({
        description: "Refund an order",
        inputSchema: z.object({ amount: z.number() }),
        needsApproval: true,
        execute: async ({ amount }) => {
          bump("refund");
          return { refunded: amount };
        },
      }),
    },
  });
}

const userMessages: ModelMessage[] = [{ role: "user", content: "Please refund order 7" }];

describe("DurableAgent", () => {
  it("journals llm and tool steps, waits for approval, resumes after approve, and never repeats a model request", async () => {
    server = await startModelServer({
      script: [
        { toolCalls: [{ id: "call_lookup", name: "lookup", arguments: { id: 7 } }] },
        { toolCalls: [{ id: "call_refund", name: "refund", arguments: { amount: 42 } }] },
        { text: "Refunded 42 for order 7." },
      ],
    });
    const calls = new Map<string, number>();
    const agent = makeAgent(server.url, calls);
    const stream = new MemoryRunStream();
    const first = await runDurable("a1", agent.workflow(), {
      journal,
      stream,
      input: { messages: userMessages },
    });
    expect(first).toEqual({
      runId: "a1",
      status: "waiting",
      waitingFor: { kind: "signal", name: "approval:call_refund" },
    });
    expect(server.count).toBe(2);
    expect(Object.fromEntries(calls)).toEqual({ lookup: 1 });

    await approve("a1", "call_refund", { journal });
    await expect(approve("a1", "call_refund", { journal })).rejects.toBeInstanceOf(SignalConflictError);
    // the loser of a race learns what the first decision was
    const late = reject("a1", "call_refund", { journal, reason: "no" });
    await expect(late).rejects.toBeInstanceOf(ApprovalConflictError);
    await expect(late).rejects.toMatchObject({ code: "SIGNAL_CONFLICT", decision: { approved: true } });
    await expect(late).rejects.toThrow(/tool call "call_refund" of run "a1" was already approved at /);
    const done = await runDurable("a1", makeAgent(server.url, calls).workflow(), { journal, stream });
    expect(done.status).toBe("completed");
    if (done.status !== "completed") return;
    const out = done.output as { text: string; llmSteps: number; messages: ModelMessage[] };
    expect(out.text).toBe("Refunded 42 for order 7.");
    expect(out.llmSteps).toBe(3);
    expect(out.messages.map((m) => m.role)).toEqual(["user", "assistant", "tool", "assistant", "tool", "assistant"]);
    expect(server.count).toBe(3); // one request per completed llm step: the replay made none
    expect(Object.fromEntries(calls)).toEqual({ lookup: 1, refund: 1 });
    const steps = await journal.readSteps("a1");
    expect(steps.map((s) => `${s.name}:${s.status}`)).toEqual([
      "llm:completed",
      "tool:lookup:completed",
      "llm:completed",
      "signal:approval:call_refund:completed",
      "tool:refund:completed",
      "llm:completed",
    ]);
    // the third request carried both tool results, in a history the provider accepts
    const body = server.requests[2]?.body as { messages: { role: string; content: unknown }[] };
    expect(body.messages.filter((m) => m.role === "tool").map((m) => m.content)).toEqual([
      JSON.stringify({ id: 7, total: 42 }),
      JSON.stringify({ refunded: 42 }),
    ]);
    // tokens went to the side channel, not to the journal
    const tokens = (await stream.read("a1"))
      .map((e) => e.data as { type: string; text?: string })
      .filter((e) => e.type === "token")
      .map((e) => e.text)
      .join("");
    expect(tokens).toBe("Refunded 42 for order 7.");
  });

  it("a rejected tool call is not run and the model receives the refusal", async () => {
    server = await startModelServer({
      script: [
        { toolCalls: [{ id: "call_r", name: "refund", arguments: { amount: 1000 } }] },
        { text: "I could not refund that." },
      ],
    });
    const calls = new Map<string, number>();
    const agent = makeAgent(server.url, calls);
    expect((await runDurable("a2", agent.workflow(), { journal, input: { messages: userMessages } })).status).toBe(
      "waiting",
    );
    await reject("a2", "call_r", { journal, reason: "amount over the limit" });
    const done = await runDurable("a2", agent.workflow(), { journal });
    expect(done.status).toBe("completed");
    expect(calls.get("refund")).toBeUndefined();
    const body = server.requests[1]?.body as { messages: { role: string; content: unknown }[] };
    const toolMsg = body.messages.find((m) => m.role === "tool");
    expect(String(toolMsg?.content)).toContain("amount over the limit");
  });

  it("retries a failed model request as a recorded attempt of the same llm step", async () => {
    server = await startModelServer({
      script: [{ error: { status: 500, message: "overloaded" } }, { text: "hello" }],
    });
    const provider = createOpenAICompatible({ name: "local", baseURL: server.url, apiKey: "k" });
    const agent = new DurableAgent({ model: provider("m"), llmRetry: { maxAttempts: 2, backoffMs: 1 } });
    const r = await runDurable("a3", agent.workflow(), { journal, input: { messages: userMessages } });
    expect(r).toMatchObject({ status: "completed", output: { text: "hello", llmSteps: 1 } });
    expect(server.count).toBe(2);
    const started = (await journal.readEvents("a3")).filter((e) => e.type === "step_started");
    expect(started.map((e) => e.attempt)).toEqual([1, 2]);
  });

  it("durableTool makes a tool body a journaled step in a user's own loop", async () => {
    let runs = 0;
    const t = durableTool(
      tool({
        description: "add",
        inputSchema: z.object({ a: z.number(), b: z.number() }),
        execute: async ({ a, b }) => {
          runs++;
          return { sum: a + b };
        },
      }),
      { name: "add" },
    );
    const wf = async () => {
      const execute = t.execute as (i: unknown, o: unknown) => Promise<unknown>;
      return (await execute({ a: 1, b: 2 }, { toolCallId: "c1", messages: [] })) as never;
    };
    expect(await runDurable("a4", wf, { journal, input: null })).toMatchObject({ output: { sum: 3 } });
    expect((await journal.readSteps("a4"))[0]).toMatchObject({ name: "tool:add", output: { sum: 3 } });
    expect(runs).toBe(1);
  });
});
