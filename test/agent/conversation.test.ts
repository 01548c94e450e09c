import { afterEach, describe, expect, it } from "vitest";
import { z } from "zod";
import {
  conversationWithTool,
  MaxRoundsError,
  ModelCallError,
  StreamInterruptedError,
  streamTurn,
  type TurnRuntime,
} from "../../src/agent/conversation.js";
import { INTERRUPTED_RESULT, isHistoryValid } from "../../src/agent/repair.js";
import type { ToolDefinition, ToolHookEvent } from "../../src/agent/tools.js";
import type { Message } from "../../src/core/messages.js";
import { MissingSecretError } from "../../src/persistence/errors.js";
import { type ModelServer, type ScriptedTurn, startModelServer } from "../../src/testing/model-server.js";
import { TestHost } from "./host.js";

let server: ModelServer | undefined;
afterEach(async () => {
  await server?.close();
  server = undefined;
});

process.env.DUMPLINGS_TEST_KEY = "sk-test-value";

async function setup(protocol: "openai" | "anthropic", script: ScriptedTurn[], config: Record<string, unknown> = {}) {
  server = await startModelServer({ script });
  const host = new TestHost(protocol, {
    apiProvider: `${server.url}/${protocol === "openai" ? "chat/completions" : "messages"}`,
    modelName: "scripted",
    apiKeyEnv: "DUMPLINGS_TEST_KEY",
    prompt: "You are terse.",
    maxTokens: 321,
    ...config,
  });
  return { host, server };
}

const add: ToolDefinition<{ a: number; b: number }> = {
  name: "add",
  description: "Adds two numbers",
  parameters: z.object({ a: z.number(), b: z.number() }),
  execute: ({ a, b }) => a + b,
};

function runtime(tools: ToolDefinition[] = [add], extra: Partial<TurnRuntime> = {}): TurnRuntime {
  return { tools: new Map(tools.map((t) => [t.name, t])), hooks: [], maxRetries: 0, ...extra } as TurnRuntime;
}

