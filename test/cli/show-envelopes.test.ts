/**
 * `dumplings show` of sessions that hold another library's messages (an AI SDK
 * chat, an OpenAI Agents session): the preview shows their text, tool calls and
 * results, and the tool calls are counted, instead of blank lines.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import type { AgentInputItem } from "@openai/agents-core";
import type { ModelMessage, UIMessage } from "ai";
import { afterAll, describe, expect, it } from "vitest";
import { createChatStore } from "../../src/ai-sdk/index.js";
import { SQLiteBackend } from "../../src/backends/sqlite.js";
import { DumplingsSession } from "../../src/openai-agents/index.js";
import { runCli } from "./run-cli.js";

const dir = mkdtempSync(path.join(tmpdir(), "dumplings-show-env-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const db = path.join(dir, "s.db");

describe("dumplings show on enveloped messages", () => {
  it("previews AI SDK UIMessage and ModelMessage chats and Agents items, and counts their tool calls", async () => {
    const backend = new SQLiteBackend({ dbPath: db });
    const ui: UIMessage[] = [
      { id: "u1", role: "user", parts: [{ type: "text", text: "Where is order 7?" }] },
      {
        id: "a1",
        role: "assistant",
        parts: [
          { type: "step-start" },
          {
            type: "tool-lookup",
            toolCallId: "c1",
            state: "output-available",
            input: { id: 7 },
            output: { status: "shipped" },
          },
          { type: "text", text: "It has shipped." },
        ],
      },
    ];
    const model: ModelMessage[] = [
      { role: "user", content: "Refund order 8" },
      {
        role: "assistant",
        content: [{ type: "tool-call", toolCallId: "c2", toolName: "refund", input: { id: 8 } }],
      },
      {
        role: "tool",
        content: [
          { type: "tool-result", toolCallId: "c2", toolName: "refund", output: { type: "text", value: "refunded" } },
        ],
      },
    ];
    await createChatStore<UIMessage>({ store: backend }).save("ui", ui);
    await createChatStore<ModelMessage>({ store: backend }).save("model", model);
    const items: AgentInputItem[] = [
      { role: "user", content: "What is the weather in Paris?" },
      { type: "function_call", callId: "f1", name: "weather", arguments: '{"city":"Paris"}', status: "completed" },
      { type: "function_call_result", callId: "f1", name: "weather", status: "completed", output: "sunny" },
      {
        role: "assistant",
        status: "completed",
        content: [{ type: "output_text", text: "It is sunny in Paris." }],
      },
    ];
    await new DumplingsSession({ sessionId: "s1", store: backend }).addItems(items);
    await backend.close?.();

    const show = (key: string) => runCli(["show", key, "--backend", `sqlite:${db}`, "--last", "5"]);
    const chat = show("chat-ui");
    expect(chat.code, chat.stderr).toBe(0);
    expect(chat.stdout).toMatch(/user\s+Where is order 7\?/);
    expect(chat.stdout).toMatch(/assistant\s+→ lookup\(\{"id":7\}\) ← \{"status":"shipped"\} It has shipped\./);
    expect(chat.stdout).toMatch(/tool calls {2}1 {2}\(lookup 1\)/);
    const m = show("chat-model").stdout;
    expect(m).toMatch(/→ refund\(\{"id":8\}\)/);
    expect(m).toMatch(/tool\s+← refunded/);
    expect(runCli(["ls", "--backend", `sqlite:${db}`]).stdout).toMatch(/agents-s1/);
    const agents = show("agents-s1").stdout;
    expect(agents).toMatch(/What is the weather in Paris\?/);
    expect(agents).toMatch(/→ weather\(\{"city":"Paris"\}\)/);
    expect(agents).toMatch(/← sunny/);
    expect(agents).toMatch(/It is sunny in Paris\./);
    expect(agents).toMatch(/tool calls {2}1 {2}\(weather 1\)/);
  });
});
