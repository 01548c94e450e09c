/**
 * DurableAgent repairs its history with BaseAgent's rules (`agent/repair.ts`)
 * before every `llm` step: a dangling tool call or an orphaned tool result in
 * the input never reaches the provider (the local model server validates each
 * request like OpenAI and would answer 400), the run completes with one model
 * request, and a replay builds the same request (no new request, no drift).
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { type ModelMessage, tool } from "ai";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { z } from "zod";
import { INTERRUPTED_RESULT } from "../../src/agent/repair.js";
import { DurableAgent, repairModelMessages } from "../../src/durable/agent.js";
import { SqliteJournal } from "../../src/durable/journal-sqlite.js";
import { runDurable } from "../../src/durable/run.js";
import { approve } from "../../src/durable/signals.js";
import { MemoryRunStream } from "../../src/durable/stream.js";
import { type ModelServer, startModelServer, validateOpenAI } from "../../src/testing/model-server.js";

let dir: string;
let journal: SqliteJournal;
let server: ModelServer | undefined;
beforeEach(() => {
  dir = mkdtempSync(path.join(tmpdir(), "dumplings-repair-"));
  journal = new SqliteJournal({ path: path.join(dir, "j.db") });
});
afterEach(async () => {
  await server?.close();
  server = undefined;
  await journal.close();
  rmSync(dir, { recursive: true, force: true });
});

const call = (toolCallId: string, toolName = "lookup", input: unknown = { id: 7 }) => ({
  type: "tool-call" as const,
  toolCallId,
  toolName,
  input,
});
const result = (toolCallId: string, toolName = "lookup", value: unknown = { total: 42 }) => ({
  type: "tool-result" as const,
  toolCallId,
  toolName,
  output: { type: "json" as const, value: value as never },
});
const interrupted = (toolCallId: string, toolName = "lookup") => ({
  type: "tool-result",
  toolCallId,
  toolName,
  output: { type: "error-text", value: INTERRUPTED_RESULT },
  providerOptions: { dumplings: { interrupted: true } },
});

function makeAgent(url: string, options: { approval?: boolean } = {}) {
  const provider = createOpenAICompatible({ name: "local", baseURL: url, apiKey: "test-key" });
  return new DurableAgent({
    model: provider("scripted-model"),
    llmRetry: { maxAttempts: 3, backoffMs: 1 },
    tools: {
      lookup: tool({
        description: "Look up an order",
        inputSchema: z.object({ id: z.number() }),
        execute: async ({ id }) => ({ id, total: 42 }),
      }),
      refund: tool({
        description: "Refund",
        inputSchema: z.object({ amount: z.number() }),
        needsApproval: options.approval === true,
        execute: async ({ amount }) => ({ refunded: amount }),
      }),
    },
  });
}

type WireMessage = { role: string; content?: unknown; tool_call_id?: string; tool_calls?: { id: string }[] };
const wire = (i: number) => (server?.requests[i]?.body.messages ?? []) as WireMessage[];

describe("DurableAgent repairs the history before every llm step", () => {
  it("a dangling assistant tool call in the input: the run completes with one model request", async () => {
    server = await startModelServer({ script: [{ text: "Order 7 totals 42." }] });
    const input: ModelMessage[] = [
      { role: "user", content: "What does order 7 total?" },
      { role: "assistant", content: [{ type: "text", text: "Looking it up." }, call("call_dangling")] },
    ];
    // what the provider would say to the history as it stands
    expect(
      validateOpenAI({
        messages: [
          { role: "user", content: "What does order 7 total?" },
          {
            role: "assistant",
            content: "Looking it up.",
            tool_calls: [{ id: "call_dangling", type: "function", function: { name: "lookup", arguments: "{}" } }],
          },
        ],
      }),
    ).toMatch(/without tool messages: call_dangling/);

    const stream = new MemoryRunStream();
    const r = await runDurable("rep-1", makeAgent(server.url).workflow(), {
      journal,
      stream,
      input: { messages: input },
    });
    expect(r).toMatchObject({ status: "completed", output: { text: "Order 7 totals 42.", llmSteps: 1 } });
    expect(server.count).toBe(1);
    expect(server.requests[0]?.status).toBe(200);
    expect(wire(0).map((m) => [m.role, m.tool_call_id ?? null])).toEqual([
      ["user", null],
      ["assistant", null],
      ["tool", "call_dangling"],
    ]);
    expect(wire(0)[2]?.content).toBe(INTERRUPTED_RESULT);
    // the conversation the run returns holds the repaired history
    const out = (r as unknown as { output: { messages: ModelMessage[] } }).output.messages;
    expect(out.map((m) => m.role)).toEqual(["user", "assistant", "tool", "assistant"]);
    expect(out[2]).toEqual({ role: "tool", content: [interrupted("call_dangling")] });
    // the repair is reported on the side channel, by the llm step that used it
    const repairs = (await stream.read("rep-1")).filter((e) => (e.data as { type: string }).type === "repair");
    expect(repairs).toHaveLength(1);
    expect(repairs[0]).toMatchObject({
      seq: 0,
      attempt: 1,
      data: { actions: [{ kind: "interrupted-result-added", index: 1, toolCallId: "call_dangling" }] },
    });
  });

  it("an orphaned tool result in the input never reaches the provider", async () => {
    server = await startModelServer({ script: [{ text: "Hello again." }] });
    const input: ModelMessage[] = [
      { role: "user", content: "hi" },
      { role: "tool", content: [result("call_gone")] },
      { role: "user", content: "are you there?" },
    ];
    const r = await runDurable("rep-2", makeAgent(server.url).workflow(), {
      journal,
      input: { messages: input },
    });
    expect(r).toMatchObject({ status: "completed", output: { text: "Hello again." } });
    expect(server.count).toBe(1);
    expect(server.requests[0]?.status).toBe(200);
    expect(wire(0).map((m) => m.role)).toEqual(["user", "user"]);
  });

  it("the repair is deterministic: a replay after a pause sends nothing again and records no drift", async () => {
    server = await startModelServer({
      script: [{ toolCalls: [{ id: "call_refund", name: "refund", arguments: { amount: 5 } }] }, { text: "Done." }],
    });
    const input: ModelMessage[] = [
      { role: "user", content: "refund 5" },
      { role: "assistant", content: [call("call_a"), call("call_b")] },
      { role: "tool", content: [result("call_a"), result("call_zombie")] },
    ];
    const first = await runDurable("rep-3", makeAgent(server.url, { approval: true }).workflow(), {
      journal,
      input: { messages: input },
    });
    expect(first).toMatchObject({ status: "waiting", waitingFor: { name: "approval:call_refund" } });
    expect(server.count).toBe(1);
    expect(wire(0).map((m) => [m.role, m.tool_call_id ?? null])).toEqual([
      ["user", null],
      ["assistant", null],
      ["tool", "call_a"],
      ["tool", "call_b"],
    ]);
    await approve("rep-3", "call_refund", { journal });
    const done = await runDurable("rep-3", makeAgent(server.url, { approval: true }).workflow(), { journal });
    expect(done).toMatchObject({ status: "completed", output: { text: "Done.", llmSteps: 2 } });
    expect(server.count).toBe(2); // the first llm step was replayed from the journal
    expect(server.requests.every((q) => q.status === 200)).toBe(true);
    const events = await journal.readEvents("rep-3");
    expect(events.filter((e) => String(e.type) === "step_drift")).toEqual([]);
    expect(events.filter((e) => e.type === "step_started" && e.name === "llm").map((e) => e.seq)).toEqual([0, 3]);
  });
});

describe("repairModelMessages", () => {
  it("answers an unanswered call after the call's other results", () => {
    const messages: ModelMessage[] = [
      { role: "user", content: "go" },
      { role: "assistant", content: [call("a"), call("b")] },
      { role: "tool", content: [result("a")] },
      { role: "user", content: "next" },
    ];
    const frozen = JSON.stringify(messages);
    const { messages: out, actions } = repairModelMessages(messages);
    expect(JSON.stringify(messages)).toBe(frozen); // the input is not modified
    expect(actions).toEqual([{ kind: "interrupted-result-added", index: 1, toolCallId: "b" }]);
    expect(out).toEqual([
      messages[0],
      messages[1],
      { role: "tool", content: [result("a"), interrupted("b")] },
      messages[3],
    ]);
    expect(out[0]).toBe(messages[0]); // untouched messages are the same objects
  });

  it("a result that arrives after another message is an orphan; the call is answered before that message", () => {
    const messages: ModelMessage[] = [
      { role: "assistant", content: [call("a")] },
      { role: "user", content: "hurry" },
      { role: "tool", content: [result("a")] },
    ];
    const { messages: out, actions } = repairModelMessages(messages);
    expect(actions.map((a) => [a.kind, a.index])).toEqual([
      ["interrupted-result-added", 0],
      ["orphan-result-removed", 2],
    ]);
    expect(out).toEqual([messages[0], { role: "tool", content: [interrupted("a")] }, messages[1]]);
  });

  it("removes a second result for one call and an empty assistant message, keeps provider-executed calls", () => {
    const messages: ModelMessage[] = [
      { role: "user", content: "go" },
      { role: "assistant", content: [{ type: "text", text: "  " }] },
      { role: "assistant", content: [call("a")] },
      { role: "tool", content: [result("a"), result("a", "lookup", { total: 0 })] },
      {
        role: "assistant",
        content: [
          { type: "tool-call", toolCallId: "ws", toolName: "web_search", input: {}, providerExecuted: true },
          { type: "reasoning", text: "thinking" },
        ],
      },
    ];
    const { messages: out, actions } = repairModelMessages(messages);
    expect(actions.map((a) => [a.kind, a.index])).toEqual([
      ["empty-assistant-removed", 1],
      ["orphan-result-removed", 3],
    ]);
    expect(out).toEqual([messages[0], messages[2], { role: "tool", content: [result("a")] }, messages[4]]);
  });

  it("is idempotent and changes nothing in a valid history", () => {
    const broken: ModelMessage[] = [
      { role: "assistant", content: [call("a")] },
      { role: "tool", content: [result("zz")] },
    ];
    const once = repairModelMessages(broken);
    expect(once.actions.length).toBeGreaterThan(0);
    const twice = repairModelMessages(once.messages);
    expect(twice.actions).toEqual([]);
    expect(twice.messages).toEqual(once.messages);
  });
});
