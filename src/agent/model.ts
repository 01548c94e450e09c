/**
 * Builds the AI SDK language model an agent talks to from its stored
 * configuration: `apiProvider` (a base URL, or a full `…/chat/completions` /
 * `…/messages` URL as in the seed), `modelName`, `apiKeyEnv` (the NAME of the
 * environment variable holding the key, read at call time and never stored)
 * and the protocol (`openai` → `@ai-sdk/openai-compatible`, which works with
 * OpenAI, Ollama, vLLM and any compatible server; `anthropic` →
 * `@ai-sdk/anthropic`).
 *
 * The two provider packages are optional peer dependencies, loaded when an
 * agent first builds a model: an application installs the one it uses, in the
 * major that matches its `ai` (see {@link providerInstallHint}). A provider
 * that is missing, or whose model specification version the installed `ai`
 * cannot call, is a typed error naming the command that fixes it — before any
 * request is sent.
 *
 * @module
 */
import { createRequire } from "node:module";
import type { LanguageModel } from "ai";
import { DumplingsError, MissingPeerError } from "../core/errors.js";
import type { Protocol } from "../core/messages.js";
import { MissingSecretError } from "../persistence/errors.js";

/** The model configuration is unusable (no provider URL or no model name). Code `MODEL_CONFIG`. */
export class ModelConfigError extends DumplingsError {
  constructor(message: string) {
    super("MODEL_CONFIG", message);
  }
}

/** The AI SDK provider package each protocol is built with. */
export type ProviderPackage = "@ai-sdk/anthropic" | "@ai-sdk/openai-compatible";

const PROVIDER_OF: Record<Protocol, ProviderPackage> = {
  anthropic: "@ai-sdk/anthropic",
  openai: "@ai-sdk/openai-compatible",
};

/**
 * The installed provider package implements a model specification version the
 * installed `ai` cannot call (for example `@ai-sdk/openai-compatible@3`, spec
 * `v4`, beside `ai@6`, which calls `v2`/`v3`). Code `PROVIDER_VERSION`. Nothing
 * was sent to the model.
 */
export class ProviderVersionError extends DumplingsError {
  /** The provider package. */
  readonly packageName: ProviderPackage;
  /** The provider's version, when its package.json was readable. */
  readonly providerVersion: string | undefined;
  /** The model specification version it implements (`"v4"`). */
  readonly specificationVersion: string;
  /** The installed `ai` version. */
  readonly aiVersion: string;
  /** The command that installs the matching major. */
  readonly fix: string;
  constructor(options: {
    packageName: ProviderPackage;
    providerVersion: string | undefined;
    specificationVersion: string;
    aiVersion: string;
  }) {
    const fix = providerInstallHint(options.packageName, options.aiVersion);
    const provider = `${options.packageName}${options.providerVersion ? `@${options.providerVersion}` : ""}`;
    super(
      "PROVIDER_VERSION",
      `[dumplings:model] ${provider} implements model specification ${options.specificationVersion}, which ai@${options.aiVersion} cannot call (it calls ${supportedSpecs(options.aiVersion).join(", ")}). Install the provider made for ai@${majorOf(options.aiVersion)}: ${fix}`,
    );
    this.packageName = options.packageName;
    this.providerVersion = options.providerVersion;
    this.specificationVersion = options.specificationVersion;
    this.aiVersion = options.aiVersion;
    this.fix = fix;
  }
}

function majorOf(version: string): number {
  return Number.parseInt(version, 10);
}

/**
 * The model specification versions an `ai` major calls: ai@5 calls v2, ai@6 v2–v3,
 * ai@7 v2–v4 (each major adapts the older specifications and adds one).
 */
function supportedSpecs(aiVersion: string): string[] {
  const newest = majorOf(aiVersion) - 3;
  const out: string[] = [];
  for (let v = 2; v <= newest; v++) out.push(`v${v}`);
  return out;
}

/**
 * The command installing the provider package made for an `ai` major: ai@6 ↔
 * `@ai-sdk/anthropic@3` / `@ai-sdk/openai-compatible@2` (specification v3);
 * ai@7 ↔ `@ai-sdk/anthropic@4` / `@ai-sdk/openai-compatible@3` (v4).
 *
 * @param packageName - `@ai-sdk/anthropic` or `@ai-sdk/openai-compatible`
 * @param aiVersion - the installed `ai` version; unknown gives the command without a major
 * @returns for example `npm i @ai-sdk/openai-compatible@2`
 * @example
 * providerInstallHint("@ai-sdk/anthropic", "6.0.1") // "npm i @ai-sdk/anthropic@3"
 */
export function providerInstallHint(packageName: ProviderPackage, aiVersion: string | undefined): string {
  const ai = aiVersion === undefined ? Number.NaN : majorOf(aiVersion);
  if (!Number.isInteger(ai) || ai < 6) return `npm i ${packageName}`;
  // each provider major follows one specification version, and each ai major adds one
  const major = packageName === "@ai-sdk/anthropic" ? ai - 3 : ai - 4;
  return `npm i ${packageName}@${major}`;
}

