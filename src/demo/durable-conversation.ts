/**
 * The durable demo's workflow, shared by the demo and its worker processes:
 * a bundled recorded conversation (taubench airline, OpenAI protocol) played
 * by a `DurableAgent`. Each recorded user turn is appended and the agent loop
 * runs until the model answers in text; the local model server answers with
 * the recorded assistant messages, and each tool returns its recorded output
 * (after a short delay standing in for I/O). The first write-like tool
 * (`book_…`, `update_…`, `cancel_…`) needs a human approval.
 *
 * The program has two versions, to show a deploy under a paused run: `v2`
 * appends {@link V2_SYSTEM_SENTENCE} to the system prompt and adds the tool
 * {@link V2_TOOL} (both change the `llm` steps' input: a run started under v1
 * replays them as drift), and screens the customer before the first model
 * call, a new step (a structural change) behind `patched(`{@link V2_PATCH}`)`
 * so runs recorded without it skip it instead of being blocked.
 *
 * @module
 */
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { jsonSchema, type ModelMessage, type ToolSet, tool } from "ai";
import type { JsonValue } from "../core/json.js";
import type { OpenAIMessage } from "../core/messages.js";
import { DurableAgent } from "../durable/agent.js";
import { patched, step } from "../durable/context.js";
import type { RecordedRequest, ScriptedTurn } from "../testing/model-server.js";
import { loadSampleConversations, type SampleConversation } from "../testing/samples.js";

/** Default conversation: 12 model turns, 5 tool calls, ending with a flight change that needs approval. */
export const DEFAULT_DEMO_CONVERSATION = "taubench-airline-gpt-4o-task07-trial0";
/** Workflow name the demo's runs are stored under. */
export const DEMO_WORKFLOW = "recorded-airline-agent";

/** The demo program's versions: v2 is the deploy made while a v1 run waits for its approval. */
export type DemoProgram = "v1" | "v2";
/** The sentence v2 appends to the system prompt. */
export const V2_SYSTEM_SENTENCE = "Before changing a reservation, restate the new flights and the fare difference.";
/** The tool v2 adds (the recorded model never calls it). */
export const V2_TOOL = "get_loyalty_tier";
/** The patch id guarding v2's new step (`fraud-screen`, before the first model call). */
export const V2_PATCH = "fraud-screen-v2";

/** Text of an OpenAI message content. */
export function contentText(content: unknown): string {
  if (typeof content === "string") return content;
  if (Array.isArray(content)) return content.map((p: { text?: string }) => p.text ?? "").join("");
  return "";
}

/**
 * Loads the demo conversation.
 *
 * @param id - bundled conversation id @default {@link DEFAULT_DEMO_CONVERSATION}
 * @throws {Error} naming the known ids when `id` is not bundled
 */
export function demoConversation(id = DEFAULT_DEMO_CONVERSATION): SampleConversation {
  const all = loadSampleConversations({ protocol: "openai" });
  const conv = all.find((c) => c.id === id);
  if (!conv)
    throw new Error(`no bundled conversation ${JSON.stringify(id)}; known: ${all.map((c) => c.id).join(", ")}`);
  return conv;
}

/** The tool (name) that needs approval: the first write-like tool the recording calls. */
export function approvalTool(recording: readonly OpenAIMessage[]): string | undefined {
  for (const m of recording) {
    if (m.role !== "assistant") continue;
    for (const c of m.tool_calls ?? []) if (/^(book|update|cancel|send)_/.test(c.function.name)) return c.function.name;
  }
  return undefined;
}

/**
 * The recorded model: a request with n messages (system included) is answered
 * with recording[n], which must be an assistant message; the request must
 * match the recording's roles, user texts and tool-call ids so far.
 */
export function recordedModel(recording: readonly OpenAIMessage[]) {
  return (request: RecordedRequest): ScriptedTurn => {
    const sent = (request.body.messages ?? []) as OpenAIMessage[];
    for (const [i, m] of sent.entries()) {
      const r = recording[i];
      const same =
        r !== undefined &&
        r.role === m.role &&
        (m.role !== "user" || contentText(r.content) === contentText(m.content)) &&
        (m.role !== "tool" || (r.role === "tool" && r.tool_call_id === m.tool_call_id));
      if (!same) return { error: { status: 400, message: `request diverges from the recording at message ${i}` } };
    }
    const next = recording[sent.length];
    if (next?.role !== "assistant") {
      return { error: { status: 400, message: `the recording has no assistant message at ${sent.length}` } };
    }
    const text = contentText(next.content);
    return {
      ...(text !== "" ? { text } : {}),
      toolCalls: (next.tool_calls ?? []).map((c) => ({
        id: c.id,
        name: c.function.name,
        arguments: c.function.arguments,
      })),
      chunkSize: 24,
    };
  };
}

/** Indexes of the recorded user messages that the recorded assistant answered. */
function userTurns(recording: readonly OpenAIMessage[]): number[] {
  return recording.flatMap((m, i) => (m.role === "user" && recording[i + 1]?.role === "assistant" ? [i] : []));
}

/**
 * Builds the demo workflow.
 *
 * @param conv - the recorded conversation
 * @param modelUrl - base URL of the local model server (`…/v1`)
 * @param options - `toolDelayMs`: time each tool body takes (default 150); `onTool(name, id)`: called when a
 *   body starts; `program`: `"v1"` (default) or `"v2"` (see the module doc); `onPatch(id, taken)`: called with
 *   what v2's `patched()` answered
 * @returns the workflow function (input ignored; output `{ messages, turns }`)
 */