describe("conversation loop over the OpenAI wire protocol", () => {
  it("runs a plain turn: system prompt, max_tokens, key from the env var at call time", async () => {
    const { host, server } = await setup("openai", [{ text: "Hello!" }]);
    const result = await conversationWithTool(host, "hi", { maxRetries: 0 }, runtime([]));
    expect(result.text).toBe("Hello!");
    expect(result.taskId).toBe(host.currentTaskId);
    expect(host.history).toEqual([
      { role: "user", content: "hi" },
      { role: "assistant", content: "Hello!" },
    ]);
    const body = server.requests[0]?.body as { messages: Message[]; max_tokens: number };
    expect(body.messages[0]).toEqual({ role: "system", content: "You are terse." });
    expect(body.max_tokens).toBe(321);
    expect(server.requests[0]?.headers.authorization).toBe("Bearer sk-test-value");
  });

  it("runs multi-round tool calls and sends the tool results back", async () => {
    const { host, server } = await setup("openai", [
      { toolCalls: [{ id: "c1", name: "add", arguments: { a: 1, b: 2 } }] },
      { toolCalls: [{ id: "c2", name: "add", arguments: { a: 3, b: 3 } }] },
      { text: "3 and 6" },
    ]);
    const result = await conversationWithTool(host, "add things", { maxRetries: 0 }, runtime());
    expect(result).toMatchObject({ text: "3 and 6", rounds: 3, toolCalls: 2 });
    expect(host.history.map((m) => m.role)).toEqual(["user", "assistant", "tool", "assistant", "tool", "assistant"]);
    expect(host.history[2]).toEqual({ role: "tool", tool_call_id: "c1", name: "add", content: "3" });
    const third = server.requests[2]?.body as { messages: Message[] };
    expect(third.messages.at(-1)).toEqual({ role: "tool", tool_call_id: "c2", content: "6" });
    expect(server.count).toBe(3);
  });

  it("runs one round's tools in parallel, never more than toolMaxWorkers at once, results in call order", async () => {
    let running = 0;
    let peak = 0;
    const slow: ToolDefinition<{ n: number }> = {
      name: "slow",
      parameters: { type: "object", properties: { n: { type: "number" } }, required: ["n"] },
      execute: async ({ n }) => {
        running++;
        peak = Math.max(peak, running);
        await new Promise((r) => setTimeout(r, 30));
        running--;
        return `done ${n}`;
      },
    };
    const calls = [1, 2, 3, 4, 5].map((n) => ({ id: `s${n}`, name: "slow", arguments: { n } }));
    const { host } = await setup("openai", [{ toolCalls: calls }, { text: "all done" }], { toolMaxWorkers: 2 });
    await conversationWithTool(host, "go", { maxRetries: 0 }, runtime([slow]));
    expect(peak).toBe(2);
    expect(host.history.filter((m) => m.role === "tool").map((m) => (m as { content: string }).content)).toEqual([
      "done 1",
      "done 2",
      "done 3",
      "done 4",
      "done 5",
    ]);
  });

  it("turns a timeout, a throw, bad arguments and an unknown tool into tool messages the model sees", async () => {
    const hang: ToolDefinition = { name: "hang", execute: () => new Promise(() => {}) };
    const boom: ToolDefinition = {
      name: "boom",
      execute: () => {
        throw new Error("disk on fire");
      },
    };
    const { host, server } = await setup(
      "openai",
      [
        {
          toolCalls: [
            { id: "t1", name: "hang" },
            { id: "t2", name: "boom" },
            { id: "t3", name: "add", arguments: { a: "x" } },
            { id: "t4", name: "add", arguments: "{not json" },
            { id: "t5", name: "nope" },
          ],
        },
        { text: "sorry" },
      ],
      { toolTimeout: 0.05 },
    );
    const result = await conversationWithTool(host, "go", { maxRetries: 0 }, runtime([hang, boom, add]));
    expect(result.text).toBe("sorry");
    const tools = host.history.filter((m) => m.role === "tool") as { tool_call_id: string; content: string }[];
    expect(tools.map((t) => t.tool_call_id)).toEqual(["t1", "t2", "t3", "t4", "t5"]);
    expect(tools[0]?.content).toMatch(/timed out after 0.05s/);
    expect(tools[1]?.content).toMatch(/disk on fire/);
    expect(tools[2]?.content).toMatch(/invalid input/i);
    expect(tools[3]?.content).toMatch(/JSON parsing failed/);
    expect(tools[4]?.content).toMatch(/nope/);
    expect(server.requests[1]?.status).toBe(200); // the provider accepted the repaired-free history
  });

  it("calls hooks before/after/error with task id and duration; a throwing hook is reported, not fatal", async () => {
    const { host } = await setup("openai", [
      {
        toolCalls: [
          { id: "h1", name: "add", arguments: { a: 2, b: 2 } },
          { id: "h2", name: "boom" },
        ],
      },
      { text: "ok" },
    ]);
    const boom: ToolDefinition = {
      name: "boom",
      execute: () => {
        throw new Error("bad");
      },
    };
    const events: ToolHookEvent[] = [];
    const hookErrors: unknown[] = [];
    host.on("hookError", (e) => hookErrors.push(e));
    const result = await conversationWithTool(
      host,
      "go",
      { maxRetries: 0 },
      runtime([add, boom], {
        hooks: [
          (e) => {
            events.push(e);
          },
          () => {
            throw new Error("hook exploded");
          },
        ],
      }),
    );
    expect(result.text).toBe("ok");
    expect(events.filter((e) => e.toolName === "add").map((e) => e.type)).toEqual(["before", "after"]);
    expect(events.filter((e) => e.toolName === "boom").map((e) => e.type)).toEqual(["before", "error"]);
    const after = events.find((e) => e.type === "after");
    expect(after).toMatchObject({ args: { a: 2, b: 2 }, result: 4, taskId: result.taskId, toolCallId: "h1" });
    expect(after?.durationMs).toBeGreaterThanOrEqual(0);
    expect(events.find((e) => e.type === "error")?.error?.message).toBe("bad");
    expect(hookErrors).toHaveLength(4);
  });

  it("streams tokens to onToken and through the async iterator", async () => {
    const { host } = await setup("openai", [
      { toolCalls: [{ id: "x1", name: "add", arguments: { a: 20, b: 22 } }], chunkSize: 3 },
      { text: "The answer is 42.", chunkSize: 3 },
    ]);
    const { tokens, result } = streamTurn((onToken) =>
      conversationWithTool(host, "6*7?", { stream: true, onToken, maxRetries: 0 }, runtime()),
    );
    const seen: string[] = [];
    for await (const t of tokens) seen.push(t);
    expect(seen.length).toBeGreaterThan(3);
    expect(seen.join("")).toBe("The answer is 42.");
    expect((await result).text).toBe("The answer is 42.");
    expect(host.history[2]).toEqual({ role: "tool", tool_call_id: "x1", name: "add", content: "42" });
  });

  it("ends a runaway tool loop with MaxRoundsError after saving once", async () => {
    const loop = Array.from({ length: 3 }, (_, i) => ({
      toolCalls: [{ id: `r${i}`, name: "add", arguments: { a: i, b: 0 } }],
    }));
    const { host } = await setup("openai", loop);
    const saves: string[] = [];
    const rt = runtime([add], {
      persist: async (kind) => {
        saves.push(kind);
        return true;
      },
    });
    await expect(conversationWithTool(host, "loop", { maxRounds: 3, maxRetries: 0 }, rt)).rejects.toBeInstanceOf(
      MaxRoundsError,
    );
    expect(saves).toEqual(["turn"]);
    expect(isHistoryValid("openai", host.history)).toBe(true);
  });

  it("reports HTTP 400/429/500 as ModelCallError with the status; the AI SDK retries a 429", async () => {
    const { host, server } = await setup("openai", [{ error: { status: 400, message: "bad request" } }]);
    const err = await conversationWithTool(host, "x", { maxRetries: 0 }, runtime([])).catch((e) => e);
    expect(err).toBeInstanceOf(ModelCallError);
    expect(err.status).toBe(400);
    server.push({ error: { status: 500 } });
    expect((await conversationWithTool(host, "y", { maxRetries: 0 }, runtime([])).catch((e) => e)).status).toBe(500);
    server.push({ error: { status: 429, message: "slow down" } }, { text: "after retry" });
    const ok = await conversationWithTool(host, "z", { maxRetries: 1 }, runtime([]));
    expect(ok.text).toBe("after retry");
    expect(server.count).toBe(4);
  });

  it("a nested turn (a tool calling the same agent) does not save; the outermost saves once", async () => {
    const { host } = await setup("openai", [
      { toolCalls: [{ id: "n1", name: "ask_self", arguments: {} }] },
      { text: "inner answer" },
      { text: "outer answer" },
    ]);
    const saves: string[] = [];
    const rt: TurnRuntime = runtime([], {
      persist: async (kind) => {
        saves.push(kind);
        return true;
      },
    });
    const askSelf: ToolDefinition = {
      name: "ask_self",
      execute: async () => (await conversationWithTool(host, "inner question", { maxRetries: 0 }, rt)).text,
    };
    (rt.tools as Map<string, ToolDefinition>).set("ask_self", askSelf);
    const result = await conversationWithTool(host, "outer question", { maxRetries: 0 }, rt);
    expect(result.text).toBe("outer answer");
    expect(saves).toEqual(["turn"]);
    expect(host.currentTaskId).toBe(result.taskId);
    expect(host.history).toEqual([
      { role: "user", content: "outer question" },
      {
        role: "assistant",
        content: null,
        tool_calls: [{ id: "n1", type: "function", function: { name: "ask_self", arguments: "{}" } }],
      },
      { role: "tool", tool_call_id: "n1", name: "ask_self", content: "inner answer" },
      { role: "assistant", content: "outer answer" },
    ]);
  });
});

