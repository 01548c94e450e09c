/**
 * dumplings-ai: durable AI agents for TypeScript.
 *
 * The main entry exports the agents (`BaseAgent`, `AnthropicAgent`, the
 * agent registry), the persistence API (`saveState`, `loadState`, …,
 * `configure`, `autoSave`, class and hook registration), the backend
 * registry with the in-memory and file backends, the `.duas` codec, the
 * state and message types, and every error class. Importing it reads the
 * `DUMPLINGS_PERSISTENCE*` environment variables (see `configure`).
 *
 * Subpaths: `dumplings-ai/sqlite` (`SQLiteBackend`), `dumplings-ai/redis`,
 * `dumplings-ai/postgres`, `dumplings-ai/workflow`, `dumplings-ai/durable`, and
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

// Agents.
export * from "./agent/index.js";
export * from "./backends/file/index.js";
export { MAX_KEY_BYTES, validateKey } from "./backends/keys.js";
export { MemoryBackend } from "./backends/memory.js";
export {
  BUILTIN_BACKENDS,
  type BuiltinBackendName,
  builtinBackendSettings,
  configureBuiltinBackends,
  DEFAULT_BACKEND,
  DEFAULT_BASE_DIR,
  DEFAULT_DB_PATH,
  defaultBackendName,
  getBackend,
  InvalidBackendError,
  listBackendNames,
  registerBackend,
  setDefaultBackend,
} from "./backends/registry.js";
export { backendFromSpec } from "./backends/spec.js";
// Backends: the contract, key rules, the registry, memory and file backends.
export type {
  ClippedValue,
  HeaderReadOptions,
  HeaderResult,
  HistoryReadOptions,
  MaybePromise,
  ReadResult,
  StateBackend,
  WriteOptions,
  WriteResult,
} from "./backends/types.js";
export { decodeState, decodeStateBytes } from "./core/codec/bytes.js";
export { assertStateJson, encodeState, encodeStateBytes } from "./core/codec/encode.js";
// Core: errors, JSON rules, state and message types, versions, the .duas codec.
export * from "./core/errors.js";
export { assertJson, isJsonObject, type JsonObject, type JsonPrimitive, type JsonValue, toJson } from "./core/json.js";
export * from "./core/messages.js";
export * from "./core/state.js";
export {
  DUAS_EXTENSION,
  DUAS_GZ_EXTENSION,
  FORMAT_VERSION,
  packageVersion,
  SUPPORTED_FORMAT_VERSIONS,
} from "./core/version.js";
// Persistence API.
export {
  type AgentClass,
  type AgentStateHeader,
  assertNoCredentials,
  autoSave,
  type BackendOptions,
  type ConfigureOptions,
  configure,
  credentialReason,
  deleteState,
  disable,
  exportStateString,
  forgetStoredState,
  type HookFunction,
  InvalidConfigError,
  isEnabled,
  iterHistory,
  type KeyStrategy,
  type LoadOptions,
  listStates,
  loadEnvironmentConfig,
  MissingSecretError,
  type NameTakenPolicy,
  type PersistableAgent,
  type PersistenceSettings,
  type PersistenceWarning,
  persistenceSettings,
  REDACTED,
  type RegisterOptions,
  RegistrationError,
  type RestoreOptions,
  redactSecrets,
  registerAgentClass,
  registerHookFunction,
  resolveApiKey,
  resolveBackend,
  type SaveOptions,
  type SaveResult,
  saveState,
  type ToolArgumentSecretsPolicy,
  type ToStateOptions,
  trackedRevision,
  UnsupportedOperationError,
} from "./persistence/index.js";
