import { describe, expect, it } from "vitest";
import {
  anthropicToModelMessages,
  fromModelMessages,
  modelMessagesToAnthropic,
  modelMessagesToOpenAI,
  openAIToModelMessages,
  toModelMessages,
} from "../../src/agent/ai-sdk-messages.js";
import type { AnthropicMessage, OpenAIMessage } from "../../src/core/messages.js";
import { loadSampleConversations } from "../../src/testing/samples.js";

const conversations = loadSampleConversations({ source: "all" });

describe("AI SDK message conversion", () => {
  it("has real conversations of both protocols to check", () => {
    expect(conversations.filter((c) => c.protocol === "openai").length).toBeGreaterThan(10);
    expect(conversations.filter((c) => c.protocol === "anthropic").length).toBeGreaterThan(3);
  });

  it.each(conversations.map((c) => [c.id, c] as const))("round-trips %s exactly", (_id, conv) => {
    const model = toModelMessages(conv.protocol, conv.messages);
    // every tool call becomes an AI SDK tool-call part with parsed input
    for (const m of model) {
      if (m.role === "assistant" && typeof m.content !== "string") {
        for (const p of m.content) if (p.type === "tool-call") expect(typeof p.toolName).toBe("string");
      }
    }
    expect(fromModelMessages(conv.protocol, model)).toEqual(conv.messages);
  });

  it("maps OpenAI tool results to the tool name of the call they answer", () => {
    const history: OpenAIMessage[] = [
      { role: "user", content: "weather?" },
      {
        role: "assistant",
        content: null,
        tool_calls: [{ id: "c1", type: "function", function: { name: "weather", arguments: '{"city":"Paris"}' } }],
      },
      { role: "tool", tool_call_id: "c1", content: "sunny" },
    ];
    const model = openAIToModelMessages(history);
    expect(model[1]).toMatchObject({ content: [{ type: "tool-call", toolName: "weather", input: { city: "Paris" } }] });
    expect(model[2]).toMatchObject({
      role: "tool",
      content: [{ toolName: "weather", output: { type: "text", value: "sunny" } }],
    });
    expect(modelMessagesToOpenAI(model)).toEqual(history);
  });

  it("gives model output (no round-trip options) the canonical OpenAI and Anthropic shapes", () => {
    const produced = [
      {
        role: "assistant" as const,
        content: [
          { type: "text" as const, text: "Checking." },
          { type: "tool-call" as const, toolCallId: "t1", toolName: "bash", input: { cmd: "ls" } },
        ],
      },
      {
        role: "tool" as const,
        content: [
          {
            type: "tool-result" as const,
            toolCallId: "t1",
            toolName: "bash",
            output: { type: "error-text" as const, value: "boom" },
          },
        ],
      },
    ];
    expect(modelMessagesToOpenAI(produced)).toEqual([
      {
        role: "assistant",
        content: "Checking.",
        tool_calls: [{ id: "t1", type: "function", function: { name: "bash", arguments: '{"cmd":"ls"}' } }],
      },
      { role: "tool", tool_call_id: "t1", content: "boom" },
    ]);
    expect(modelMessagesToAnthropic(produced)).toEqual([
      {
        role: "assistant",
        content: [
          { type: "text", text: "Checking." },
          { type: "tool_use", id: "t1", name: "bash", input: { cmd: "ls" } },
        ],
      },
      { role: "user", content: [{ type: "tool_result", tool_use_id: "t1", content: "boom", is_error: true }] },
    ]);
  });

  it("splits an Anthropic user message mixing tool_result and text, and merges it back", () => {
    const history: AnthropicMessage[] = [
      { role: "user", content: "go" },
      { role: "assistant", content: [{ type: "tool_use", id: "t1", name: "ls", input: {} }] },
      {
        role: "user",
        content: [
          { type: "tool_result", tool_use_id: "t1", content: "a b" },
          { type: "text", text: "and now?" },
        ],
      },
    ];
    const model = anthropicToModelMessages(history);
    expect(model.map((m) => m.role)).toEqual(["user", "assistant", "tool", "user"]);
    expect(modelMessagesToAnthropic(model)).toEqual(history);
  });
});
