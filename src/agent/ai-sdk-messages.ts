/**
 * Conversion between the two history shapes an agent stores (OpenAI chat
 * messages for `BaseAgent`, Anthropic Messages for `AnthropicAgent`) and the
 * AI SDK's `ModelMessage` list that `generateText` / `streamText` take and
 * return. This is the ONE place where that mapping lives.
 *
 * Rule: a history converted to model messages and back is deep-equal to the
 * original. Everything the AI SDK shape has no field for (extra message
 * fields such as a tool message's `name`, `content: null` vs `""`, text parts
 * vs plain strings, non-canonical argument JSON, an Anthropic `caller`, a
 * block type the SDK does not model) travels in
 * `providerOptions.dumplings`, a namespace no provider reads. Messages the
 * model produced (no `dumplings` options) come back in each protocol's
 * canonical shape.
 *
 * Images and files (a history is JSON, so binary data is stored as base64):
 * an AI SDK `image` part becomes an OpenAI `image_url` part / an Anthropic
 * `image` block, a `file` part an OpenAI `file` part (`file.file_data`) /
 * an Anthropic `document` block. `Uint8Array`, `ArrayBuffer` and bare base64
 * data are stored as a base64 data URL (media type as given, else sniffed for
 * images: PNG, JPEG, GIF, WebP); a `URL` as its text. Read back, a base64 data
 * URL is `{ image | data: "<base64>", mediaType }`, an http(s) URL a `URL`
 * (so bytes come back as base64 text, not as a `Uint8Array`: the chat store of
 * `dumplings-ai/ai-sdk` keeps the types). A stored value that is neither is
 * kept as text, never a `TypeError`.
 *
 * Anthropic user messages that mix `tool_result` blocks and other blocks are
 * split into an AI SDK `tool` message and a `user` message (the AI SDK's
 * shape); the pieces carry `dumplings.join` so they merge back into one
 * message. The Anthropic provider merges them again on the wire.
 *
 * @module
 */
import type {
  AssistantModelMessage,
  ModelMessage,
  TextPart,
  ToolCallPart,
  ToolModelMessage,
  ToolResultPart,
  UserModelMessage,
} from "ai";

type ReasoningPart = Extract<Exclude<AssistantModelMessage["content"], string>[number], { type: "reasoning" }>;

import { DumplingsError } from "../core/errors.js";
import type { JsonObject, JsonValue } from "../core/json.js";
import type { AnthropicMessage, Message, OpenAIMessage, Protocol } from "../core/messages.js";

/** The `providerOptions` namespace holding round-trip information. */
export const ROUND_TRIP_NAMESPACE = "dumplings";

/** A message or block cannot be converted (for example a legacy `function` role message). */
export class MessageConversionError extends DumplingsError {
  /** Index of the offending history message. */
  readonly messageIndex: number;
  constructor(messageIndex: number, message: string) {
    super("MESSAGE_CONVERSION", `history[${messageIndex}]: ${message}`);
    this.messageIndex = messageIndex;
  }
}

type Obj = Record<string, unknown>;
type Dumplings = { [key: string]: JsonValue };
type UserPart = Exclude<UserModelMessage["content"], string>[number];
type AssistantPart = Exclude<AssistantModelMessage["content"], string>[number];

function pick(obj: Obj, known: readonly string[]): JsonObject | undefined {
  const extra: JsonObject = {};
  let any = false;
  for (const [k, v] of Object.entries(obj)) {
    if (known.includes(k) || v === undefined) continue;
    extra[k] = v as JsonValue;
    any = true;
  }
  return any ? extra : undefined;
}

function opts(d: Dumplings): { providerOptions?: { dumplings: Dumplings } } {
  return Object.keys(d).length > 0
    ? { providerOptions: { [ROUND_TRIP_NAMESPACE]: d } as { dumplings: Dumplings } }
    : {};
}

function dumplingsOf(x: object): Dumplings {
  const po = (x as { providerOptions?: unknown }).providerOptions as Record<string, Dumplings> | undefined;
  return po?.[ROUND_TRIP_NAMESPACE] ?? {};
}

