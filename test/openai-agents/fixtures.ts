/**
 * OpenAI Agents SDK items for the session tests: hand-made items of every
 * type the SDK's `AgentInputItem` union has (each checked against the SDK's
 * own `ModelItem` schema by the tests), and the bundled conversations
 * (data/trajectories) converted to items (through `toModelMessages`).
 */
import type { AgentInputItem } from "@openai/agents-core";
import type { ModelMessage } from "ai";
import { toModelMessages } from "../../src/agent/ai-sdk-messages.js";
import { loadSampleConversations } from "../../src/testing/samples.js";

const PNG: Uint8Array<ArrayBuffer> = new Uint8Array([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0, 255, 128, 7]);
const PDF_BASE64 = Buffer.from("%PDF-1.4\n1 0 obj << >> endobj\n%%EOF\n").toString("base64");

/** One item of every type, with the optional fields set (ids, providerData, binary data, nested outputs). */
export function handMadeItems(): AgentInputItem[] {
  return [
    { type: "message", role: "system", content: "You are terse.", providerData: { cache: true } },
    { role: "user", content: "plain string, no type" },
    {
      type: "message",
      role: "user",
      id: "msg_u1",
      content: [
        { type: "input_text", text: "Look at these:\nline 2 \u00e9 \ud83e\udd5f" },
        { type: "input_image", image: "https://example.com/cat.png", detail: "high" },
        { type: "input_image", image: `data:image/png;base64,${Buffer.from(PNG).toString("base64")}` },
        { type: "input_image", image: { id: "file_img1" } },
        { type: "input_file", file: `data:application/pdf;base64,${PDF_BASE64}`, filename: "a.pdf" },
        { type: "input_file", file: { url: "https://example.com/b.pdf" } },
        { type: "audio", audio: "AAAA", format: "wav" },
      ],
    },
    {
      type: "message",
      role: "assistant",
      id: "msg_a1",
      status: "completed",
      phase: "final_answer",
      content: [
        { type: "output_text", text: "Two images and a file.", providerData: { annotations: [] } },
        { type: "refusal", refusal: "not that one" },
      ],
    },
    {
      type: "reasoning",
      id: "rs_1",
      content: [{ type: "input_text", text: "The user wants the weather." }],
      rawContent: [{ type: "reasoning_text", text: "raw chain" }],
      providerData: { encryptedContent: "gAAAA-opaque==" },
    },
    {
      type: "function_call",
      id: "fc_1",
      callId: "call_weather",
      name: "get_weather",
      arguments: '{"city":"Paris","days":[1,2]}',
      status: "completed",
    },
    {
      type: "function_call_result",
      id: "fco_1",
      callId: "call_weather",
      name: "get_weather",
      status: "completed",
      output: { type: "text", text: "sunny, 21\u00b0C" },
    },
    {
      type: "function_call",
      callId: "call_chart",
      name: "chart",
      namespace: "viz",
      arguments: "{}",
    },
    {
      type: "function_call_result",
      callId: "call_chart",
      name: "chart",
      namespace: "viz",
      status: "completed",
      output: [
        { type: "input_text", text: "here is the chart" },
        { type: "input_image", image: "data:image/png;base64,iVBORw0KGgo=" },
        { type: "input_file", file: { id: "file_1" }, filename: "data.csv" },
      ],
    },
    {
      type: "function_call",
      callId: "call_render",
      name: "render",
      arguments: '{"w":2}',
      providerData: { note: undefined, score: 0.5 },
    },
    {
      type: "function_call_result",
      callId: "call_render",
      name: "render",
      status: "completed",
      output: { type: "image", image: { data: PNG, mediaType: "image/png" }, detail: "low" },
    },
    {
      type: "hosted_tool_call",
      id: "ws_1",
      name: "web_search_call",
      arguments: '{"query":"weather"}',
      status: "completed",
      output: "results",
      providerData: { action: { type: "search", query: "weather" } },
    },
    {
      type: "computer_call",
      id: "cu_1",
      callId: "call_cu",
      status: "completed",
      action: { type: "click", x: 10, y: 20, button: "left" },
    },
    {
      type: "computer_call_result",
      callId: "call_cu",
      output: { type: "computer_screenshot", data: "data:image/png;base64,iVBORw0KGgo=" },
    },
    {
      type: "shell_call",
      callId: "call_sh",
      status: "completed",
      action: { commands: ["ls -la"], timeoutMs: 5000 },
    },
    {
      type: "shell_call_output",
      callId: "call_sh",
      output: [{ stdout: "a\nb\n", stderr: "", outcome: { type: "exit", exitCode: 0 } }],
    },
    {
      type: "apply_patch_call",
      callId: "call_ap",
      status: "completed",
      operation: { type: "update_file", path: "src/a.ts", diff: "@@ -1 +1 @@\n-a\n+b\n" },
    },
    { type: "apply_patch_call_output", callId: "call_ap", status: "completed", output: "patched" },
    { type: "compaction", encrypted_content: "enc-compacted", id: "cmp_1" },
    { type: "unknown", id: "x_1", providerData: { type: "future_item", payload: { deep: [1, null, "s"] } } },
  ] as AgentInputItem[];
}

function text(content: unknown): string {
  if (typeof content === "string") return content;
  return JSON.stringify(content);
}

/** AI SDK model messages as OpenAI Agents items (messages, reasoning, function calls and results). */
export function toAgentItems(messages: readonly ModelMessage[]): AgentInputItem[] {
  const out: AgentInputItem[] = [];
  for (const m of messages) {
    if (m.role === "system") {
      out.push({ type: "message", role: "system", content: m.content });
    } else if (m.role === "user") {
      const parts = typeof m.content === "string" ? [{ type: "text" as const, text: m.content }] : m.content;
      out.push({
        type: "message",
        role: "user",
        content: parts.map((p) =>
          p.type === "text" ? { type: "input_text", text: p.text } : { type: "input_text", text: text(p) },
        ),
      } as AgentInputItem);
    } else if (m.role === "assistant") {
      const parts = typeof m.content === "string" ? [{ type: "text" as const, text: m.content }] : m.content;
      for (const p of parts) {
        if (p.type === "text") {
          out.push({
            type: "message",
            role: "assistant",
            status: "completed",
            content: [{ type: "output_text", text: p.text }],
          });
        } else if (p.type === "reasoning") {
          out.push({ type: "reasoning", content: [{ type: "input_text", text: p.text }] });
        } else if (p.type === "tool-call") {
          out.push({
            type: "function_call",
            callId: p.toolCallId,
            name: p.toolName,
            arguments: JSON.stringify(p.input ?? {}),
            status: "completed",
          });
        }
      }
    } else if (m.role === "tool") {
      for (const p of m.content) {
        if (p.type !== "tool-result") continue;
        const value = (p.output as { value?: unknown }).value;
        out.push({
          type: "function_call_result",
          callId: p.toolCallId,
          name: p.toolName,
          status: "completed",
          output: { type: "text", text: text(value) },
        });
      }
    }
  }
  return out;
}

/** The bundled conversations (both protocols) as OpenAI Agents items: `[id, items]`. */
export function sampleSessions(limit = 6): Array<[string, AgentInputItem[]]> {
  const all = loadSampleConversations({ source: "all" });
  const anthropic = all.filter((c) => c.protocol === "anthropic").slice(0, Math.floor(limit / 2));
  const openai = all.filter((c) => c.protocol === "openai").slice(0, limit - anthropic.length);
  return [...openai, ...anthropic].map((c) => [c.id, toAgentItems(toModelMessages(c.protocol, c.messages))]);
}
