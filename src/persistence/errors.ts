/**
 * Errors of the persistence layer (configuration, class and hook
 * registration, unsupported backend capabilities, missing secrets). Each
 * extends {@link DumplingsError} with a stable `code`.
 *
 * @module
 */
import { DumplingsError } from "../core/errors.js";

/**
 * A persistence setting is invalid: a bad `configure()` option or a bad
 * `DUMPLINGS_PERSISTENCE*` environment variable (the message names it).
 *
 * Code: `INVALID_CONFIG`.
 */
export class InvalidConfigError extends DumplingsError {
  /** The option or environment variable at fault, e.g. `DUMPLINGS_PERSISTENCE_KEY`. */
  readonly setting: string;
  /**
   * @param setting - option or env-var name
   * @param message - what is wrong and which values are accepted
   */
  constructor(setting: string, message: string) {
    super("INVALID_CONFIG", `${setting}: ${message}`);
    this.setting = setting;
  }
}

/**
 * An agent class or hook function cannot be registered or cannot be named
 * for saving: an invalid module/export name, a name already taken by another
 * class or function, or (at save time) a class that was never registered.
 *
 * Code: `CLASS_REGISTRATION`.
 */
export class RegistrationError extends DumplingsError {
  /** The `module:export` name involved, or the class/function name when it has none yet. */
  readonly target: string;
  constructor(target: string, message: string) {
    super("CLASS_REGISTRATION", message);
    this.target = target;
  }
}

/**
 * The operation needs a backend capability the backend does not offer, e.g.
 * `saveState(agent, key, { ifRevision })` on a custom backend without `write`
 * (compare-and-set cannot be honoured, so nothing is written).
 *
 * Code: `UNSUPPORTED`.
 */
export class UnsupportedOperationError extends DumplingsError {
  constructor(message: string) {
    super("UNSUPPORTED", message);
  }
}

/**
 * The environment variable an agent's `apiKeyEnv` names is not set (or is
 * empty), so no API key is available. Raised when the key is needed
 * (`resolveApiKey`) or when a load asks for it (`{ requireSecrets: true }`),
 * never later as an empty key sent to a provider.
 *
 * Code: `MISSING_SECRET`.
 */
export class MissingSecretError extends DumplingsError {
  /** The environment variable that should hold the secret. */
  readonly envVar: string;
  constructor(envVar: string, agentName?: string) {
    super(
      "MISSING_SECRET",
      envVar === ""
        ? `agent${agentName ? ` ${JSON.stringify(agentName)}` : ""} has no apiKeyEnv: set config.apiKeyEnv to the NAME of the environment variable holding its API key`
        : `environment variable ${envVar} is not set${agentName ? ` (apiKeyEnv of agent ${JSON.stringify(agentName)})` : ""}; export it before calling the model`,
    );
    this.envVar = envVar;
  }
}
