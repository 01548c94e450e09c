import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { AnthropicAgent } from "../../src/agent/anthropic-agent.js";
import { BaseAgent, type ToolHookEvent } from "../../src/agent/base-agent.js";
import { StreamInterruptedError } from "../../src/agent/conversation.js";
import { INTERRUPTED_RESULT } from "../../src/agent/repair.js";
import { registerGlobalTool, ToolRegistrationError, unregisterGlobalTool } from "../../src/agent/tools.js";
import { SQLiteBackend } from "../../src/backends/sqlite.js";
import type { Message } from "../../src/core/messages.js";
import { loadState } from "../../src/persistence/api.js";
import { configure } from "../../src/persistence/config.js";
import { type ModelServer, startModelServer } from "../../src/testing/model-server.js";

const dir = mkdtempSync(path.join(tmpdir(), "dumplings-agent-"));
let server: ModelServer;
beforeAll(async () => {
  server = await startModelServer({ script: [] });
});
afterAll(async () => {
  await server.close();
  rmSync(dir, { recursive: true, force: true });
});
afterEach(() => configure({ enabled: false }));

const openai = () => new BaseAgent({ name: "a", apiProvider: server.url, modelName: "m", apiKeyEnv: "" });
const anthropic = () =>
  new AnthropicAgent({ name: "c", apiProvider: `${server.url}/messages`, modelName: "m", apiKeyEnv: "" });

describe("BaseAgent runtime API", () => {
  it("uses process-wide tools, lets an agent's own tool override one, and refuses duplicates", async () => {
    registerGlobalTool({ name: "whoami", execute: () => "global" }, { replace: true });
    try {
      const plain = openai();
      const custom = openai().registerTool({ name: "whoami", execute: () => "own" });
      expect(() => custom.registerTool({ name: "whoami", execute: () => "again" })).toThrow(ToolRegistrationError);
      expect(() => custom.registerTool({ name: "bad name!", execute: () => 1 })).toThrow(ToolRegistrationError);
      server.push({ toolCalls: [{ id: "w1", name: "whoami" }] }, { text: "ok" });
      await plain.conversationWithTool("who?", { maxRetries: 0 });
      server.push({ toolCalls: [{ id: "w2", name: "whoami" }] }, { text: "ok" });
      await custom.conversationWithTool("who?", { maxRetries: 0 });
      expect(plain.history[2]).toMatchObject({ content: "global" });
      expect(custom.history[2]).toMatchObject({ content: "own" });
    } finally {
      unregisterGlobalTool("whoami");
    }
  });

  it("calls hooks registered with registerToolHook, with the turn's task id", async () => {
    const agent = openai().registerTool({
      name: "double",
      parameters: z.object({ n: z.number() }),
      execute: ({ n }: { n: number }) => n * 2,
    });
    const events: ToolHookEvent[] = [];
    agent.registerToolHook((e) => {
      events.push(e);
    });
    server.push({ toolCalls: [{ id: "d1", name: "double", arguments: { n: 21 } }] }, { text: "42" });
    const r = await agent.conversationWithTool("double 21", { maxRetries: 0 });
    expect(events.map((e) => [e.type, e.result, e.taskId])).toEqual([
      ["before", undefined, r.taskId],
      ["after", 42, r.taskId],
    ]);
    expect(agent.currentTaskId).toBe(r.taskId);
  });

  it("streams through conversationStream's async iterator", async () => {
    const agent = openai();
    server.push({ text: "one two three", chunkSize: 2 });
    const { tokens, result } = agent.conversationStream("count");
    const parts: string[] = [];
    for await (const t of tokens) parts.push(t);
    expect(parts.length).toBeGreaterThan(2);
    expect(parts.join("")).toBe("one two three");
    expect((await result).text).toBe("one two three");
  });

  it("PB-05 (Anthropic): an aborted stream keeps the seen text as a partial, non-empty message", async () => {
    const agent = anthropic().registerTool({ name: "weather", execute: () => "sunny" });
    server.push(
      {
        text: "Checking both",
        toolCalls: [{ id: "toolu_W1", name: "weather", arguments: { city: "Paris" } }],
        chunkSize: 5,
        dropAfterEvents: 7,
      },
      { text: "Paris is sunny." },
    );
    const err = await agent
      .conversationWithTool("Weather in Paris and Rome?", { stream: true, maxRetries: 0 })
      .catch((e) => e);
    expect(err).toBeInstanceOf(StreamInterruptedError);
    expect(agent.history[1]).toEqual({
      role: "assistant",
      content: [{ type: "text", text: "Checking both" }],
      partial: true,
    });
    expect(JSON.stringify(agent.history)).not.toContain("toolu_W1");
    const before = server.count;
    const next = await agent.conversationWithTool("Never mind, just Paris", { maxRetries: 0 });
    expect(next.text).toBe("Paris is sunny.");
    expect(server.requests[before]?.status).toBe(200);
  });
});

