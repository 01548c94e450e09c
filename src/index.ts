/**
 * dumplings-ai: durable AI agents for TypeScript.
 *
 * The main entry exports what an application calls: the agents (`BaseAgent`,
 * `AnthropicAgent`, the agent registry and templates, process-wide tools), the
 * persistence API (`saveState`, `loadState`, …, `configure`, `autoSave`, class
 * and hook registration), the backend registry with the in-memory and file
 * backends, the `.duas` codec (`encodeState` / `decodeState`), the state,
 * message and backend-contract types, and the error classes a caller branches
 * on. At most 100 names (pinned by the package tests); internals are not here.
 * Importing it reads the `DUMPLINGS_PERSISTENCE*` environment variables (see
 * `configure`).
 *
 * Subpaths: `dumplings-ai/sqlite` (`SQLiteBackend`), `dumplings-ai/redis`,
 * `dumplings-ai/postgres`, `dumplings-ai/workflow`, `dumplings-ai/durable`
 * (also `LeaseHeldError`, `StaleFencingTokenError`, `ReplayMismatchError`),
 * `dumplings-ai/ai-sdk` (also `toModelMessages`, `fromModelMessages`), and
 * `dumplings-ai/testing` (sample conversations, state builders, the local model
 * server, the conformance suites, and test-only helpers such as
 * `resetBackendRegistry`).
 *
 * @example
 * import { BaseAgent, configure, loadState } from "dumplings-ai";
 * configure({ backend: "sqlite", dbPath: "./agents.db" });
 * const agent = new BaseAgent({ name: "support", apiKeyEnv: "OPENAI_API_KEY", modelName: "gpt-4o-mini" });
 * agent.history.push({ role: "user", content: "hi" });
 * await agent.saveState("support-1");
 * const again = await loadState("support-1");
 *
 * @module
 */

// Agents: the two protocols, the registry and templates, process-wide tools, turns.
export {
  AgentNameTakenError,
  type AgentOptions,
  AnthropicAgent,
  activateTemplate,
  agentList,
  BaseAgent,
  CheckpointFailedError,
  checkPermission,
  defineTemplate,
  listTemplates,
  loadState,
  loadStateString,
  MaxRoundsError,
  ModelCallError,
  ModelConfigError,
  type NameClashResolution,
  type PermissionDecision,
  ProviderVersionError,
  registerGlobalTool,
  removeTemplate,
  resolveNameClash,
  StreamInterruptedError,
  TemplateNotFoundError,
  type ToolContext,
  type ToolDefinition,
  type ToolHook,
  ToolRegistrationError,
  ToolTimeoutError,
  type TurnOptions,
  type TurnResult,
  unregisterGlobalTool,
} from "./agent/index.js";
// Backends: the registry, the memory and file backends, the contract a custom backend implements.
export { FileBackend, type FileBackendOptions } from "./backends/file/index.js";
export { MemoryBackend } from "./backends/memory.js";
export {
  getBackend,
  InvalidBackendError,
  listBackendNames,
  registerBackend,
  setDefaultBackend,
} from "./backends/registry.js";
export { backendFromSpec } from "./backends/spec.js";
export type {
  HeaderReadOptions,
  HeaderResult,
  HistoryReadOptions,
  ReadResult,
  StateBackend,
  WriteOptions,
  WriteResult,
} from "./backends/types.js";
export { decodeState } from "./core/codec/bytes.js";
export { encodeState } from "./core/codec/encode.js";
// Core: the .duas codec, errors, JSON, state and message types.
export {
  AgentNotFoundError,
  BackendError,
  BackendExistsError,
  ConflictError,
  CredentialError,
  DumplingsError,
  type DumplingsErrorCode,
  FormatError,
  InvalidKeyError,
  InvalidOptionError,
  InvalidStateError,
  KeyCollisionError,
  MissingPeerError,
  NonJsonValueError,
  RunStreamError,
  StateNotFoundError,
  UnknownBackendError,
} from "./core/errors.js";
export type { JsonObject, JsonValue } from "./core/json.js";
export type { Logger } from "./core/logger.js";
export type { AnthropicMessage, Message, OpenAIMessage, Protocol } from "./core/messages.js";
export type { AgentConfig, AgentState, StateMeta } from "./core/state.js";
// Persistence API.
export {
  type AgentClass,
  autoSave,
  type ConfigureOptions,
  configure,
  deleteState,
  disable,
  exportStateString,
  forgetStoredState,
  type HookFunction,
  InvalidConfigError,
  isEnabled,
  iterHistory,
  type LoadOptions,
  listStates,
  MissingSecretError,
  type PersistenceWarning,
  RegistrationError,
  registerAgentClass,
  registerHookFunction,
  type SaveOptions,
  type SaveResult,
  saveState,
  trackedRevision,
  UnsupportedOperationError,
} from "./persistence/index.js";
