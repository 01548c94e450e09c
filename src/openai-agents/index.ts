/**
 * `dumplings-ai/openai-agents`: OpenAI Agents SDK sessions on this library's storage.
 *
 * - {@link DumplingsSession}: the SDK's `Session` interface (`getSessionId`,
 *   `getItems(limit?)`, `addItems`, `popItem`, `clearSession`) on any session
 *   backend (`MemoryBackend`, `FileBackend`, `SQLiteBackend`, `RedisBackend`,
 *   `PostgresBackend`, a custom `StateBackend`) or a SPEC string
 *   (`sqlite:./agents.db`, `postgres://…`, `redis://…`, `file:DIR`, `memory:`).
 *   Every item type round-trips deep-equal; adding items writes only those
 *   items (a compare-and-set append).
 *
 * `@openai/agents-core` (or `@openai/agents`) is an optional peer dependency:
 * this module imports only its types.
 *
 * @example
 * import { Agent, run } from "@openai/agents";
 * import { DumplingsSession } from "dumplings-ai/openai-agents";
 * const session = new DumplingsSession({ sessionId: "user-42", store: "sqlite:./agents.db" });
 * await run(new Agent({ name: "Assistant" }), "Hello", { session });
 *
 * @module
 */
export { DumplingsSession, type DumplingsSessionOptions, SESSION_CLASS, SESSION_FIELD } from "./session.js";
