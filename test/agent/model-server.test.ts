import { createAnthropic } from "@ai-sdk/anthropic";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { generateText, jsonSchema, streamText, tool } from "ai";
import { afterEach, describe, expect, it } from "vitest";
import { type ModelServer, startModelServer } from "../../src/testing/model-server.js";

const tools = {
  add: tool({
    description: "add two numbers",
    inputSchema: jsonSchema<{ a: number; b: number }>({
      type: "object",
      properties: { a: { type: "number" }, b: { type: "number" } },
    }),
  }),
};

let server: ModelServer | undefined;
afterEach(async () => {
  await server?.close();
  server = undefined;
});

describe("model server (real HTTP, scripted)", () => {
  it("serves OpenAI JSON and SSE with parallel tool calls split across chunks", async () => {
    server = await startModelServer({
      script: [
        {
          toolCalls: [
            { name: "add", arguments: { a: 1, b: 2 } },
            { name: "add", arguments: { a: 3, b: 4 } },
          ],
        },
        {
          text: "streamed answer",
          toolCalls: [{ id: "call_s", name: "add", arguments: { a: 10, b: 20 } }],
          chunkSize: 2,
        },
      ],
    });
    const provider = createOpenAICompatible({ name: "local", baseURL: server.url, apiKey: "test" });
    const json = await generateText({ model: provider.chatModel("m"), prompt: "hi", tools, maxRetries: 0 });
    expect(json.toolCalls.map((c) => c.input)).toEqual([
      { a: 1, b: 2 },
      { a: 3, b: 4 },
    ]);
    const stream = streamText({ model: provider.chatModel("m"), prompt: "hi", tools, maxRetries: 0 });
    let deltas = 0;
    for await (const part of stream.fullStream) if (part.type === "tool-input-delta") deltas++;
    expect(deltas).toBeGreaterThan(1);
    expect(await stream.text).toBe("streamed answer");
    expect((await stream.toolCalls)[0]?.input).toEqual({ a: 10, b: 20 });
    expect(server.count).toBe(2);
    expect(server.requests[1]?.stream).toBe(true);
  });

  it("serves Anthropic JSON and streaming events with thinking and tool_use", async () => {
    server = await startModelServer({
      script: [
        {
          thinking: "let me add",
          text: "Adding.",
          toolCalls: [{ id: "toolu_1", name: "add", arguments: { a: 1, b: 1 } }],
        },
        { text: "two", chunkSize: 1 },
      ],
    });
    const provider = createAnthropic({ baseURL: server.url, apiKey: "test" });
    const first = await generateText({
      model: provider("m"),
      prompt: "1+1",
      tools,
      maxRetries: 0,
      maxOutputTokens: 100,
    });
    expect(first.reasoningText).toBe("let me add");
    expect(first.toolCalls[0]?.toolCallId).toBe("toolu_1");
    const stream = streamText({ model: provider("m"), prompt: "again", maxRetries: 0, maxOutputTokens: 100 });
    expect(await stream.text).toBe("two");
    expect(server.requests.map((r) => r.path)).toEqual(["/v1/messages", "/v1/messages"]);
  });

  it("answers scripted errors with the protocol's status and body, and counts them", async () => {
    server = await startModelServer({
      script: [
        { error: { status: 429, message: "slow down" } },
        { error: { status: 500 } },
        { error: { status: 400 } },
      ],
    });
    for (const [status, path] of [
      [429, "/chat/completions"],
      [500, "/messages"],
      [400, "/chat/completions"],
    ] as const) {
      const res = await fetch(`${server.url}${path}`, {
        method: "POST",
        body: JSON.stringify({ model: "m", messages: [{ role: "user", content: "x" }] }),
      });
      expect(res.status).toBe(status);
      const body = (await res.json()) as { error: { message: string } };
      expect(typeof body.error.message).toBe("string");
    }
    expect(server.count).toBe(3);
  });

  it("rejects histories with an unmatched tool call like the real APIs (HTTP 400)", async () => {
    server = await startModelServer({ script: [{ text: "never" }] });
    const openai = await fetch(`${server.url}/chat/completions`, {
      method: "POST",
      body: JSON.stringify({
        messages: [
          { role: "user", content: "x" },
          {
            role: "assistant",
            content: null,
            tool_calls: [{ id: "c1", type: "function", function: { name: "f", arguments: "{}" } }],
          },
          { role: "user", content: "y" },
        ],
      }),
    });
    expect(openai.status).toBe(400);
    const anthropic = await fetch(`${server.url}/messages`, {
      method: "POST",
      body: JSON.stringify({
        messages: [
          { role: "user", content: "x" },
          { role: "assistant", content: [{ type: "tool_use", id: "t1", name: "f", input: {} }] },
          { role: "user", content: [{ type: "text", text: "y" }] },
        ],
      }),
    });
    expect(anthropic.status).toBe(400);
    expect(((await anthropic.json()) as { error: { message: string } }).error.message).toContain("t1");
  });
});
