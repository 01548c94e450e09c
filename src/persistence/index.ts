/**
 * The persistence layer: configuration, the save/load API with revisions and
 * append-only saves, class and hook identity, and the credential rules.
 *
 * @module
 */
export {
  autoSave,
  type BackendOptions,
  deleteState,
  exportStateString,
  forgetStoredState,
  iterHistory,
  type LoadOptions,
  listStates,
  loadState,
  loadStateString,
  type NameTakenPolicy,
  type SaveOptions,
  type SaveResult,
  saveState,
  setLoadedAgentRegistrar,
  trackedRevision,
} from "./api.js";
export {
  type AgentClass,
  type AgentStateHeader,
  addClassFallback,
  agentClassName,
  type ClassFallback,
  type HookFunction,
  hookFunctionName,
  type PersistableAgent,
  type PersistenceWarning,
  type RegisterOptions,
  type RestoreOptions,
  registerAgentClass,
  registeredAgentClass,
  registeredHookFunction,
  registerHookFunction,
  resolveHooksSync,
  savedModuleName,
  type ToStateOptions,
  unregisteredHookWarning,
} from "./classes.js";
export {
  type ConfigureOptions,
  configure,
  disable,
  isEnabled,
  type KeyStrategy,
  loadEnvironmentConfig,
  type PersistenceSettings,
  persistenceSettings,
  resolveBackend,
} from "./config.js";
export {
  applyToolArgumentPolicy,
  assertNoCredentials,
  credentialReason,
  REDACTED,
  redactSecrets,
  resolveApiKey,
  type ToolArgumentSecretsPolicy,
} from "./credentials.js";
export { InvalidConfigError, MissingSecretError, RegistrationError, UnsupportedOperationError } from "./errors.js";
