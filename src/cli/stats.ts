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
import type { Message } from "../core/messages.js";
import { oneLine } from "./output.js";

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