describe("conversation loop over the Anthropic wire protocol", () => {
  it("runs tool rounds with tool_use / tool_result, JSON and streaming", async () => {
    const { host, server } = await setup("anthropic", [
      {
        thinking: "need to add",
        text: "Adding.",
        toolCalls: [{ id: "toolu_1", name: "add", arguments: { a: 5, b: 6 } }],
      },
      { text: "It is 11.", chunkSize: 2 },
    ]);
    const tokens: string[] = [];
    const result = await conversationWithTool(
      host,
      "5+6?",
      { stream: true, onToken: (t) => tokens.push(t), maxRetries: 0 },
      runtime(),
    );
    expect(result.text).toBe("It is 11.");
    expect(tokens.join("")).toBe("Adding.It is 11.");
    expect(host.history[1]).toEqual({
      role: "assistant",
      content: [
        { type: "thinking", thinking: "need to add", signature: "sig-scripted" },
        { type: "text", text: "Adding." },
        { type: "tool_use", id: "toolu_1", name: "add", input: { a: 5, b: 6 } },
      ],
    });
    expect(host.history[2]).toEqual({
      role: "user",
      content: [{ type: "tool_result", tool_use_id: "toolu_1", content: "11" }],
    });
    const second = server.requests[1]?.body as { system: unknown; max_tokens: number };
    expect(JSON.stringify(second.system)).toContain("You are terse.");
    expect(second.max_tokens).toBe(321);
    expect(server.requests[0]?.headers["x-api-key"]).toBe("sk-test-value");
  });
});

