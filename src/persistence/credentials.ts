/**
 * "No secrets at rest" (DESIGN.md): an agent stores the NAME of the
 * environment variable holding its API key (`apiKeyEnv`), never the key.
 * Before anything is written, the config fields that could carry a secret
 * by mistake — `apiKeyEnv`, `apiProvider`, `modelName` — are checked, and a
 * credential-looking value is refused with a {@link CredentialError} naming
 * the field (the error never repeats the secret). Nothing is written then.
 *
 * What counts as credential-looking:
 * - a provider key prefix: `sk-…` (OpenAI, Anthropic `sk-ant-…`), `ghp_`,
 *   `github_pat_`, `xox[abpr]-` (Slack), `AKIA…` (AWS), `AIza…` (Google),
 *   `hf_…`, `gsk_…`, `glpat-…`, `pk_/sk_/rk_(live|test)_…` (Stripe), a JWT
 *   (`eyJ….eyJ….…`);
 * - `Bearer …` / `Basic …` authorization values;
 * - in a URL: a password in the user-info part (`https://user:pw@host`), or
 *   a non-empty query parameter named like a secret (`api_key`, `apikey`,
 *   `key`, `token`, `access_token`, `secret`, `password`, `sig`, `auth`, …);
 * - a long high-entropy token: a run of ≥ 32 letters/digits (with `-`/`_`
 *   inside) mixing upper case, lower case and digits with ≥ 4 bits of
 *   Shannon entropy per character. Hex ids and UUIDs (one letter case) and
 *   dashed model names (`Meta-Llama-3.1-405B-Instruct-Turbo`: short
 *   segments) are not flagged.
 *
 * `apiKeyEnv` must, in addition, look like an environment-variable name
 * (`[A-Za-z_][A-Za-z0-9_]*`) or be empty.
 *
 * The history is stored exactly by default: it must round-trip (a tool
 * call's arguments are the model's own words), so silently redacting it
 * would be data loss. Secrets inside tool-call arguments are handled by an
 * explicit policy, `configure({ toolArgumentSecrets: "keep" | "redact" |
 * "refuse" })` (see {@link ToolArgumentSecretsPolicy}).
 *
 * @module
 */
import { CredentialError } from "../core/errors.js";
import type { AgentConfig } from "../core/state.js";
import { MissingSecretError } from "./errors.js";