export function conversationWorkflow(
  conv: SampleConversation,
  modelUrl: string,
  options: {
    toolDelayMs?: number;
    onTool?: (name: string, toolCallId: string) => void;
    program?: DemoProgram;
    onPatch?: (id: string, taken: boolean) => void;
  } = {},
): (input: JsonValue) => Promise<JsonValue> {
  const v2 = options.program === "v2";
  const recording = conv.messages as OpenAIMessage[];
  const outputs = new Map<string, string>();
  const names = new Set<string>();
  for (const m of recording) {
    if (m.role === "assistant") for (const c of m.tool_calls ?? []) names.add(c.function.name);
    if (m.role === "tool") outputs.set(m.tool_call_id, contentText(m.content));
  }
  const needsApproval = approvalTool(recording);
  const tools: ToolSet = {};
  for (const name of names) {
    tools[name] = tool({
      description: `recorded tool ${name}`,
      inputSchema: jsonSchema<Record<string, unknown>>({ type: "object", additionalProperties: true }),
      needsApproval: name === needsApproval,
      execute: async (_input: Record<string, unknown>, { toolCallId }) => {
        options.onTool?.(name, toolCallId);
        await new Promise((r) => setTimeout(r, options.toolDelayMs ?? 150));
        const out = outputs.get(toolCallId);
        if (out === undefined) throw new Error(`no recorded output for tool call ${toolCallId}`);
        return out;
      },
    });
  }
  if (v2) {
    tools[V2_TOOL] = tool({
      description: "the customer's loyalty tier (gold, silver, regular)",
      inputSchema: jsonSchema<{ user_id: string }>({
        type: "object",
        properties: { user_id: { type: "string" } },
        required: ["user_id"],
      }),
      execute: async ({ user_id }) => JSON.stringify({ user_id, tier: "gold" }),
    });
  }
  const first = recording[0];
  const recordedSystem = first?.role === "system" ? contentText(first.content) : undefined;
  const system = v2 ? [recordedSystem, V2_SYSTEM_SENTENCE].filter(Boolean).join(" ") : recordedSystem;
  const agent = new DurableAgent({
    model: createOpenAICompatible({ name: "recorded", baseURL: modelUrl, apiKey: "not-a-secret" })("recorded-gpt-4o"),
    ...(system !== undefined ? { system } : {}),
    tools,
    maxSteps: 50,
    llmRetry: { maxAttempts: 2, backoffMs: 200 },
  });
  const turns = userTurns(recording);
  return async () => {
    if (v2) {
      // a new step before the first model call: structural, so behind a patch (a run recorded
      // without it gets false here and skips it, instead of a ReplayMismatchError and a blocked run)
      const taken = await patched(V2_PATCH);
      options.onPatch?.(V2_PATCH, taken);
      if (taken) await step("fraud-screen", () => ({ risk: "low" }), { input: { conversation: conv.id } });
    }
    let messages: ModelMessage[] = [];
    for (const i of turns) {
      messages = [...messages, { role: "user", content: contentText(recording[i]?.content) }];
      messages = (await agent.run(messages)).messages;
    }
    return { messages: messages as unknown as JsonValue, turns: turns.length };
  };
}

/**
 * Compares the run's final messages with the recording (roles, user and
 * assistant texts, tool-call ids, tool outputs).
 *
 * @returns undefined when they match, else the first difference
 */
export function compareWithRecording(
  recording: readonly OpenAIMessage[],
  messages: ModelMessage[],
): string | undefined {
  const rec = recording.filter((m) => m.role !== "system");
  const flat: { role: string; text: string; ids: string[] }[] = [];
  for (const m of messages) {
    if (m.role === "tool") {
      for (const part of m.content) {
        if (part.type !== "tool-result") continue;
        const out = part.output as { type: string; value?: unknown };
        flat.push({
          role: "tool",
          text: typeof out.value === "string" ? out.value : JSON.stringify(out.value),
          ids: [part.toolCallId],
        });
      }
      continue;
    }
    const parts =
      typeof m.content === "string" ? [{ type: "text", text: m.content }] : (m.content as { type: string }[]);
    flat.push({
      role: m.role,
      text: parts.map((p) => (p.type === "text" ? (p as { text: string }).text : "")).join(""),
      ids: parts.filter((p) => p.type === "tool-call").map((p) => (p as unknown as { toolCallId: string }).toolCallId),
    });
  }
  let end = rec.length;
  while (end > 0 && rec[end - 1]?.role === "user") end--; // a trailing user turn was never answered
  const expected = rec.slice(0, end);
  if (flat.length !== expected.length) return `${flat.length} messages, the recording has ${expected.length}`;
  for (const [i, want] of expected.entries()) {
    const got = flat[i];
    const ids =
      want.role === "assistant"
        ? (want.tool_calls ?? []).map((c) => c.id)
        : want.role === "tool"
          ? [want.tool_call_id]
          : [];
    if (!got || got.role !== want.role || got.text !== contentText(want.content) || got.ids.join() !== ids.join()) {
      return `message ${i + 1}: expected ${want.role} ${JSON.stringify(contentText(want.content).slice(0, 60))}, got ${got?.role} ${JSON.stringify(got?.text.slice(0, 60))}`;
    }
  }
  return undefined;
}
