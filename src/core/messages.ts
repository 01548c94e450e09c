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
