/**
 * The states pinned by the golden `.duas` fixtures in `test/fixtures/golden/`.
 * Tricky strings on purpose: every escaping case of the format appears once.
 */
import type { Message } from "../../src/core/messages.js";
import type { AgentState } from "../../src/core/state.js";

const TRICKY = {
  prompt:
    "You are terse.\nRules:\r\n  1. key = value; # not a comment\n  [x] done\t(tab)\u0000nul \u001b[31mred\u001b[0m",
  apiProvider: "https://example.test/v1/chat/completions",
  apiKeyEnv: "OPENAI_API_KEY",
};

/** OpenAI-protocol state with escaped config values and tricky message text. */
export const goldenOpenAI: AgentState = {
  meta: {
    formatVersion: "1.0",
    schemaVersion: "0.1.0",
    agentUuid: "0b7f1a52-6f1e-4c3b-9a57-2d3e4f5a6b7c",
    agentName: "  weather bot  ",
    protocol: "openai",
    class: "dumplings-ai:BaseAgent",
    savedAt: "2026-01-02T03:04:05.678+01:00",
    messageCount: 5,
  },
  config: {
    prompt: TRICKY.prompt,
    apiProvider: TRICKY.apiProvider,
    apiKeyEnv: TRICKY.apiKeyEnv,
    modelName: "gpt-4o",
    maxTokens: 1024,
    stream: true,
    fcModel: true,
    toolTimeout: 12.5,
    toolMaxWorkers: 2,
  },
  state: {
    currentTaskId: "task-7",
    hooks: ["./hooks.js:audit", "dumplings-ai:logCalls"],
    fields: { counter: 3, "notes list": ["a\nb", "שלום"], nested: { ok: true, v: null } },
  },
  history: [
    { role: "system", content: "Be helpful.\n# not a comment\n[HISTORY]" },
    { role: "user", content: "weather in Zürich? 🌦️ \ud83d (half emoji) \u2028 \t end  " },
    {
      role: "assistant",
      content: null,
      tool_calls: [
        { id: "call_1", type: "function", function: { name: "get_weather", arguments: '{"city":"Zürich"}' } },
      ],
    },
    { role: "tool", tool_call_id: "call_1", content: "12°C\r\nwindy" },
    { role: "assistant", content: [{ type: "text", text: "مرحبا — 12°C" }], refusal: null, extra_field: { kept: 1 } },
  ] as Message[],
};

/** Anthropic-protocol state: blocks, thinking, tool_use/tool_result, plain values. */
export const goldenAnthropic: AgentState = {
  meta: {
    formatVersion: "1.0",
    schemaVersion: "0.1.0",
    agentUuid: "9d8c7b6a-5f4e-4d3c-8b2a-1f0e9d8c7b6a",
    agentName: "claude helper",
    protocol: "anthropic",
    class: "dumplings-ai:AnthropicAgent",
    savedAt: "2026-01-02T03:04:05.678Z",
    messageCount: 3,
  },
  config: {
    prompt: "",
    apiProvider: "https://api.anthropic.com/v1/messages",
    apiKeyEnv: "ANTHROPIC_API_KEY",
    modelName: "claude-sonnet-4",
    maxTokens: 4096,
    stream: false,
    fcModel: false,
    toolTimeout: 60,
    toolMaxWorkers: 4,
  },
  state: { currentTaskId: null, hooks: [], fields: {} },
  history: [
    { role: "user", content: "list files in ./src = ?" },
    {
      role: "assistant",
      content: [
        { type: "thinking", thinking: "need ls", signature: "sig==" },
        { type: "tool_use", id: "toolu_1", name: "ls", input: { path: "./src" } },
      ],
    },
    {
      role: "user",
      content: [{ type: "tool_result", tool_use_id: "toolu_1", content: "ok \ud83d\udd11 done\u0000" }],
    },
  ] as Message[],
};