describe("crash-safe histories", () => {
  it("PB-01: a dangling Anthropic tool_use is answered as interrupted before the next request; no 400", async () => {
    const { host, server } = await setup("anthropic", [{ text: "Hi again." }]);
    const before: Message[] = [
      { role: "user", content: [{ type: "text", text: "List the files in /tmp" }] },
      {
        role: "assistant",
        content: [
          { type: "text", text: "Running ls." },
          { type: "tool_use", id: "toolu_A1", name: "bash", input: { cmd: "ls /tmp" } },
        ],
      },
    ];
    host.history = structuredClone(before);
    const repairs: unknown[] = [];
    host.on("repair", (a) => repairs.push(a));
    const result = await conversationWithTool(host, "hello?", { maxRetries: 0 }, runtime([]));
    expect(result.text).toBe("Hi again.");
    expect(server.requests[0]?.status).toBe(200);
    const sent = (server.requests[0]!.body as { messages: { role: string; content: { type: string }[] }[] }).messages;
    // every tool_use id in message i has its tool_result in message i+1; the new user text comes after it
    expect(sent[2]?.content[0]).toMatchObject({ type: "tool_result", tool_use_id: "toolu_A1", is_error: true });
    expect(JSON.stringify(sent.slice(2))).toMatch(/toolu_A1.*hello\?/);
    expect(host.history.slice(0, 2)).toEqual(before);
    expect(host.history[2]).toEqual({
      role: "user",
      content: [{ type: "tool_result", tool_use_id: "toolu_A1", is_error: true, content: INTERRUPTED_RESULT }],
    });
    expect(repairs).toHaveLength(1);
  });

  it("re-runs the missing tools with repair: 'rerun' and continues the turn with input null", async () => {
    const { host, server } = await setup("openai", [{ text: "3, as computed." }]);
    host.history = [
      { role: "user", content: "1+2?" },
      {
        role: "assistant",
        content: null,
        tool_calls: [{ id: "p1", type: "function", function: { name: "add", arguments: '{"a":1,"b":2}' } }],
      },
    ];
    const result = await conversationWithTool(host, null, { repair: "rerun", maxRetries: 0 }, runtime());
    expect(result.text).toBe("3, as computed.");
    expect(host.history[2]).toEqual({ role: "tool", tool_call_id: "p1", name: "add", content: "3" });
    expect(server.requests[0]?.status).toBe(200);
  });

  it("PB-05: a stream dropped mid tool call keeps the text seen as partial, never half a call", async () => {
    const { host, server } = await setup("openai", [
      {
        text: "Checking both",
        toolCalls: [{ id: "call_W1", name: "weather", arguments: { city: "Paris" } }],
        chunkSize: 5,
        dropAfterEvents: 6,
      },
      { text: "Paris: sunny." },
    ]);
    const weather: ToolDefinition = { name: "weather", execute: () => "sunny" };
    const err = await conversationWithTool(
      host,
      "Weather in Paris and Rome?",
      { stream: true, maxRetries: 0 },
      runtime([weather]),
    ).catch((e) => e);
    expect(err).toBeInstanceOf(StreamInterruptedError);
    expect(host.history[1]).toEqual({ role: "assistant", content: "Checking both", partial: true });
    expect(JSON.stringify(host.history)).not.toContain("call_W1");
    const next = await conversationWithTool(host, "Never mind, just Paris", { maxRetries: 0 }, runtime([weather]));
    expect(next.text).toBe("Paris: sunny.");
    expect(server.requests[1]?.status).toBe(200);
    const sent = JSON.stringify(server.requests[1]?.body);
    expect(sent).not.toContain("partial");
    expect(sent).toContain("Checking both");
  });
});

