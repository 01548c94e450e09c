/**
 * The agent layer: `BaseAgent` (OpenAI chat protocol), `AnthropicAgent`
 * (Anthropic Messages), the process-wide agent registry (`agentList`,
 * templates, `resolveNameClash`), and the public pieces of the agent runtime
 * (turn options and errors, tools, history repair, AI SDK message conversion).
 *
 * It also re-exports `loadState` / `loadStateString` of the persistence API
 * typed to return a `BaseAgent` (every loadable class is one).
 *
 * @module
 */
import {
  type LoadOptions,
  loadState as loadPersistedState,
  loadStateString as loadPersistedStateString,
} from "../persistence/api.js";
import type { BaseAgent } from "./base-agent.js";

export { fromModelMessages, MessageConversionError, toModelMessages } from "./ai-sdk-messages.js";
export { AnthropicAgent } from "./anthropic-agent.js";
export {
  type AgentConstructor,
  type AgentOptions,
  BaseAgent,
  type ToolHook,
  type ToolHookEvent,
} from "./base-agent.js";
export {
  CheckpointFailedError,
  MaxRoundsError,
  ModelCallError,
  messageText,
  StreamInterruptedError,
  type TurnOptions,
  type TurnResult,
} from "./conversation.js";
export { ModelConfigError, type ProviderPackage, ProviderVersionError } from "./model.js";
export {
  type AddAgentOptions,
  AgentList,
  AgentNameTakenError,
  activateTemplate,
  agentList,
  checkPermission,
  defineTemplate,
  listTemplates,
  type NameClashResolution,
  type PermissionDecision,
  removeTemplate,
  resolveNameClash,
  type TemplateFactory,
  TemplateNotFoundError,
} from "./registry.js";
export {
  findPendingToolCalls,
  INTERRUPTED_RESULT,
  isHistoryValid,
  type PendingToolCall,
  type RepairAction,
  type RepairPolicy,
  type RepairResult,
  repairHistory,
} from "./repair.js";
export {
  globalToolRegistry,
  type JsonSchemaObject,
  registerGlobalTool,
  type ToolContext,
  type ToolDefinition,
  ToolRegistrationError,
  ToolTimeoutError,
  unregisterGlobalTool,
} from "./tools.js";

/**
 * Loads an agent from a backend (the persistence API's `loadState`, typed for agents).
 *
 * @param key - the key
 * @param options - `backend` (name or instance), `onWarning`, `register`/`onNameTaken` (add to `agentList`),
 *   `requireSecrets`
 * @returns the agent, an instance of its saved class (`BaseAgent`, `AnthropicAgent` or a registered subclass)
 * @throws {InvalidKeyError} / {StateNotFoundError} / {FormatError} / {AgentNotFoundError} / {BackendError}
 * @example
 * const agent = await loadState("support-42", { backend: "sqlite" });
 */
export const loadState: <A extends BaseAgent = BaseAgent>(key: string, options?: LoadOptions) => Promise<A> =
  loadPersistedState as never;

/**
 * Rebuilds an agent from `.duas` text (the persistence API's `loadStateString`, typed for agents).
 *
 * @param text - the `.duas` text
 * @param options - `onWarning`, `register`/`onNameTaken`, `requireSecrets`, `source` (a label for errors)
 * @returns the agent
 * @throws {FormatError} with the line number / {AgentNotFoundError}
 * @example
 * const agent = await loadStateString(readFileSync("session.duas", "utf8"));
 */
export const loadStateString: <A extends BaseAgent = BaseAgent>(
  text: string,
  options?: Omit<LoadOptions, "backend"> & { source?: string },
) => Promise<A> = loadPersistedStateString as never;
