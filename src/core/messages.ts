/**
 * Message types of the two protocols an agent history can hold, as zod
 * schemas with their inferred types. Unknown extra fields are kept (loose
 * objects), so a message from a newer API version round-trips unchanged.
 *
 * - `openai`: OpenAI chat-completions messages (system, user, assistant with
 *   `tool_calls`, tool with `tool_call_id`; text or content parts).
 * - `anthropic`: Anthropic Messages (`user`/`assistant`, string content or
 *   blocks: `text`, `thinking`, `tool_use`, `tool_result`, …).
 *
 * @module
 */
import { z } from "zod";

/** An OpenAI tool call on an assistant message. */
export const OpenAIToolCallSchema = z.looseObject({
  id: z.string(),
  type: z.string().optional(),
  function: z.looseObject({ name: z.string(), arguments: z.string() }),
});
export type OpenAIToolCall = z.infer<typeof OpenAIToolCallSchema>;

const contentParts = z.array(z.looseObject({ type: z.string() }));
const openAIContent = z.union([z.string(), contentParts, z.null()]);

/** One OpenAI chat-completions message. */
export const OpenAIMessageSchema = z.discriminatedUnion("role", [
  z.looseObject({ role: z.literal("system"), content: openAIContent }),
  z.looseObject({ role: z.literal("developer"), content: openAIContent }),
  z.looseObject({ role: z.literal("user"), content: openAIContent }),
  z.looseObject({
    role: z.literal("assistant"),
    content: openAIContent.optional(),
    tool_calls: z.array(OpenAIToolCallSchema).optional(),
  }),
  z.looseObject({ role: z.literal("tool"), content: openAIContent, tool_call_id: z.string() }),
  z.looseObject({ role: z.literal("function"), content: openAIContent, name: z.string() }),
]);
export type OpenAIMessage = z.infer<typeof OpenAIMessageSchema>;

/** One Anthropic content block (`text`, `thinking`, `tool_use`, `tool_result`, `image`, …). */
export const AnthropicBlockSchema = z.looseObject({ type: z.string() });
export type AnthropicBlock = z.infer<typeof AnthropicBlockSchema>;

/** One Anthropic Messages message. */
export const AnthropicMessageSchema = z.looseObject({
  role: z.enum(["user", "assistant"]),
  content: z.union([z.string(), z.array(AnthropicBlockSchema)]),
});
export type AnthropicMessage = z.infer<typeof AnthropicMessageSchema>;

/** The wire protocol an agent speaks, which fixes the shape of its history. */
export type Protocol = "openai" | "anthropic";
export const ProtocolSchema = z.enum(["openai", "anthropic"]);

/** A history message of either protocol. */
export type Message = OpenAIMessage | AnthropicMessage;

/** The message schema of a protocol. */
export function messageSchemaFor(protocol: Protocol): z.ZodType<Message> {
  return (protocol === "openai" ? OpenAIMessageSchema : AnthropicMessageSchema) as z.ZodType<Message>;
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** `openAIContent` (and Anthropic's block list) by hand: a string, null (OpenAI) or an array of objects with a string `type`. */
function isContent(v: unknown, nullable: boolean): boolean {
  if (typeof v === "string") return true;
  if (v === null) return nullable;
  if (!Array.isArray(v)) return false;
  for (let i = 0; i < v.length; i++) {
    const part: unknown = v[i];
    if (!isPlainObject(part) || typeof part.type !== "string") return false;
  }
  return true;
}

function isOpenAIToolCalls(v: unknown): boolean {
  if (v === undefined) return true;
  if (!Array.isArray(v)) return false;
  for (let i = 0; i < v.length; i++) {
    const call: unknown = v[i];
    if (!isPlainObject(call) || typeof call.id !== "string") return false;
    if (call.type !== undefined && typeof call.type !== "string") return false;
    const fn = call.function;
    if (!isPlainObject(fn) || typeof fn.name !== "string" || typeof fn.arguments !== "string") return false;
  }
  return true;
}

/**
 * The message schema of a protocol ({@link messageSchemaFor}) as a plain predicate, for the
 * read path that checks every stored message: true only when the schema accepts `value`
 * (false may also mean "ask the schema", which then names the offending field). A history
 * of 10,000 messages is checked without running zod 10,000 times.
 *
 * @param protocol - the history's protocol
 * @param value - a parsed message
 * @returns true when `messageSchemaFor(protocol).safeParse(value)` succeeds
 * @example
 * isWellFormedMessage("openai", { role: "user", content: "hi" }) // true
 * isWellFormedMessage("openai", { role: "robot", content: "hi" }) // false
 */
export function isWellFormedMessage(protocol: Protocol, value: unknown): boolean {
  if (!isPlainObject(value)) return false;
  const role = value.role;
  if (protocol === "anthropic") {
    return (role === "user" || role === "assistant") && isContent(value.content, false);
  }
  switch (role) {
    case "system":
    case "developer":
    case "user":
      return isContent(value.content, true);
    case "assistant":
      return (value.content === undefined || isContent(value.content, true)) && isOpenAIToolCalls(value.tool_calls);
    case "tool":
      return isContent(value.content, true) && typeof value.tool_call_id === "string";
    case "function":
      return isContent(value.content, true) && typeof value.name === "string";
    default:
      return false;
  }
}