function withExtra<T extends Obj>(base: T, d: Dumplings): T {
  const extra = d.extra as JsonObject | undefined;
  return extra ? { ...base, ...extra } : base;
}

function parseArgs(text: string): { input: unknown; exact: boolean; valid: boolean } {
  try {
    const input = JSON.parse(text) as unknown;
    return { input, exact: JSON.stringify(input) === text, valid: true };
  } catch {
    return { input: {}, exact: false, valid: false };
  }
}

// ---------------------------------------------------------------- OpenAI

/**
 * Converts an OpenAI chat history to AI SDK model messages.
 *
 * @param history - OpenAI chat messages (system, user, assistant with `tool_calls`, tool)
 * @returns model messages; `tool` results get their tool name from the call they answer
 * @throws {MessageConversionError} for a legacy `function` role message
 * @example
 * openAIToModelMessages([{ role: "user", content: "hi" }]) // [{ role: "user", content: "hi" }]
 */
export function openAIToModelMessages(history: readonly OpenAIMessage[]): ModelMessage[] {
  const toolNames = new Map<string, string>();
  const out: ModelMessage[] = [];
  history.forEach((raw, index) => {
    const m = raw as Obj;
    const role = m.role as string;
    const content = m.content;
    if (role === "system" || role === "developer") {
      const d: Dumplings = {};
      const extra = pick(m, ["role", "content"]);
      if (extra) d.extra = extra;
      if (role === "developer") d.role = "developer";
      let text: string;
      if (typeof content === "string") text = content;
      else {
        d.content = content as JsonValue;
        text = Array.isArray(content) ? content.map((p) => String((p as Obj).text ?? "")).join("") : "";
      }
      out.push({ role: "system", content: text, ...opts(d) });
      return;
    }
    if (role === "user") {
      const d: Dumplings = {};
      const extra = pick(m, ["role", "content"]);
      if (extra) d.extra = extra;
      if (typeof content === "string") out.push({ role: "user", content, ...opts(d) });
      else if (content === null) {
        d.content = null;
        out.push({ role: "user", content: "", ...opts(d) });
      } else {
        out.push({ role: "user", content: (content as Obj[]).map(userPartFromOpenAI), ...opts(d) });
      }
      return;
    }
    if (role === "assistant") {
      const d: Dumplings = {};
      const extra = pick(m, ["role", "content", "tool_calls"]);
      if (extra) d.extra = extra;
      const parts: AssistantPart[] = [];
      if (content === undefined) d.content = "absent";
      else if (content === null) d.content = "null";
      else if (typeof content === "string") {
        if (content !== "") parts.push({ type: "text", text: content });
        else d.content = "empty";
      } else {
        d.content = "parts";
        for (const p of content as Obj[]) parts.push(userPartFromOpenAI(p) as TextPart);
      }
      const calls = m.tool_calls as Obj[] | undefined;
      if (calls !== undefined) {
        if (calls.length === 0) d.toolCalls = "empty";
        for (const c of calls) {
          const fn = c.function as Obj;
          const args = String(fn.arguments);
          const parsed = parseArgs(args);
          const cd: Dumplings = {};
          if (!parsed.exact) cd.arguments = args;
          if (c.type === undefined) cd.noType = true;
          const cExtra = pick(c, ["id", "type", "function"]);
          if (cExtra) cd.extra = cExtra;
          const fnExtra = pick(fn, ["name", "arguments"]);
          if (fnExtra) cd.functionExtra = fnExtra;
          toolNames.set(String(c.id), String(fn.name));
          parts.push({
            type: "tool-call",
            toolCallId: String(c.id),
            toolName: String(fn.name),
            input: parsed.input,
            ...opts(cd),
          });
        }
      }
      if (parts.length === 0 && d.content !== "parts") {
        out.push({ role: "assistant", content: "", ...opts(d) });
      } else out.push({ role: "assistant", content: parts, ...opts(d) });
      return;
    }
    if (role === "tool") {
      const d: Dumplings = {};
      const extra = pick(m, ["role", "content", "tool_call_id"]);
      if (extra) d.extra = extra;
      const id = String(m.tool_call_id);
      const toolName = toolNames.get(id) ?? (typeof m.name === "string" ? m.name : "unknown_tool");
      let output: ToolResultPart["output"];
      if (typeof content === "string") output = { type: "text", value: content };
      else if (content === null) {
        d.content = null;
        output = { type: "text", value: "" };
      } else {
        d.content = content as JsonValue;
        output = {
          type: "content",
          value: (content as Obj[]).map((p) => ({ type: "text" as const, text: String(p.text ?? JSON.stringify(p)) })),
        };
      }
      out.push({ role: "tool", content: [{ type: "tool-result", toolCallId: id, toolName, output }], ...opts(d) });
      return;
    }
    throw new MessageConversionError(index, `role ${JSON.stringify(role)} cannot be sent through the AI SDK`);
  });
  return out;
}

