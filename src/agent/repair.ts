/**
 * History repair: keeps a stored conversation in a state the model API
 * accepts after a crash, an aborted stream or a failed write.
 *
 * The faults it repairs, and how (every action is reported, nothing is
 * silently discarded — see {@link RepairAction}):
 *
 * - **A tool call without its result** (the process died while the tool ran;
 *   cf. letta-ai/letta#3273, PB-01): policy `"interrupted"` (default) inserts,
 *   directly after the assistant message and before anything else, a result
 *   per missing call saying the execution was interrupted (`is_error` for
 *   Anthropic; the tool message carries `interrupted: true`, a field the
 *   providers never see). Policy `"rerun"` leaves the calls pending so the
 *   conversation loop re-runs the tools (see `conversation.ts`).
 * - **A result without its call** (an orphaned `tool` message or
 *   `tool_result` block): removed, because no provider accepts it.
 * - **A tool call whose arguments are not JSON** (half a streamed call): the
 *   call and any result for it are removed.
 * - **An empty assistant message** (no text, no tool calls): removed.
 *
 * Repair is idempotent: a repaired history has nothing left to repair.
 *
 * @module
 */
import type { AnthropicMessage, Message, OpenAIMessage, Protocol } from "../core/messages.js";

/** What to do with a tool call that has no result. */
export type RepairPolicy = "interrupted" | "rerun";

/** Text of the synthetic result added for an interrupted tool call. */
export const INTERRUPTED_RESULT =
  "tool execution was interrupted before it returned a result (the process stopped); it may or may not have taken effect";

/** One change made by {@link repairHistory}. */
export interface RepairAction {
  /** What was done. */
  kind: "interrupted-result-added" | "orphan-result-removed" | "invalid-call-removed" | "empty-assistant-removed";
  /** Index (in the ORIGINAL history) of the message concerned. */
  index: number;
  /** The tool call id concerned, when there is one. */
  toolCallId?: string;
}

/** A tool call still waiting for its result. */
export interface PendingToolCall {
  /** Index of the assistant message holding the call. */
  index: number;
  /** Call id (`tool_calls[].id` / `tool_use.id`). */
  id: string;
  /** Tool name. */
  name: string;
  /** Arguments as JSON text. */
  arguments: string;
}

/** Result of {@link repairHistory}. */
export interface RepairResult {
  /** The repaired history (a new array; the input is not modified). */
  history: Message[];
  /** What was changed; empty when the history was already valid. */
  actions: RepairAction[];
  /** Calls left unanswered (only with policy `"rerun"`): the caller must run them and append their results. */
  pending: PendingToolCall[];
}

type Obj = Record<string, unknown>;

function isValidJson(text: unknown): boolean {
  if (typeof text !== "string") return false;
  try {
    JSON.parse(text);
    return true;
  } catch {
    return false;
  }
}

function emptyContent(content: unknown): boolean {
  return (
    content === undefined ||
    content === null ||
    (typeof content === "string" && content.trim() === "") ||
    (Array.isArray(content) && content.length === 0)
  );
}

/**
 * Repairs a history so that it can be sent to the provider.
 *
 * @param protocol - `openai` or `anthropic` (the shape of `history`)
 * @param history - the stored messages (not modified)
 * @param policy - `"interrupted"` (default): answer unanswered calls with {@link INTERRUPTED_RESULT};
 *   `"rerun"`: leave the LAST message's unanswered calls pending for the caller to run (earlier ones,
 *   which a later message already followed, are always answered as interrupted)
 * @returns the repaired history, the actions taken and the calls left pending
 * @example
 * const { history, actions } = repairHistory("openai", agent.history);
 * if (actions.length) agent.history = history;
 */
export function repairHistory(
  protocol: Protocol,
  history: readonly Message[],
  policy: RepairPolicy = "interrupted",
): RepairResult {
  return protocol === "openai"
    ? repairOpenAI(history as OpenAIMessage[], policy)
    : repairAnthropic(history as AnthropicMessage[], policy);
}

/**
 * Lists the tool calls in a history that have no result (what a load must surface, PB-01).
 *
 * @param protocol - `openai` or `anthropic`
 * @param history - the messages
 * @returns unanswered calls in history order (empty for a valid history)
 */
export function findPendingToolCalls(protocol: Protocol, history: readonly Message[]): PendingToolCall[] {
  const r = repairHistory(protocol, history, "rerun");
  const lastPending = r.pending;
  const interrupted = r.actions.filter((a) => a.kind === "interrupted-result-added");
  const earlier: PendingToolCall[] = [];
  for (const a of interrupted) {
    const msg = history[a.index] as Obj | undefined;
    const call = callsOf(protocol, msg).find((c) => c.id === a.toolCallId);
    if (call) earlier.push({ ...call, index: a.index });
  }
  return [...earlier, ...lastPending];
}

/**
 * True when the history needs no repair.
 *
 * @param protocol - `openai` or `anthropic`
 * @param history - the messages
 * @returns whether {@link repairHistory} would change nothing
 */
export function isHistoryValid(protocol: Protocol, history: readonly Message[]): boolean {
  const r = repairHistory(protocol, history, "rerun");
  return r.actions.length === 0 && r.pending.length === 0;
}

function callsOf(protocol: Protocol, m: Obj | undefined): Omit<PendingToolCall, "index">[] {
  if (m?.role !== "assistant") return [];
  if (protocol === "openai") {
    return ((m.tool_calls as Obj[] | undefined) ?? []).map((c) => {
      const fn = c.function as Obj;
      return { id: String(c.id), name: String(fn.name), arguments: String(fn.arguments) };
    });
  }
  if (!Array.isArray(m.content)) return [];
  return (m.content as Obj[])
    .filter((b) => b.type === "tool_use")
    .map((b) => ({ id: String(b.id), name: String(b.name), arguments: JSON.stringify(b.input ?? {}) }));
}