describe("aborting a streamed turn", () => {
  it("keeps exactly the tokens the user saw, marked partial, when the caller aborts", async () => {
    const { host } = await setup("openai", [{ text: "one two three four five six", chunkSize: 4, chunkDelayMs: 30 }]);
    const controller = new AbortController();
    const seen: string[] = [];
    const err = await conversationWithTool(
      host,
      "count",
      {
        stream: true,
        signal: controller.signal,
        maxRetries: 0,
        onToken: (t) => {
          seen.push(t);
          if (seen.length === 2) controller.abort(new Error("client disconnected"));
        },
      },
      runtime([]),
    ).catch((e) => e);
    expect(err).toBeInstanceOf(StreamInterruptedError);
    expect(host.history[1]).toEqual({ role: "assistant", content: seen.join(""), partial: true });
    expect(err.partialText).toBe(seen.join(""));
  });
});

describe("model configuration", () => {
  it("reads the key at call time: a missing env var fails before any request, a base URL works too", async () => {
    const { host, server } = await setup("openai", [{ text: "with key" }], { apiKeyEnv: "DUMPLINGS_TEST_UNSET_KEY" });
    delete process.env.DUMPLINGS_TEST_UNSET_KEY;
    const err = await conversationWithTool(host, "x", { maxRetries: 0 }, runtime([])).catch((e) => e);
    expect(err).toBeInstanceOf(MissingSecretError);
    expect(server.count).toBe(0);
    process.env.DUMPLINGS_TEST_UNSET_KEY = "rotated-key";
    host.config.apiProvider = server.url; // a base URL, not …/chat/completions
    expect((await conversationWithTool(host, "y", { maxRetries: 0 }, runtime([]))).text).toBe("with key");
    expect(server.requests[0]?.headers.authorization).toBe("Bearer rotated-key");
    delete process.env.DUMPLINGS_TEST_UNSET_KEY;
  });

  it("with fcModel off sends no tools and runs no tool round", async () => {
    const { host, server } = await setup("openai", [{ text: "just text" }], { fcModel: false });
    const r = await conversationWithTool(host, "x", { maxRetries: 0 }, runtime());
    expect(r).toMatchObject({ text: "just text", rounds: 1, toolCalls: 0 });
    expect(server.requests[0]?.body.tools).toBeUndefined();
  });
});

describe("concurrent turns of one agent", () => {
  it("run one after the other, each saved once, never interleaved", async () => {
    const { host } = await setup("openai", [
      { toolCalls: [{ id: "q1", name: "slow" }] },
      { text: "first done" },
      { text: "second done" },
    ]);
    const slow: ToolDefinition = { name: "slow", execute: () => new Promise((r) => setTimeout(() => r("ok"), 50)) };
    const saves: string[] = [];
    const rt = runtime([slow], {
      persist: async (kind) => {
        saves.push(`${kind}:${host.history.length}`);
        return true;
      },
    });
    const [a, b] = await Promise.all([
      conversationWithTool(host, "first", { maxRetries: 0 }, rt),
      conversationWithTool(host, "second", { maxRetries: 0 }, rt),
    ]);
    expect([a.text, b.text]).toEqual(["first done", "second done"]);
    expect(host.history.map((m) => m.role)).toEqual(["user", "assistant", "tool", "assistant", "user", "assistant"]);
    expect(saves).toEqual(["turn:4", "turn:6"]);
    expect(a.taskId).not.toBe(b.taskId);
  });
});