function userPartFromOpenAI(p: Obj): UserPart {
  if (p.type === "text") {
    const extra = pick(p, ["type", "text"]);
    return { type: "text", text: String(p.text), ...opts(extra ? { extra } : {}) };
  }
  if (p.type === "image_url") {
    const url = String((p.image_url as Obj | undefined)?.url ?? "");
    const data = parseDataUrl(url);
    // a base64 data URL → base64 + mediaType (what fromModelMessages wrote); an http(s) URL → URL;
    // anything else (a bare base64 string from an older version) as is: never a TypeError
    const image = data ? data.base64 : URL.canParse(url) ? new URL(url) : url;
    return {
      type: "image",
      image,
      ...(data ? { mediaType: data.mediaType } : {}),
      ...opts({ block: p as JsonObject }),
    };
  }
  if (p.type === "file") {
    const file = (p.file ?? {}) as Obj;
    const raw = typeof file.file_data === "string" ? file.file_data : "";
    const data = parseDataUrl(raw);
    const filename = typeof file.filename === "string" ? file.filename : undefined;
    if (data || URL.canParse(raw)) {
      return {
        type: "file",
        data: data ? data.base64 : new URL(raw),
        mediaType: data?.mediaType ?? "application/octet-stream",
        ...(filename !== undefined ? { filename } : {}),
        ...opts({ block: p as JsonObject }),
      };
    }
  }
  return { type: "text", text: JSON.stringify(p), ...opts({ block: p as JsonObject }) };
}

/** `data:<mediaType>;base64,<payload>` split in its parts, or undefined for anything else. */
function parseDataUrl(url: string): { mediaType: string; base64: string } | undefined {
  const m = /^data:([^;,]*)(?:;[^;,=]+=[^;,]*)*;base64,(.*)$/s.exec(url);
  return m ? { mediaType: m[1] || "application/octet-stream", base64: m[2] as string } : undefined;
}

/** Base64 of binary data (Uint8Array, Buffer, ArrayBuffer); a string is taken as base64 already. */
function base64Of(data: unknown): string {
  if (typeof data === "string") return data;
  if (data instanceof Uint8Array) return Buffer.from(data.buffer, data.byteOffset, data.byteLength).toString("base64");
  if (data instanceof ArrayBuffer) return Buffer.from(data).toString("base64");
  return "";
}

/** The image type from the first bytes of base64 data (PNG, JPEG, GIF, WebP), else JPEG (the AI SDK's default). */
function sniffImageType(base64: string): string {
  const head = Buffer.from(base64.slice(0, 24), "base64");
  if (head[0] === 0x89 && head[1] === 0x50 && head[2] === 0x4e && head[3] === 0x47) return "image/png";
  if (head[0] === 0x47 && head[1] === 0x49 && head[2] === 0x46) return "image/gif";
  if (head.subarray(0, 4).toString("latin1") === "RIFF" && head.subarray(8, 12).toString("latin1") === "WEBP") {
    return "image/webp";
  }
  return "image/jpeg";
}