describe("resumeTurn", () => {
  it("re-runs an Anthropic tool_use left without result (repair: 'rerun') and finishes the turn", async () => {
    let runs = 0;
    const agent = new AnthropicAgent({
      name: "r",
      apiProvider: server.url,
      modelName: "m",
      apiKeyEnv: "",
      history: [
        { role: "user", content: [{ type: "text", text: "ls please" }] },
        { role: "assistant", content: [{ type: "tool_use", id: "toolu_R1", name: "ls", input: { dir: "/tmp" } }] },
      ],
    }).registerTool({
      name: "ls",
      execute: ({ dir }: { dir: string }) => {
        runs++;
        return `a.txt b.txt in ${dir}`;
      },
    });
    server.push({ text: "Two files." });
    const before = server.count;
    const r = await agent.resumeTurn({ repair: "rerun", maxRetries: 0 });
    expect(r).toMatchObject({ text: "Two files.", toolCalls: 1, rounds: 1 });
    expect(runs).toBe(1);
    expect(agent.history[2]).toEqual({
      role: "user",
      content: [{ type: "tool_result", tool_use_id: "toolu_R1", content: "a.txt b.txt in /tmp" }],
    });
    expect(server.requests[before]?.status).toBe(200);
  });
});

describe("PB-01 end to end (Anthropic, SQLite)", () => {
  it("surfaces the unanswered call on load, repairs it once, persists the repair, and loading twice adds nothing", async () => {
    const backend = new SQLiteBackend({ dbPath: path.join(dir, "pb01.db") });
    const history: Message[] = [
      { role: "user", content: [{ type: "text", text: "List the files in /tmp" }] },
      {
        role: "assistant",
        content: [
          { type: "text", text: "Running ls." },
          { type: "tool_use", id: "toolu_A1", name: "bash", input: { cmd: "ls /tmp" } },
        ],
      },
    ];
    const crashed = new AnthropicAgent({
      name: "conv-1",
      apiProvider: server.url,
      modelName: "m",
      apiKeyEnv: "",
      history,
    });
    await crashed.saveState("conv-1", { backend });

    const loaded = await loadState<AnthropicAgent>("conv-1", { backend });
    expect(loaded.pendingToolCalls().map((p) => p.id)).toEqual(["toolu_A1"]);
    configure({ enabled: true, backend });
    server.push({ text: "Hello! The listing was interrupted." });
    const before = server.count;
    await loaded.conversationWithTool("hello?", { maxRetries: 0 });
    const sent = server.requests[before]?.body.messages as {
      role: string;
      content: { type: string; tool_use_id?: string }[];
    }[];
    expect(server.requests[before]?.status).toBe(200);
    expect(sent[2]?.content.map((b) => b.type)).toEqual(["tool_result", "text"]); // merged on the wire, result first
    expect(sent[2]?.content[0]?.tool_use_id).toBe("toolu_A1");

    for (let i = 0; i < 2; i++) {
      const again = await loadState<AnthropicAgent>("conv-1", { backend });
      expect(again.history.slice(0, 2)).toEqual(history);
      const synthetic = JSON.stringify(again.history).split(INTERRUPTED_RESULT).length - 1;
      expect(synthetic).toBe(1);
      expect(again.pendingToolCalls()).toEqual([]);
    }
    await backend.close();
  });
});