/** The version range to install of a provider for the installed `ai` (`"2"` for openai-compatible beside ai@6), `"latest"` when unknown. */
function providerRange(packageName: ProviderPackage, aiVersion: string | undefined): string {
  const hint = providerInstallHint(packageName, aiVersion);
  const at = hint.lastIndexOf("@");
  return at > hint.indexOf(" ") + 2 ? hint.slice(at + 1) : "latest";
}

/**
 * Checks that a model's specification version is one the installed `ai` calls.
 *
 * @param packageName - the provider package that built the model
 * @param specificationVersion - the model's `specificationVersion` (`"v3"`)
 * @param aiVersion - the installed `ai` version
 * @param providerVersion - the provider package's version, for the message
 * @throws {ProviderVersionError} when `ai` cannot call that specification
 * @example
 * assertProviderFits("@ai-sdk/openai-compatible", "v4", "6.0.326"); // throws: npm i @ai-sdk/openai-compatible@2
 */
export function assertProviderFits(
  packageName: ProviderPackage,
  specificationVersion: string,
  aiVersion: string,
  providerVersion?: string,
): void {
  if (supportedSpecs(aiVersion).includes(specificationVersion)) return;
  throw new ProviderVersionError({ packageName, providerVersion, specificationVersion, aiVersion });
}

const requireHere = createRequire(import.meta.url);

/** A package's version as resolved from this module (`undefined` when it cannot be read). */
function installedVersion(name: string): string | undefined {
  try {
    return (requireHere(`${name}/package.json`) as { version?: string }).version;
  } catch {
    return undefined;
  }
}

/** How a provider package is imported (a test seam: the default is a dynamic `import()`). */
export type ProviderImporter = (packageName: ProviderPackage) => Promise<Record<string, unknown>>;

const importProvider: ProviderImporter = (packageName) =>
  packageName === "@ai-sdk/anthropic" ? import("@ai-sdk/anthropic") : import("@ai-sdk/openai-compatible");

const loaded = new Map<ProviderPackage, Promise<Record<string, unknown>>>();

/**
 * Imports a provider package once per process.
 *
 * @param packageName - the provider package
 * @param importer - how to import it @default a dynamic `import()`
 * @returns the package's module namespace
 * @throws {MissingPeerError} when the package is not installed
 */
export async function loadProvider(
  packageName: ProviderPackage,
  importer: ProviderImporter = importProvider,
): Promise<Record<string, unknown>> {
  const cached = importer === importProvider ? loaded.get(packageName) : undefined;
  if (cached) return cached;
  const pending = importer(packageName).catch((cause: unknown) => {
    if (importer === importProvider) loaded.delete(packageName);
    const code = (cause as { code?: unknown } | null)?.code;
    const message = String((cause as { message?: unknown } | null)?.message ?? "");
    if ((code === "ERR_MODULE_NOT_FOUND" || code === "MODULE_NOT_FOUND") && message.includes(`'${packageName}'`)) {
      throw new MissingPeerError("model", packageName, providerRange(packageName, installedVersion("ai")), { cause });
    }
    throw cause;
  });
  if (importer === importProvider) loaded.set(packageName, pending);
  return pending;
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
 * The provider package is imported on the first call.
 *
 * @param settings - `apiProvider`, `modelName`, `apiKeyEnv`
 * @param protocol - `openai` or `anthropic`
 * @param env - environment to read the key from @default process.env
 * @param importer - how provider packages are imported (tests) @default a dynamic `import()`
 * @returns a `LanguageModel` for `generateText` / `streamText`
 * @throws {ModelConfigError} when `apiProvider` or `modelName` is empty or the URL is invalid
 * @throws {MissingSecretError} when `apiKeyEnv` names a variable that is not set (nothing is sent)
 * @throws {MissingPeerError} when the protocol's provider package is not installed
 * @throws {ProviderVersionError} when the installed provider's model specification does not fit the installed `ai`
 * @example
 * const model = await createLanguageModel({ apiProvider: "http://127.0.0.1:11434/v1", modelName: "llama3.2", apiKeyEnv: "" }, "openai");
 */
export async function createLanguageModel(
  settings: ModelSettings,
  protocol: Protocol,
  env: NodeJS.ProcessEnv = process.env,
  importer?: ProviderImporter,
): Promise<LanguageModel> {
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
  const packageName = PROVIDER_OF[protocol];
  const provider = await loadProvider(packageName, importer);
  let model: Exclude<LanguageModel, string>;
  if (protocol === "anthropic") {
    const { createAnthropic } = provider as unknown as typeof import("@ai-sdk/anthropic");
    // the Anthropic provider insists on a key; a local server ignores it
    model = createAnthropic({ baseURL, apiKey: apiKey ?? "no-key" })(settings.modelName) as Exclude<
      LanguageModel,
      string
    >;
  } else {
    const { createOpenAICompatible } = provider as unknown as typeof import("@ai-sdk/openai-compatible");
    model = createOpenAICompatible({
      name: "openai-compatible",
      baseURL,
      ...(apiKey ? { apiKey } : {}),
      includeUsage: true,
    }).chatModel(settings.modelName) as Exclude<LanguageModel, string>;
  }
  const aiVersion = installedVersion("ai");
  const spec = (model as { specificationVersion?: unknown }).specificationVersion;
  if (aiVersion !== undefined && typeof spec === "string") {
    assertProviderFits(packageName, spec, aiVersion, installedVersion(packageName));
  }
  return model;
}
