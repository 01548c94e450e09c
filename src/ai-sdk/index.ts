/**
 * `dumplings-ai/ai-sdk`: AI SDK chats on this library's storage.
 *
 * - {@link createChatStore}: `save(chatId, messages, { expectedRevision? })`,
 *   `read(chatId)` (messages and revision), `load(chatId)`,
 *   `delete(chatId)`, `list()` for `UIMessage[]` (from `useChat`) and
 *   `ModelMessage[]` (for `generateText`/`streamText`) on any session backend
 *   (`MemoryBackend`, `FileBackend`, `SQLiteBackend`, `RedisBackend`,
 *   `PostgresBackend`, a custom `StateBackend`). A round trip is deep-equal,
 *   `Uint8Array`s and `URL`s included (the tagged JSON rule of
 *   {@link encodeTagged}); a chat that grew by one message writes one message.
 * - {@link runUIMessageStream} / {@link resumeRunResponse}: a durable run's
 *   side channel as a UI message stream that `useChat({ resume: true })` can
 *   resume (a full replay, then live; no text of an abandoned attempt), and
 *   the resume endpoint's answer (the stream, or 204 when no run is active).
 * - {@link stopRunResponse}: the stop endpoint's answer: cancels the run from
 *   any process, ends every reader's message with the partial answer, and
 *   keeps that answer in the chat store.
 * - {@link toModelMessages} / {@link fromModelMessages}: convert an agent's
 *   history (OpenAI chat or Anthropic messages) to AI SDK model messages and back.
 *
 * `ai` is a peer dependency.
 *
 * @example
 * import { createChatStore } from "dumplings-ai/ai-sdk";
 * import { SQLiteBackend } from "dumplings-ai/sqlite";
 * const chats = createChatStore({ store: new SQLiteBackend({ dbPath: "./chats.db" }) });
 * await chats.save("c1", [{ id: "m1", role: "user", parts: [{ type: "text", text: "hi" }] }]);
 * const messages = await chats.load("c1");
 *
 * @module
 */
export { fromModelMessages, MessageConversionError, toModelMessages } from "../agent/ai-sdk-messages.js";
export { fromAiSdkTool, type NamedAiSdkTool } from "../agent/tools.js";
export { decodeTagged, encodeTagged, TAG } from "../core/tagged-json.js";
export {
  CHAT_CLASS,
  CHAT_FIELD,
  type ChatMessage,
  type ChatRead,
  type ChatSaveOptions,
  type ChatSaveResult,
  type ChatStore,
  type ChatStoreOptions,
  createChatStore,
} from "./chat-store.js";
export {
  type ResumeRunResponseOptions,
  type RunDraftData,
  type RunJournalReader,
  type RunUIMessageStreamOptions,
  resumeRunResponse,
  runUIMessageStream,
} from "./run-ui-stream.js";
export { stopRunResponse } from "./stop-run.js";