function repairOpenAI(history: readonly OpenAIMessage[], policy: RepairPolicy): RepairResult {
  const out: Message[] = [];
  const actions: RepairAction[] = [];
  const pending: PendingToolCall[] = [];
  let open: { index: number; ids: string[]; answered: Set<string> } | undefined;
  const close = (atEnd: boolean) => {
    if (!open) return;
    for (const id of open.ids) {
      if (open.answered.has(id)) continue;
      if (atEnd && policy === "rerun") {
        const call = callsOf("openai", history[open.index] as Obj).find((c) => c.id === id);
        if (call) pending.push({ ...call, index: open.index });
        continue;
      }
      out.push({ role: "tool", tool_call_id: id, content: INTERRUPTED_RESULT, interrupted: true } as OpenAIMessage);
      actions.push({ kind: "interrupted-result-added", index: open.index, toolCallId: id });
    }
    open = undefined;
  };
  history.forEach((raw, index) => {
    const m = raw as Obj;
    if (m.role === "tool") {
      const id = String(m.tool_call_id);
      if (open?.ids.includes(id) && !open.answered.has(id)) {
        open.answered.add(id);
        out.push(raw);
      } else actions.push({ kind: "orphan-result-removed", index, toolCallId: id });
      return;
    }
    close(false);
    if (m.role === "assistant") {
      let message = raw as Obj;
      const calls = (m.tool_calls as Obj[] | undefined) ?? [];
      const valid = calls.filter((c) => isValidJson((c.function as Obj | undefined)?.arguments));
      if (valid.length !== calls.length) {
        for (const c of calls) {
          if (!valid.includes(c)) actions.push({ kind: "invalid-call-removed", index, toolCallId: String(c.id) });
        }
        message = { ...m };
        if (valid.length > 0) message.tool_calls = valid;
        else delete message.tool_calls;
      }
      const hasCalls = Array.isArray(message.tool_calls) && message.tool_calls.length > 0;
      if (!hasCalls && emptyContent(message.content)) {
        actions.push({ kind: "empty-assistant-removed", index });
        return;
      }
      out.push(message as OpenAIMessage);
      if (hasCalls) open = { index, ids: (message.tool_calls as Obj[]).map((c) => String(c.id)), answered: new Set() };
      return;
    }
    out.push(raw);
  });
  close(true);
  return { history: out, actions, pending };
}

function repairAnthropic(history: readonly AnthropicMessage[], policy: RepairPolicy): RepairResult {
  const out: Message[] = [];
  const actions: RepairAction[] = [];
  const pending: PendingToolCall[] = [];
  // ids of tool_use blocks of the previous (assistant) message, with its index
  let uses: { index: number; ids: string[] } | undefined;
  const synthetic = (ids: string[]): Obj[] =>
    ids.map((id) => ({ type: "tool_result", tool_use_id: id, is_error: true, content: INTERRUPTED_RESULT }));

  history.forEach((raw, index) => {
    const m = raw as Obj;
    const blocks = Array.isArray(m.content) ? (m.content as Obj[]) : undefined;
    if (m.role === "user") {
      let content: unknown = m.content;
      const open = uses;
      uses = undefined;
      if (blocks) {
        const allowed = new Set(open?.ids ?? []);
        const kept = blocks.filter((b) => {
          if (b.type !== "tool_result") return true;
          const id = String(b.tool_use_id);
          if (allowed.has(id)) {
            allowed.delete(id);
            return true;
          }
          actions.push({ kind: "orphan-result-removed", index, toolCallId: id });
          return false;
        });
        const missing = [...allowed];
        for (const id of missing)
          actions.push({ kind: "interrupted-result-added", index: open?.index ?? index, toolCallId: id });
        // tool_result blocks must come first in the user message
        content = missing.length > 0 ? [...synthetic(missing), ...kept] : kept;
      } else if (open && open.ids.length > 0) {
        for (const id of open.ids)
          actions.push({ kind: "interrupted-result-added", index: open.index, toolCallId: id });
        out.push({ role: "user", content: synthetic(open.ids) } as AnthropicMessage);
      }
      if (Array.isArray(content) && content.length === 0) return; // only orphans: nothing left to send
      out.push(content === m.content ? raw : ({ ...m, content } as AnthropicMessage));
      return;
    }
    // assistant
    if (uses && uses.ids.length > 0) {
      for (const id of uses.ids) actions.push({ kind: "interrupted-result-added", index: uses.index, toolCallId: id });
      out.push({ role: "user", content: synthetic(uses.ids) } as AnthropicMessage);
    }
    uses = undefined;
    if (emptyContent(m.content)) {
      actions.push({ kind: "empty-assistant-removed", index });
      return;
    }
    out.push(raw);
    if (blocks) {
      const ids = blocks.filter((b) => b.type === "tool_use").map((b) => String(b.id));
      if (ids.length > 0) uses = { index, ids };
    }
  });
  if (uses && uses.ids.length > 0) {
    if (policy === "rerun") {
      const open = uses;
      for (const c of callsOf("anthropic", history[open.index] as Obj)) pending.push({ ...c, index: open.index });
    } else {
      for (const id of uses.ids) actions.push({ kind: "interrupted-result-added", index: uses.index, toolCallId: id });
      out.push({ role: "user", content: synthetic(uses.ids) } as AnthropicMessage);
    }
  }
  return { history: out, actions, pending };
}
