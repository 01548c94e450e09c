/**
 * Chat messages for the AI SDK tests: hand-made messages with every part
 * type, and the bundled conversations (data/trajectories) converted to
 * `ModelMessage[]` (through the agent layer's converter) and `UIMessage[]`.
 */
import type { ModelMessage, UIMessage } from "ai";
import { toModelMessages } from "../../src/agent/ai-sdk-messages.js";
import { loadSampleConversations } from "../../src/testing/samples.js";

const PNG = new Uint8Array([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0, 255, 128, 7]);
const PDF_BASE64 = Buffer.from("%PDF-1.4\n1 0 obj << >> endobj\n%%EOF\n").toString("base64");

/** UIMessages with every part type and tool state, metadata, custom data parts. */
export function handMadeUIMessages(): UIMessage[] {
  return [
    { id: "s1", role: "system", parts: [{ type: "text", text: "You are terse." }] },
    {
      id: "u1",
      role: "user",
      metadata: { createdAt: 1_764_460_800_000, tags: ["a", "b"], nested: { ok: true, n: null } },
      parts: [
        { type: "text", text: 'What is in this picture and this PDF? ünïcödé \u2028 "quotes"' },
        {
          type: "file",
          mediaType: "image/png",
          filename: "p.png",
          url: `data:image/png;base64,${Buffer.from(PNG).toString("base64")}`,
        },
        { type: "file", mediaType: "application/pdf", url: `data:application/pdf;base64,${PDF_BASE64}` },
      ],
    },
    {
      id: "a1",
      role: "assistant",
      metadata: { model: "local", usage: { inputTokens: 12, outputTokens: 3 } },
      parts: [
        { type: "step-start" },
        {
          type: "reasoning",
          text: "Look at the image first.",
          state: "done",
          providerMetadata: { anthropic: { signature: "sig" } },
        },
        { type: "tool-weather", toolCallId: "t0", state: "input-streaming", input: { city: "Par" } },
        { type: "tool-weather", toolCallId: "t1", state: "input-available", input: { city: "Paris" } },
        {
          type: "tool-weather",
          toolCallId: "t2",
          state: "output-available",
          input: { city: "Oslo" },
          output: { temp: -3.5, sky: "snow" },
        },
        {
          type: "tool-weather",
          toolCallId: "t3",
          state: "output-error",
          input: { city: "?" },
          errorText: "unknown city",
        },
        {
          type: "tool-delete",
          toolCallId: "t4",
          state: "approval-requested",
          input: { path: "/tmp/x" },
          approval: { id: "ap1" },
        },
        {
          type: "tool-delete",
          toolCallId: "t5",
          state: "approval-responded",
          input: { path: "/tmp/y" },
          approval: { id: "ap2", approved: true, reason: "fine" },
        },
        {
          type: "tool-delete",
          toolCallId: "t6",
          state: "output-denied",
          input: { path: "/etc" },
          approval: { id: "ap3", approved: false, reason: "no" },
        },
        {
          type: "dynamic-tool",
          toolName: "mcp_search",
          toolCallId: "t7",
          state: "output-available",
          input: { q: "x" },
          output: [1, "two", { three: 3 }],
        },
        { type: "source-url", sourceId: "src1", url: "https://example.com/a?b=c#d", title: "Example" },
        {
          type: "source-document",
          sourceId: "src2",
          mediaType: "application/pdf",
          title: "Spec",
          filename: "spec.pdf",
        },
        { type: "data-weather", id: "d1", data: { city: "Paris", status: "loading", $dumplings: "not a tag" } },
        { type: "text", text: "It is a PNG; the PDF is empty.", state: "done" },
      ],
    },
  ] as UIMessage[];
}

