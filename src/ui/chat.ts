/**
 * A page of a stored conversation rendered as a chat: user, assistant, system
 * and tool messages of either protocol (OpenAI chat or Anthropic blocks), tool
 * calls beside their results, reasoning folded away, partial (interrupted)
 * messages marked. Messages another library stored in an envelope (AI SDK,
 * OpenAI Agents) are shown with their one-line preview and their JSON. Every
 * stored string goes through {@link h}, so it is text, never markup.
 *
 * @module
 */
import type { Message } from "../core/messages.js";
import { previewMessage } from "../ops/stats.js";
import { clip, type Html, h, jsonBlock } from "./html.js";

type Obj = Record<string, unknown>;

/** One tool call found in a message, with its result when the page holds it. */
interface CallView {
  id: string;
  name: string;
  args: unknown;
}

const isObj = (v: unknown): v is Obj => v !== null && typeof v === "object" && !Array.isArray(v);

/** Arguments as stored: an OpenAI `arguments` string is shown parsed when it is JSON. */
function parseArgs(text: unknown): unknown {
  if (typeof text !== "string") return text;
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

function callsOf(m: Obj): CallView[] {
  const out: CallView[] = [];
  if (Array.isArray(m.tool_calls)) {
    for (const c of m.tool_calls) {
      if (!isObj(c)) continue;
      const fn = isObj(c.function) ? c.function : {};
      out.push({ id: String(c.id ?? ""), name: String(fn.name ?? "?"), args: parseArgs(fn.arguments) });
    }
  }
  if (Array.isArray(m.content)) {
    for (const b of m.content) {
      if (isObj(b) && b.type === "tool_use")
        out.push({ id: String(b.id ?? ""), name: String(b.name ?? "?"), args: b.input });
    }
  }
  return out;
}

/** The results a message carries: an OpenAI `tool` message, or Anthropic `tool_result` blocks. */
function resultsOf(m: Obj): { id: string; content: unknown; isError: boolean }[] {
  if (m.role === "tool") return [{ id: String(m.tool_call_id ?? ""), content: parseArgs(m.content), isError: false }];
  const out: { id: string; content: unknown; isError: boolean }[] = [];
  if (Array.isArray(m.content)) {
    for (const b of m.content) {
      if (isObj(b) && b.type === "tool_result") {
        out.push({ id: String(b.tool_use_id ?? ""), content: b.content, isError: b.is_error === true });
      }
    }
  }
  return out;
}

function resultBody(content: unknown): Html {
  if (typeof content === "string") return h`<pre>${clip(content)}</pre>`;
  if (Array.isArray(content) && content.every((p) => isObj(p) && p.type === "text")) {
    return h`<pre>${clip(content.map((p) => String((p as Obj).text ?? "")).join("\n"))}</pre>`;
  }
  return jsonBlock(content);
}

function textParts(m: Obj): { texts: string[]; reasoning: string[]; other: unknown[] } {
  const texts: string[] = [];
  const reasoning: string[] = [];
  const other: unknown[] = [];
  for (const field of ["reasoning_content", "reasoning"]) {
    if (typeof m[field] === "string" && m[field] !== "") reasoning.push(m[field] as string);
  }
  if (typeof m.content === "string") texts.push(m.content);
  else if (Array.isArray(m.content)) {
    for (const b of m.content) {
      if (!isObj(b)) continue;
      if (b.type === "text") texts.push(String(b.text ?? ""));
      else if (b.type === "thinking" || b.type === "reasoning") reasoning.push(String(b.thinking ?? b.text ?? ""));
      else if (b.type === "redacted_thinking") reasoning.push("(redacted thinking)");
      else if (b.type === "tool_use" || b.type === "tool_result") continue;
      else other.push(b);
    }
  }
  return { texts, reasoning, other };
}

const ENVELOPES = ["aiSdk", "openaiAgents"];
/** A system message longer than this (characters) is folded under its first line. */
const LONG_SYSTEM = 400;

/**
 * Renders messages `offset … offset + messages.length - 1` of a history.
 * A tool call whose result is on the same page is shown beside it, and the
 * result message is not repeated; a result whose call is on another page is
 * shown on its own with the call id.
 *
 * @param messages - the page's messages, in order
 * @param offset - index of the first one in the whole history
 * @returns the chat fragment
 */
export function renderChat(messages: readonly Message[], offset: number): Html {
  const results = new Map<string, { content: unknown; isError: boolean; index: number }>();
  messages.forEach((msg, i) => {
    for (const r of resultsOf(msg as Obj)) if (r.id !== "") results.set(r.id, { ...r, index: offset + i });
  });
  const shownWithCall = new Set<string>();
  const items = messages.map((msg, i) => {
    const m = msg as Obj;
    const index = offset + i;
    const envelope = ENVELOPES.find((f) => isObj(m[f]));
    const role = typeof m.role === "string" ? m.role : envelope ? envelope : "?";
    const partial = m.partial === true;
    const roleClass = ["user", "assistant", "system", "tool"].includes(role) ? role : "other";
    const meta = h`<div class="meta"><span>#${index}</span><strong>${role}</strong>${partial ? h`<span class="tag" title="the stream stopped before the model finished">partial</span>` : ""}${typeof m.name === "string" ? h`<span>${m.name}</span>` : ""}</div>`;
    if (envelope) {
      return h`<article class="msg ${roleClass}" data-index="${index}">${meta}<div class="text">${previewMessage(msg, 400)}</div><details><summary class="small muted">stored ${envelope} message</summary>${jsonBlock(m[envelope])}</details></article>`;
    }
    const own = resultsOf(m);
    if (own.length > 0 && own.every((r) => shownWithCall.has(r.id))) {
      return h`<article class="msg tool collapsed small muted" data-index="${index}">#${index} ${role}: result shown beside its call above</article>`;
    }
    const { texts, reasoning, other } = textParts(m);
    const calls = callsOf(m);
    for (const c of calls) if (results.has(c.id) && (results.get(c.id)?.index ?? -1) > index) shownWithCall.add(c.id);
    const standaloneResults = own.filter((r) => !shownWithCall.has(r.id));
    return h`<article class="msg ${roleClass}${partial ? " partial" : ""}" data-index="${index}">
${meta}
${reasoning.map((r) => h`<details class="reasoning"><summary>reasoning</summary><div class="text">${clip(r)}</div></details>`)}
${texts
  .filter((t) => t !== "")
  .map((t) =>
    role === "system" && t.length > LONG_SYSTEM
      ? h`<details><summary class="small">${t.slice(0, 120).split("\n")[0]}… (${t.length} characters)</summary><div class="text">${clip(t)}</div></details>`
      : h`<div class="text">${clip(t)}</div>`,
  )}
${other.map((o) => jsonBlock(o))}
${calls.map((c) => {
  const r = results.get(c.id);
  return h`<div class="call" data-tool-call="${c.id}">
<div><h4>→ tool call <code>${c.name}</code> <span class="muted">${c.id}</span></h4>${jsonBlock(c.args)}</div>
<div><h4>← result${r ? h` <span class="muted">(#${r.index})</span>` : ""}${r?.isError ? h` <span class="tag">error</span>` : ""}</h4>${r ? resultBody(r.content) : h`<p class="muted small">not on this page</p>`}</div>
</div>`;
})}
${standaloneResults.map((r) => h`<div class="call"><div><h4>← result of <span class="muted">${r.id}</span>${r.isError ? h` <span class="tag">error</span>` : ""}</h4></div><div>${resultBody(r.content)}</div></div>`)}
</article>`;
  });
  return h`<section class="chat">${items}</section>`;
}