const PREFIXES: readonly [RegExp, string][] = [
  [/(?:^|[^A-Za-z0-9])sk-[A-Za-z0-9_-]{8,}/, "an API secret key (sk-…)"],
  [/(?:^|[^A-Za-z0-9])(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{20,}/, "a GitHub token"],
  [/github_pat_[A-Za-z0-9_]{20,}/, "a GitHub token"],
  [/(?:^|[^A-Za-z0-9])xox[abpr]-[A-Za-z0-9-]{10,}/, "a Slack token"],
  [/(?:^|[^A-Za-z0-9])AKIA[0-9A-Z]{16}(?![0-9A-Z])/, "an AWS access key id"],
  [/(?:^|[^A-Za-z0-9])AIza[0-9A-Za-z_-]{30,}/, "a Google API key"],
  [/(?:^|[^A-Za-z0-9])hf_[A-Za-z0-9]{20,}/, "a Hugging Face token"],
  [/(?:^|[^A-Za-z0-9])gsk_[A-Za-z0-9]{20,}/, "a Groq API key"],
  [/(?:^|[^A-Za-z0-9])glpat-[A-Za-z0-9_-]{16,}/, "a GitLab token"],
  [/(?:^|[^A-Za-z0-9])[spr]k_(?:live|test)_[A-Za-z0-9]{10,}/, "a Stripe key"],
  [/eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*/, "a JSON Web Token"],
  [/(?:^|[^A-Za-z0-9])[Bb]earer\s+\S{6,}/, "an Authorization header value (Bearer …)"],
  [/(?:^|[^A-Za-z0-9])Basic\s+[A-Za-z0-9+/]{8,}={0,2}/, "an Authorization header value (Basic …)"],
];

const SECRET_PARAM =
  /^(?:api[-_]?key|apikey|x[-_]api[-_]key|key|token|access[-_]?token|refresh[-_]?token|id[-_]?token|auth|authorization|secret|client[-_]?secret|password|passwd|pwd|sig|signature|code|session|sessionid|private[-_]?key)$/i;

/** Shannon entropy of a string, in bits per character. */
export function shannonEntropy(s: string): number {
  const counts = new Map<string, number>();
  for (const ch of s) counts.set(ch, (counts.get(ch) ?? 0) + 1);
  let h = 0;
  const n = [...s].length;
  for (const c of counts.values()) {
    const p = c / n;
    h -= p * Math.log2(p);
  }
  return h;
}

function highEntropyToken(value: string): boolean {
  for (const run of value.match(/[A-Za-z0-9_-]{32,}/g) ?? []) {
    // Word-like runs (model names, slugs) are made of short dash/underscore-separated segments.
    const longest = Math.max(...run.split(/[-_]/).map((x) => x.length));
    if (longest < 20) continue;
    if (!/[a-z]/.test(run) || !/[A-Z]/.test(run) || !/[0-9]/.test(run)) continue;
    if (shannonEntropy(run) >= 4) return true;
  }
  return false;
}

function urlProblem(value: string): string | undefined {
  for (const candidate of value.match(/[a-z][a-z0-9+.-]*:\/\/[^\s"'<>]+/gi) ?? []) {
    let url: URL;
    try {
      url = new URL(candidate);
    } catch {
      continue;
    }
    if (url.password !== "") return "a URL with a password in it (user:password@host)";
    if (url.username !== "" && highEntropyToken(url.username)) return "a URL with a token as its user name";
    for (const [name, v] of url.searchParams) {
      if (v !== "" && SECRET_PARAM.test(name)) return `a URL whose query string carries a secret (${name}=…)`;
    }
    if (url.hash.length > 1) {
      const frag = new URLSearchParams(url.hash.slice(1));
      for (const [name, v] of frag) {
        if (v !== "" && SECRET_PARAM.test(name)) return `a URL whose fragment carries a secret (${name}=…)`;
      }
    }
  }
  // A bare query string without a scheme, e.g. "host/v1?api_key=…".
  const q = value.match(/[?&]([A-Za-z0-9_-]+)=([^&#\s]+)/g) ?? [];
  for (const pair of q) {
    const [name] = pair.slice(1).split("=");
    if (name !== undefined && SECRET_PARAM.test(name)) return `a query string that carries a secret (${name}=…)`;
  }
  return undefined;
}

/**
 * Why a string looks like a credential, or undefined when it does not.
 *
 * @param value - the string to check
 * @returns a short reason that does not repeat the secret, or undefined
 * @example
 * credentialReason("sk-proj-abc123def456ghi789") // "it looks like an API secret key (sk-…)"
 * credentialReason("gpt-4o-mini") // undefined
 */
export function credentialReason(value: string): string | undefined {
  for (const [re, what] of PREFIXES) if (re.test(value)) return `it looks like ${what}`;
  const u = urlProblem(value);
  if (u !== undefined) return `it contains ${u}`;
  if (highEntropyToken(value)) return "it contains a long high-entropy token (an API key?)";
  return undefined;
}

const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** Values already found clean: an agent saved after every turn is checked once, not at every save. */
const knownClean = new Set<string>();
const KNOWN_CLEAN_LIMIT = 4096;

/**
 * Refuses a config that carries a credential-looking value in `apiKeyEnv`,
 * `apiProvider` or `modelName`, or an `apiKeyEnv` that is not an env-var name.
 *
 * @param config - the agent config about to be stored
 * @throws {CredentialError} naming the field (`config.apiKeyEnv`, …); the secret itself is never in the message
 * @example
 * assertNoCredentials({ ...config, apiKeyEnv: "sk-live-…" }) // throws CredentialError (field "config.apiKeyEnv")
 */
export function assertNoCredentials(config: Pick<AgentConfig, "apiKeyEnv" | "apiProvider" | "modelName">): void {
  const fields = [
    ["apiKeyEnv", config.apiKeyEnv],
    ["apiProvider", config.apiProvider],
    ["modelName", config.modelName],
  ] as const;
  for (const [field, value] of fields) {
    if (typeof value !== "string" || knownClean.has(value)) continue;
    const reason = credentialReason(value);
    if (reason !== undefined) throw new CredentialError(`config.${field}`, reason);
    if (knownClean.size >= KNOWN_CLEAN_LIMIT) knownClean.clear();
    knownClean.add(value);
  }
  if (config.apiKeyEnv !== "" && !ENV_NAME.test(config.apiKeyEnv)) {
    throw new CredentialError(
      "config.apiKeyEnv",
      "it is not the name of an environment variable (letters, digits and _, not starting with a digit)",
    );
  }
}

/**
 * Reads an agent's API key from the environment variable its `apiKeyEnv`
 * names, at call time (the key is never stored).
 *
 * @param config - `apiKeyEnv` (and optionally the agent `name`, for the message)
 * @param env - environment to read @default process.env
 * @returns the key
 * @throws {MissingSecretError} naming the variable when `apiKeyEnv` is empty or the variable is unset/empty
 * @example
 * const key = resolveApiKey(agent.config); // reads process.env.OPENAI_API_KEY when apiKeyEnv = "OPENAI_API_KEY"
 */
export function resolveApiKey(
  config: { apiKeyEnv: string; name?: string },
  env: NodeJS.ProcessEnv = process.env,
): string {
  const name = config.apiKeyEnv;
  const value = name === "" ? undefined : env[name];
  if (value === undefined || value === "") throw new MissingSecretError(name, config.name);
  return value;
}

/**
 * What saving does with credential-looking values inside the tool-call
 * arguments of the history (`configure({ toolArgumentSecrets })`):
 * - `keep` (default): store the history exactly (it must round-trip; the
 *   arguments are the model's own words);
 * - `redact`: store a copy whose secrets are replaced by `[REDACTED]`
 *   (the agent in memory keeps the real values; a later load sees the
 *   redacted ones);
 * - `refuse`: refuse the save with a `CredentialError` naming the message
 *   index and field path.
 *
 * Scanned: OpenAI `tool_calls[].function.arguments` (parsed as JSON when
 * possible) and the `input` of Anthropic `tool_use`, `server_tool_use` and
 * `mcp_tool_use` blocks. A value is a secret when it matches the patterns of
 * {@link credentialReason} (key prefixes, `Bearer …`, a URL password or
 * secret query parameter), or when its JSON property is named like a secret
 * (`api_key`, `token`, `password`, `authorization`, …).
 */
export type ToolArgumentSecretsPolicy = "keep" | "redact" | "refuse";

/** The text that replaces a redacted secret. */
export const REDACTED = "[REDACTED]";

const REDACT_PATTERNS: readonly [RegExp, string][] = [
  [/\bsk-[A-Za-z0-9_-]{8,}/g, REDACTED],
  [/\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{20,}/g, REDACTED],
  [/github_pat_[A-Za-z0-9_]{20,}/g, REDACTED],
  [/\bxox[abpr]-[A-Za-z0-9-]{10,}/g, REDACTED],
  [/\bAKIA[0-9A-Z]{16}\b/g, REDACTED],
  [/\bAIza[0-9A-Za-z_-]{30,}/g, REDACTED],
  [/\bhf_[A-Za-z0-9]{20,}/g, REDACTED],
  [/\bgsk_[A-Za-z0-9]{20,}/g, REDACTED],
  [/\bglpat-[A-Za-z0-9_-]{16,}/g, REDACTED],
  [/\b[spr]k_(?:live|test)_[A-Za-z0-9]{10,}/g, REDACTED],
  [/eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*/g, REDACTED],
  [/\b([Bb]earer\s+)[^\s"'\\]{6,}/g, `$1${REDACTED}`],
  [/(\b[a-z][a-z0-9+.-]*:\/\/[^\s:@/"'\\]+:)[^\s@/"'\\]+@/gi, `$1${REDACTED}@`],
  [
    /([?&#](?:api[-_]?key|apikey|x[-_]api[-_]key|key|token|access[-_]?token|refresh[-_]?token|auth|secret|client[-_]?secret|password|sig|signature|code)=)[^&#\s"'\\]+/gi,
    `$1${REDACTED}`,
  ],
];

/**
 * Replaces credential-looking substrings of a text by `[REDACTED]`.
 *
 * @param text - any text
 * @returns the text with secrets replaced (the same string when there were none)
 * @example
 * redactSecrets('{"api_key":"sk-test-FAKE-0000000000"}') // '{"api_key":"[REDACTED]"}'
 */
export function redactSecrets(text: string): string {
  let out = text;
  for (const [re, by] of REDACT_PATTERNS) out = out.replace(re, by);
  return out;
}

function redactJson(value: unknown, key: string | undefined): unknown {
  if (typeof value === "string") {
    if (key !== undefined && value !== "" && value !== REDACTED && SECRET_PARAM.test(key)) return REDACTED;
    return redactSecrets(value);
  }
  if (Array.isArray(value)) return value.map((v) => redactJson(v, undefined));
  if (value !== null && typeof value === "object") {
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(value)) out[k] = redactJson(v, k);
    return out;
  }
  return value;
}

function redactArgumentsText(args: string): string {
  try {
    const parsed: unknown = JSON.parse(args);
    const red = redactJson(parsed, undefined);
    return JSON.stringify(red) === JSON.stringify(parsed) ? args : JSON.stringify(red);
  } catch {
    return redactSecrets(args);
  }
}

const TOOL_USE_BLOCKS = new Set(["tool_use", "server_tool_use", "mcp_tool_use"]);

/**
 * Applies a {@link ToolArgumentSecretsPolicy} to the tool-call arguments of one message.
 *
 * @param message - a history message (either protocol)
 * @param index - its index in the history, for the error path
 * @param policy - `keep`, `redact` or `refuse`
 * @returns a redacted copy when something was redacted, else the message itself
 * @throws {CredentialError} with `refuse`, naming `history[i].tool_calls[j].function.arguments` or `history[i].content[j].input`
 */
export function applyToolArgumentPolicy<M>(message: M, index: number, policy: ToolArgumentSecretsPolicy): M {
  if (policy === "keep" || message === null || typeof message !== "object") return message;
  const m = message as Record<string, unknown>;
  let changed = false;
  const fail = (field: string): never => {
    throw new CredentialError(
      field,
      "a tool call's arguments carry what looks like a secret (toolArgumentSecrets: refuse)",
    );
  };
  let toolCalls = m.tool_calls;
  if (Array.isArray(toolCalls)) {
    toolCalls = toolCalls.map((call, j) => {
      const fn = (call as { function?: { arguments?: unknown } })?.function;
      if (typeof fn?.arguments !== "string") return call;
      const red = redactArgumentsText(fn.arguments);
      if (red === fn.arguments) return call;
      if (policy === "refuse") fail(`history[${index}].tool_calls[${j}].function.arguments`);
      changed = true;
      return { ...(call as object), function: { ...fn, arguments: red } };
    });
  }
  let content = m.content;
  if (Array.isArray(content)) {
    content = content.map((block, j) => {
      const b = block as { type?: unknown; input?: unknown };
      if (typeof b?.type !== "string" || !TOOL_USE_BLOCKS.has(b.type) || b.input === undefined) return block;
      const red = redactJson(b.input, undefined);
      if (JSON.stringify(red) === JSON.stringify(b.input)) return block;
      if (policy === "refuse") fail(`history[${index}].content[${j}].input`);
      changed = true;
      return { ...b, input: red };
    });
  }
  if (!changed) return message;
  return { ...m, ...(toolCalls !== m.tool_calls ? { tool_calls: toolCalls } : {}), content } as M;
}