/**
 * Binary or URL data of an image/file part as what a stored history holds: a URL (an http(s)
 * URL, or a data URL given as such) as its text, bytes and bare base64 as a base64 data URL.
 */
function dataUrlOf(data: unknown, mediaType: string | undefined, image: boolean): string {
  if (data instanceof URL) return data.href;
  if (typeof data === "string" && (data.startsWith("data:") || /^https?:\/\//i.test(data))) return data;
  const base64 = base64Of(data);
  const type =
    mediaType && mediaType !== "image/*" ? mediaType : image ? sniffImageType(base64) : "application/octet-stream";
  return `data:${type};base64,${base64}`;
}

function userPartToOpenAI(p: UserPart | AssistantPart): Obj {
  const d = dumplingsOf(p);
  if (d.block) return d.block as Obj;
  if (p.type === "text") return withExtra({ type: "text", text: p.text }, d);
  if (p.type === "image") return { type: "image_url", image_url: { url: dataUrlOf(p.image, p.mediaType, true) } };
  if (p.type === "file") {
    // OpenAI chat's file content part; `file_data` holds a data URL (or the URL of a URL part)
    const file: Obj = { file_data: dataUrlOf(p.data, p.mediaType, false) };
    if (p.filename !== undefined) file.filename = p.filename;
    return { type: "file", file };
  }
  return { type: "text", text: JSON.stringify(p) };
}

function toolOutputText(output: ToolResultPart["output"]): string {
  switch (output.type) {
    case "text":
    case "error-text":
      return output.value;
    case "json":
    case "error-json":
      return JSON.stringify(output.value);
    case "execution-denied":
      return output.reason ?? "tool execution denied";
    case "content":
      return output.value.map((v) => (v.type === "text" ? v.text : "")).join("");
  }
}

/**
 * Converts AI SDK model messages back to OpenAI chat messages (the inverse of
 * {@link openAIToModelMessages}; canonical shape for messages the model produced).
 *
 * @param messages - model messages
 * @returns OpenAI chat messages (a `tool` model message with N results becomes N `tool` messages)
 * @example
 * modelMessagesToOpenAI(result.response.messages) // [{ role: "assistant", content: "…", tool_calls: […] }]
 */
export function modelMessagesToOpenAI(messages: readonly ModelMessage[]): OpenAIMessage[] {
  const out: Obj[] = [];
  for (const m of messages) {
    const d = dumplingsOf(m);
    if (m.role === "system") {
      out.push(withExtra({ role: (d.role as string) ?? "system", content: "content" in d ? d.content : m.content }, d));
    } else if (m.role === "user") {
      let content: unknown;
      if ("content" in d) content = d.content;
      else content = typeof m.content === "string" ? m.content : m.content.map(userPartToOpenAI);
      out.push(withExtra({ role: "user", content }, d));
    } else if (m.role === "assistant") {
      const parts = typeof m.content === "string" ? [{ type: "text" as const, text: m.content }] : m.content;
      const texts = parts.filter((p): p is TextPart => p.type === "text");
      const calls = parts.filter((p): p is ToolCallPart => p.type === "tool-call");
      const msg: Obj = { role: "assistant" };
      const shape = d.content as string | undefined;
      if (shape === "parts") msg.content = texts.map(userPartToOpenAI);
      else if (shape === "null") msg.content = null;
      else if (shape === "empty") msg.content = "";
      else if (shape !== "absent") {
        const text = texts.map((t) => t.text).join("");
        msg.content = text === "" && calls.length > 0 ? null : text;
      }
      if (calls.length > 0 || d.toolCalls === "empty") {
        msg.tool_calls = calls.map((c) => {
          const cd = dumplingsOf(c);
          const call: Obj = { id: c.toolCallId };
          if (!cd.noType) call.type = "function";
          call.function = withExtra(
            { name: c.toolName, arguments: (cd.arguments as string | undefined) ?? JSON.stringify(c.input ?? {}) },
            { extra: cd.functionExtra ?? null } as Dumplings,
          );
          return withExtra(call, cd);
        });
      }
      out.push(withExtra(msg, d));
    } else {
      for (const part of m.content) {
        if (part.type !== "tool-result") continue;
        const content = "content" in d ? d.content : toolOutputText(part.output);
        out.push(withExtra({ role: "tool", tool_call_id: part.toolCallId, content }, d));
      }
    }
  }
  return out as OpenAIMessage[];
}

// ---------------------------------------------------------------- Anthropic

/**
 * Converts an Anthropic Messages history to AI SDK model messages.
 *
 * @param history - Anthropic messages (`user`/`assistant`, string content or blocks)
 * @returns model messages; a user message holding `tool_result` blocks becomes a `tool` message
 *   (plus a `user` message for its other blocks, marked to merge back)
 * @example
 * anthropicToModelMessages([{ role: "user", content: "hi" }]) // [{ role: "user", content: "hi" }]
 */
export function anthropicToModelMessages(history: readonly AnthropicMessage[]): ModelMessage[] {
  const toolNames = new Map<string, string>();
  const out: ModelMessage[] = [];
  for (const raw of history) {
    const m = raw as Obj;
    const extra = pick(m, ["role", "content"]);
    const base: Dumplings = extra ? { extra } : {};
    const content = m.content;
    if (typeof content === "string") {
      out.push(
        m.role === "user"
          ? { role: "user", content, ...opts(base) }
          : {
              role: "assistant",
              content: content === "" ? "" : [{ type: "text", text: content }],
              ...opts({ ...base, string: true }),
            },
      );
      continue;
    }
    const blocks = content as Obj[];
    if (m.role === "assistant") {
      const parts: AssistantPart[] = blocks.map((b) => {
        if (b.type === "tool_use") toolNames.set(String(b.id), String(b.name));
        return assistantPartFromAnthropic(b);
      });
      out.push({ role: "assistant", content: parts, ...opts(base) });
      continue;
    }
    // user: split into runs of tool_result blocks (→ tool message) and other blocks (→ user message)
    if (blocks.length === 0) {
      out.push({ role: "user", content: [], ...opts(base) });
      continue;
    }
    let first = true;
    let run: { kind: "tool" | "user"; parts: (ToolResultPart | UserPart)[] } | undefined;
    const flush = () => {
      if (!run) return;
      const d: Dumplings = first ? base : { join: true };
      out.push(
        run.kind === "tool"
          ? { role: "tool", content: run.parts as ToolResultPart[], ...opts(d) }
          : { role: "user", content: run.parts as UserPart[], ...opts(d) },
      );
      first = false;
      run = undefined;
    };
    for (const b of blocks) {
      const kind = b.type === "tool_result" ? "tool" : "user";
      if (run?.kind !== kind) {
        flush();
        run = { kind, parts: [] };
      }
      run.parts.push(kind === "tool" ? toolResultFromAnthropic(b, toolNames) : userPartFromAnthropic(b));
    }
    flush();
  }
  return out;
}

function assistantPartFromAnthropic(b: Obj): AssistantPart {
  const extra = pick(b, ["type", "text", "thinking", "signature", "id", "name", "input"]);
  const d: Dumplings = extra ? { extra } : {};
  if (b.type === "text") return { type: "text", text: String(b.text), ...opts(d) };
  if (b.type === "tool_use") {
    return { type: "tool-call", toolCallId: String(b.id), toolName: String(b.name), input: b.input, ...opts(d) };
  }
  if (b.type === "thinking") {
    const part: ReasoningPart = { type: "reasoning", text: String(b.thinking) };
    const po: Record<string, Dumplings> = {};
    if (typeof b.signature === "string") po.anthropic = { signature: b.signature };
    if (Object.keys(d).length > 0) po[ROUND_TRIP_NAMESPACE] = d;
    if (b.signature === undefined) po[ROUND_TRIP_NAMESPACE] = { ...d, noSignature: true };
    return Object.keys(po).length > 0 ? { ...part, providerOptions: po } : part;
  }
  if (b.type === "redacted_thinking") {
    return {
      type: "reasoning",
      text: "",
      providerOptions: {
        anthropic: { redactedData: String(b.data) },
        [ROUND_TRIP_NAMESPACE]: { block: b as JsonObject },
      },
    };
  }
  return { type: "text", text: JSON.stringify(b), ...opts({ block: b as JsonObject }) };
}

function userPartFromAnthropic(b: Obj): UserPart {
  if (b.type === "text") {
    const extra = pick(b, ["type", "text"]);
    return { type: "text", text: String(b.text), ...opts(extra ? { extra } : {}) };
  }
  if (b.type === "image" || b.type === "document") {
    const source = (b.source ?? {}) as Obj;
    const url = String(source.url);
    if (source.type === "url" ? URL.canParse(url) : source.type === "base64") {
      const data = source.type === "url" ? new URL(url) : String(source.data ?? "");
      const mediaType = typeof source.media_type === "string" ? source.media_type : undefined;
      if (b.type === "image") {
        return { type: "image", image: data, ...(mediaType ? { mediaType } : {}), ...opts({ block: b as JsonObject }) };
      }
      const filename = typeof b.title === "string" ? b.title : undefined;
      return {
        type: "file",
        data,
        mediaType: mediaType ?? "application/pdf",
        ...(filename !== undefined ? { filename } : {}),
        ...opts({ block: b as JsonObject }),
      };
    }
  }
  return { type: "text", text: JSON.stringify(b), ...opts({ block: b as JsonObject }) };
}

function toolResultFromAnthropic(b: Obj, toolNames: Map<string, string>): ToolResultPart {
  const extra = pick(b, ["type", "tool_use_id", "content", "is_error"]);
  const d: Dumplings = extra ? { extra } : {};
  const id = String(b.tool_use_id);
  const content = b.content;
  if (b.is_error !== undefined) d.isError = b.is_error as JsonValue;
  let output: ToolResultPart["output"];
  if (content === undefined) {
    d.noContent = true;
    output = { type: b.is_error === true ? "error-text" : "text", value: "" };
  } else if (typeof content === "string") {
    output = { type: b.is_error === true ? "error-text" : "text", value: content };
  } else {
    d.content = content as JsonValue;
    const blocks = content as Obj[];
    if (b.is_error === true) {
      output = { type: "error-text", value: blocks.map((x) => String(x.text ?? "")).join("") };
    } else {
      output = {
        type: "content",
        value: blocks.map((x) =>
          x.type === "image" && (x.source as Obj | undefined)?.type === "base64"
            ? {
                type: "image-data" as const,
                data: String((x.source as Obj).data),
                mediaType: String((x.source as Obj).media_type),
              }
            : { type: "text" as const, text: typeof x.text === "string" ? x.text : JSON.stringify(x) },
        ),
      };
    }
  }
  return { type: "tool-result", toolCallId: id, toolName: toolNames.get(id) ?? "unknown_tool", output, ...opts(d) };
}

function assistantPartToAnthropic(p: AssistantPart): Obj | undefined {
  const d = dumplingsOf(p);
  if (d.block) return d.block as Obj;
  if (p.type === "text") return withExtra({ type: "text", text: p.text }, d);
  if (p.type === "tool-call")
    return withExtra({ type: "tool_use", id: p.toolCallId, name: p.toolName, input: p.input ?? {} }, d);
  if (p.type === "reasoning") {
    const sig = (p.providerOptions as Record<string, Obj> | undefined)?.anthropic?.signature;
    const block: Obj = { type: "thinking", thinking: p.text };
    if (!d.noSignature) block.signature = typeof sig === "string" ? sig : "";
    return withExtra(block, d);
  }
  return undefined;
}

function userPartToAnthropic(p: UserPart | ToolResultPart): Obj {
  const d = dumplingsOf(p);
  if (d.block) return d.block as Obj;
  if (p.type === "tool-result") {
    const block: Obj = { type: "tool_result", tool_use_id: p.toolCallId };
    if (!d.noContent) block.content = "content" in d ? d.content : toolOutputText(p.output);
    if ("isError" in d) block.is_error = d.isError;
    else if (p.output.type === "error-text" || p.output.type === "error-json") block.is_error = true;
    return withExtra(block, d);
  }
  if (p.type === "text") return withExtra({ type: "text", text: p.text }, d);
  if (p.type === "image" || p.type === "file") {
    const isImage = p.type === "image";
    const data = isImage ? p.image : p.data;
    const url = dataUrlOf(data, p.mediaType, isImage);
    const parsed = parseDataUrl(url);
    const source = parsed
      ? { type: "base64", media_type: parsed.mediaType, data: parsed.base64 }
      : { type: "url", url };
    if (isImage) return { type: "image", source };
    const block: Obj = { type: "document", source };
    if (p.filename !== undefined) block.title = p.filename;
    return block;
  }
  return { type: "text", text: JSON.stringify(p) };
}

/**
 * Converts AI SDK model messages back to Anthropic messages (the inverse of
 * {@link anthropicToModelMessages}; canonical blocks for model output).
 *
 * @param messages - model messages (`system` messages are skipped: Anthropic takes the system prompt separately)
 * @returns Anthropic messages; `tool` model messages become user messages of `tool_result` blocks
 * @example
 * modelMessagesToAnthropic(result.response.messages) // [{ role: "assistant", content: [{ type: "text", … }] }]
 */
export function modelMessagesToAnthropic(messages: readonly ModelMessage[]): AnthropicMessage[] {
  const out: Obj[] = [];
  for (const m of messages) {
    const d = dumplingsOf(m);
    if (m.role === "system") continue;
    if (m.role === "assistant") {
      if (d.string) {
        const text =
          typeof m.content === "string" ? m.content : m.content.map((p) => (p.type === "text" ? p.text : "")).join("");
        out.push(withExtra({ role: "assistant", content: text }, d));
        continue;
      }
      const parts = typeof m.content === "string" ? [{ type: "text" as const, text: m.content }] : m.content;
      const blocks = parts.map(assistantPartToAnthropic).filter((b): b is Obj => b !== undefined);
      out.push(withExtra({ role: "assistant", content: blocks }, d));
      continue;
    }
    const blocks: Obj[] | string =
      m.role === "user"
        ? typeof m.content === "string"
          ? m.content
          : m.content.map(userPartToAnthropic)
        : (m as ToolModelMessage).content
            .filter((p): p is ToolResultPart => p.type === "tool-result")
            .map(userPartToAnthropic);
    const last = out[out.length - 1];
    if (d.join && last && Array.isArray(last.content) && Array.isArray(blocks)) {
      (last.content as Obj[]).push(...blocks);
      continue;
    }
    out.push(withExtra({ role: "user", content: blocks }, d));
  }
  return out as AnthropicMessage[];
}

// ---------------------------------------------------------------- protocol dispatch

/**
 * Converts a history of either protocol to AI SDK model messages.
 *
 * @param protocol - `openai` or `anthropic`
 * @param history - messages in that protocol's shape
 * @returns model messages
 * @throws {MessageConversionError} for a message the AI SDK cannot carry
 */
export function toModelMessages(protocol: Protocol, history: readonly Message[]): ModelMessage[] {
  return protocol === "openai"
    ? openAIToModelMessages(history as OpenAIMessage[])
    : anthropicToModelMessages(history as AnthropicMessage[]);
}

/**
 * Converts AI SDK model messages to a history of either protocol.
 *
 * @param protocol - `openai` or `anthropic`
 * @param messages - model messages
 * @returns messages in that protocol's shape
 */
export function fromModelMessages(protocol: Protocol, messages: readonly ModelMessage[]): Message[] {
  return protocol === "openai" ? modelMessagesToOpenAI(messages) : modelMessagesToAnthropic(messages);
}
