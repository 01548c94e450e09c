/**
 * Builds the AI SDK language model an agent talks to from its stored
 * configuration: `apiProvider` (a base URL, or a full `…/chat/completions` /
 * `…/messages` URL as in the seed), `modelName`, `apiKeyEnv` (the NAME of the
 * environment variable holding the key, read at call time and never stored)
 * and the protocol (`openai` → `@ai-sdk/openai-compatible`, which works with
 * OpenAI, Ollama, vLLM and any compatible server; `anthropic` →
 * `@ai-sdk/anthropic`).
 *
 * @module
 */
import { createAnthropic } from "@ai-sdk/anthropic";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import type { LanguageModel } from "ai";
import { DumplingsError } from "../core/errors.js";
import type { Protocol } from "../core/messages.js";
import { MissingSecretError } from "../persistence/errors.js";

/** The model configuration is unusable (no provider URL or no model name). Code `MODEL_CONFIG`. */
export class ModelConfigError extends DumplingsError {
  constructor(message: string) {
    super("MODEL_CONFIG", message);
  }
}

/** What {@link createLanguageModel} reads from an agent's config. */
export interface ModelSettings {
  /** Base URL or full endpoint URL. */
  apiProvider: string;
  /** Model name. */
  modelName: string;
  /** Name of the env var holding the API key; `""` for servers that need none (a local Ollama). */
  apiKeyEnv: string;
}

/**
 * Turns a provider URL into the base URL the AI SDK providers append their path to.
 *
 * @param url - `https://api.openai.com/v1/chat/completions`, `https://api.anthropic.com/v1/messages` or a base URL
 * @returns the base URL without the endpoint path or a trailing slash
 * @example
 * baseUrlOf("http://localhost:11434/v1/chat/completions") // "http://localhost:11434/v1"
 */
export function baseUrlOf(url: string): string {
  return url
    .trim()
    .replace(/\/+$/, "")
    .replace(/\/(chat\/completions|messages)$/, "");
}

/**
 * Creates the AI SDK model for an agent, reading the API key from the
 * environment now (call it once per model call, so a rotated key is used).
 *
 * @param settings - `apiProvider`, `modelName`, `apiKeyEnv`
 * @param protocol - `openai` or `anthropic`
 * @param env - environment to read the key from @default process.env
 * @returns a `LanguageModel` for `generateText` / `streamText`
 * @throws {ModelConfigError} when `apiProvider` or `modelName` is empty or the URL is invalid
 * @throws {MissingSecretError} when `apiKeyEnv` names a variable that is not set (nothing is sent)
 * @example
 * const model = createLanguageModel({ apiProvider: "http://127.0.0.1:11434/v1", modelName: "llama3.2", apiKeyEnv: "" }, "openai");
 */
export function createLanguageModel(
  settings: ModelSettings,
  protocol: Protocol,
  env: NodeJS.ProcessEnv = process.env,
): LanguageModel {
  if (!settings.apiProvider) throw new ModelConfigError("config.apiProvider is empty: set the provider URL");
  if (!settings.modelName) throw new ModelConfigError("config.modelName is empty: set the model name");
  const baseURL = baseUrlOf(settings.apiProvider);
  try {
    new URL(baseURL);
  } catch (cause) {
    throw new ModelConfigError(
      `config.apiProvider ${JSON.stringify(settings.apiProvider)} is not a URL: ${String(cause)}`,
    );
  }
  let apiKey: string | undefined;
  if (settings.apiKeyEnv) {
    apiKey = env[settings.apiKeyEnv];
    if (!apiKey) throw new MissingSecretError(settings.apiKeyEnv);
  }
  if (protocol === "anthropic") {
    // the Anthropic provider insists on a key; a local server ignores it
    return createAnthropic({ baseURL, apiKey: apiKey ?? "no-key" })(settings.modelName);
  }
  return createOpenAICompatible({
    name: "openai-compatible",
    baseURL,
    ...(apiKey ? { apiKey } : {}),
    includeUsage: true,
  }).chatModel(settings.modelName);
}