/** ModelMessages with every content part type, binary as Uint8Array/base64/URL, providerOptions. */
export function handMadeModelMessages(): ModelMessage[] {
  return [
    { role: "system", content: "Be brief.", providerOptions: { anthropic: { cacheControl: { type: "ephemeral" } } } },
    {
      role: "user",
      content: [
        { type: "text", text: "Describe these." },
        { type: "image", image: PNG, mediaType: "image/png" },
        { type: "image", image: Buffer.from(PNG).toString("base64"), mediaType: "image/png" },
        { type: "image", image: new URL("https://example.com/cat.jpg") },
        {
          type: "file",
          data: Buffer.from(PDF_BASE64, "base64").subarray(0),
          mediaType: "application/pdf",
          filename: "a.pdf",
        },
        { type: "file", data: PDF_BASE64, mediaType: "application/pdf" },
        { type: "file", data: new URL("https://example.com/b.pdf"), mediaType: "application/pdf" },
      ],
      providerOptions: { openai: { imageDetail: "low" } },
    },
    {
      role: "assistant",
      content: [
        { type: "reasoning", text: "think", providerOptions: { anthropic: { signature: "abc" } } },
        { type: "text", text: "Calling tools." },
        { type: "file", data: new Uint8Array([1, 2, 3]), mediaType: "image/png" },
        { type: "tool-call", toolCallId: "c1", toolName: "weather", input: { city: "Paris" } },
        { type: "tool-call", toolCallId: "c2", toolName: "rm", input: { path: "/x" }, providerExecuted: false },
        { type: "tool-approval-request", approvalId: "ap1", toolCallId: "c2" },
      ],
    },
    {
      role: "tool",
      content: [
        { type: "tool-result", toolCallId: "c1", toolName: "weather", output: { type: "json", value: { temp: 21 } } },
        { type: "tool-approval-response", approvalId: "ap1", approved: false, reason: "not allowed" },
        {
          type: "tool-result",
          toolCallId: "c2",
          toolName: "rm",
          output: { type: "execution-denied", reason: "not allowed" },
        },
        {
          type: "tool-result",
          toolCallId: "c3",
          toolName: "shot",
          output: {
            type: "content",
            value: [
              { type: "text", text: "here" },
              { type: "image-data", data: Buffer.from(PNG).toString("base64"), mediaType: "image/png" },
            ],
          },
        },
        { type: "tool-result", toolCallId: "c4", toolName: "x", output: { type: "error-text", value: "boom" } },
        { type: "tool-result", toolCallId: "c5", toolName: "x", output: { type: "error-json", value: { code: 1 } } },
        { type: "tool-result", toolCallId: "c6", toolName: "x", output: { type: "text", value: "ok" } },
      ],
    },
    { role: "assistant", content: "Done.", providerOptions: { openai: { store: false } } },
  ] as ModelMessage[];
}

/** The bundled conversations as ModelMessage lists (id → messages), both protocols (half Anthropic when there are enough). */
export function sampleModelChats(limit = 6): Array<[string, ModelMessage[]]> {
  const all = loadSampleConversations({ source: "all" });
  const anthropic = all.filter((c) => c.protocol === "anthropic").slice(0, Math.floor(limit / 2));
  const openai = all.filter((c) => c.protocol === "openai").slice(0, limit - anthropic.length);
  return [...openai, ...anthropic].map((c) => [c.id, toModelMessages(c.protocol, c.messages)]);
}

/** A ModelMessage list rendered as `useChat` would hold it: one UIMessage per message, tool results in tool parts. */
export function toUIMessages(chatId: string, messages: readonly ModelMessage[]): UIMessage[] {
  const out: UIMessage[] = [];
  const pending = new Map<string, { part: Record<string, unknown> }>();
  messages.forEach((m, i) => {
    const id = `${chatId}-${i}`;
    if (m.role === "tool") {
      for (const p of m.content) {
        if (p.type !== "tool-result") continue;
        const open = pending.get(p.toolCallId);
        if (open) {
          open.part.state = "output-available";
          open.part.output = p.output.type === "text" ? p.output.value : p.output;
        }
      }
      return;
    }
    const content = typeof m.content === "string" ? [{ type: "text" as const, text: m.content }] : m.content;
    const parts: Record<string, unknown>[] = [];
    for (const p of content) {
      if (p.type === "text") parts.push({ type: "text", text: p.text, state: "done" });
      else if (p.type === "reasoning") parts.push({ type: "reasoning", text: p.text, state: "done" });
      else if (p.type === "tool-call") {
        const part: Record<string, unknown> = {
          type: `tool-${p.toolName}`,
          toolCallId: p.toolCallId,
          state: "input-available",
          input: p.input,
        };
        pending.set(p.toolCallId, { part });
        parts.push(part);
      }
    }
    out.push({ id, role: m.role, parts } as UIMessage);
  });
  return out;
}
