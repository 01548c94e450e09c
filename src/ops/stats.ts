/**
 * Streaming statistics of a history for `dumplings show`: message counts by
 * role, tool calls by tool name, and the last N messages, computed in one
 * pass with memory bounded by N (so a 100,000-message history streamed with
 * `iterHistory` never sits in memory at once).
 *
 * Both protocols are understood: OpenAI chat (`assistant.tool_calls[]`) and
 * Anthropic Messages (`tool_use` content blocks).
 *
 * @module
 */
import { CHAT_FIELD } from "../ai-sdk/chat-store.js";
import type { Message } from "../core/messages.js";
import { SESSION_FIELD } from "../openai-agents/session.js";
import { oneLine } from "./format.js";

/** What {@link HistoryStats} gathered. */
export interface HistorySummary {
  /** Number of messages. */
  total: number;
  /** Message count per role, in order of first appearance. */
  byRole: Record<string, number>;
  /** Number of tool calls requested by the model. */
  toolCalls: number;
  /** Tool-call count per tool name, most used first. */
  toolCallsByName: Record<string, number>;
  /** The last messages with their 0-based index in the history. */
  last: { index: number; message: Message }[];
}

/**
 * One-pass accumulator of a history's statistics.
 *
 * @example
 * const stats = new HistoryStats(5);
 * for await (const m of iterHistory(key)) stats.add(m);
 * console.log(stats.summary());
 */
export class HistoryStats {
  private total = 0;
  private readonly roles = new Map<string, number>();
  private readonly tools = new Map<string, number>();
  private toolCalls = 0;
  private readonly ring: { index: number; message: Message }[] = [];

  /** @param keepLast - how many trailing messages to keep (0 keeps none) */
  constructor(private readonly keepLast: number) {}

  /** Adds the next message of the history. */
  add(message: Message): void {
    const role = typeof message.role === "string" ? message.role : "?";
    this.roles.set(role, (this.roles.get(role) ?? 0) + 1);
    for (const name of toolCallNames(message)) {
      this.toolCalls++;
      this.tools.set(name, (this.tools.get(name) ?? 0) + 1);
    }
    if (this.keepLast > 0) {
      this.ring.push({ index: this.total, message });
      if (this.ring.length > this.keepLast) this.ring.shift();
    }
    this.total++;
  }

  /** The statistics gathered so far. */
  summary(): HistorySummary {
    return {
      total: this.total,
      byRole: Object.fromEntries(this.roles),
      toolCalls: this.toolCalls,
      toolCallsByName: Object.fromEntries([...this.tools].sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]))),
      last: [...this.ring],
    };
  }
}

/**
 * Names of the tools a message asks to call (OpenAI `tool_calls[].function.name`,
 * Anthropic `tool_use` blocks' `name`).
 *
 * @param message - a history message of either protocol
 * @returns one name per tool call, in order (empty when none)
 */
export function toolCallNames(message: Message): string[] {
  const inner = envelopeOf(message);
  if (inner) return envelopeToolNames(inner);
  const names: string[] = [];
  const calls = (message as { tool_calls?: unknown }).tool_calls;
  if (Array.isArray(calls)) {
    for (const call of calls) {
      const name = (call as { function?: { name?: unknown } })?.function?.name;
      names.push(typeof name === "string" ? name : "?");
    }
  }
  const content = (message as { content?: unknown }).content;
  if (Array.isArray(content)) {
    for (const block of content) {
      if ((block as { type?: unknown })?.type === "tool_use") {
        const name = (block as { name?: unknown }).name;
        names.push(typeof name === "string" ? name : "?");
      }
    }
  }
  return names;
}

/**
 * Counts the tool calls of a whole history.
 *
 * @param history - messages of either protocol
 * @returns the number of tool calls the model requested
 */
export function countToolCalls(history: Iterable<Message>): number {
  let n = 0;
  for (const m of history) n += toolCallNames(m).length;
  return n;
}

/**
 * A one-line preview of a message: its text, tool calls (`→ name(args)`) and
 * tool results (`← …`), control characters escaped.
 *
 * @param message - a history message of either protocol
 * @param max - longest preview, in characters @default 160
 * @returns the preview (without the role)
 */
export function previewMessage(message: Message, max = 160): string {
  const inner = envelopeOf(message);
  if (inner) return oneLine(envelopePreview(inner), max);
  const parts: string[] = [];
  const content = (message as { content?: unknown }).content;
  if (typeof content === "string") parts.push(content);
  else if (Array.isArray(content)) {
    for (const block of content as Record<string, unknown>[]) {
      switch (block?.type) {
        case "text":
          parts.push(String(block.text ?? ""));
          break;
        case "thinking":
          parts.push("[thinking]");
          break;
        case "tool_use":
          parts.push(`→ ${String(block.name)}(${JSON.stringify(block.input ?? {})})`);
          break;
        case "tool_result":
          parts.push(`← ${typeof block.content === "string" ? block.content : JSON.stringify(block.content ?? "")}`);
          break;
        default:
          parts.push(`[${String(block?.type)}]`);
      }
    }
  }
  const calls = (message as { tool_calls?: unknown }).tool_calls;
  if (Array.isArray(calls)) {
    for (const call of calls as { function?: { name?: unknown; arguments?: unknown } }[]) {
      parts.push(`→ ${String(call?.function?.name)}(${String(call?.function?.arguments ?? "")})`);
    }
  }
  const text = parts
    .map((p) => p.trim())
    .filter((p) => p !== "")
    .join(" ");
  return oneLine(text, max);
}

type Obj = Record<string, unknown>;

/**
 * The message another library stored in an envelope (an AI SDK chat's
 * `UIMessage`/`ModelMessage` under `aiSdk`, an OpenAI Agents session item
 * under `openaiAgents`), or undefined for a message of the history's own
 * protocol.
 */
function envelopeOf(message: Message): Obj | undefined {
  const m = message as Obj;
  for (const field of [CHAT_FIELD, SESSION_FIELD]) {
    const inner = m[field];
    if (inner !== null && typeof inner === "object" && !Array.isArray(inner)) return inner as Obj;
  }
  return undefined;
}

/** The parts of an enveloped message: UIMessage `parts`, ModelMessage `content`, an Agents item's `content`. */
function envelopeParts(inner: Obj): Obj[] {
  const list = Array.isArray(inner.parts) ? inner.parts : Array.isArray(inner.content) ? inner.content : [];
  return list.filter((p): p is Obj => p !== null && typeof p === "object");
}

/** Tool names called by an enveloped message (AI SDK tool parts, Agents `function_call` items). */
function envelopeToolNames(inner: Obj): string[] {
  if (inner.type === "function_call") return [String(inner.name ?? "?")];
  const names: string[] = [];
  for (const p of envelopeParts(inner)) {
    const type = String(p.type ?? "");
    if (type === "tool-call") names.push(String(p.toolName ?? "?"));
    else if (type === "dynamic-tool") names.push(String(p.toolName ?? "?"));
    else if (type.startsWith("tool-") && type !== "tool-result" && type !== "tool-approval-request") {
      names.push(type.slice("tool-".length));
    }
  }
  return names;
}

/** A preview of an enveloped message: its text, tool calls (`→`) and results (`←`). */
function envelopePreview(inner: Obj): string {
  const json = (v: unknown) => (typeof v === "string" ? v : JSON.stringify(v ?? null));
  switch (inner.type) {
    case "function_call":
      return `→ ${String(inner.name)}(${json(inner.arguments)})`;
    case "function_call_result":
    case "function_call_output":
      return `← ${json(inner.output)}`;
    case "reasoning":
      return "[reasoning]";
  }
  if (typeof inner.content === "string") return inner.content;
  const out: string[] = [];
  for (const p of envelopeParts(inner)) {
    const type = String(p.type ?? "");
    if (typeof p.text === "string" && (type === "text" || type.endsWith("_text"))) out.push(p.text);
    else if (type === "tool-call") out.push(`→ ${String(p.toolName)}(${json(p.input)})`);
    else if (type === "tool-result") out.push(`← ${json((p.output as Obj | undefined)?.value ?? p.output)}`);
    else if (type.startsWith("tool-") || type === "dynamic-tool") {
      const name = type === "dynamic-tool" ? String(p.toolName) : type.slice("tool-".length);
      out.push(`→ ${name}(${json(p.input)})${p.output !== undefined ? ` ← ${json(p.output)}` : ""}`);
    } else if (type !== "step-start") out.push(`[${type}]`);
  }
  return out
    .map((t) => t.trim())
    .filter((t) => t !== "")
    .join(" ");
}
