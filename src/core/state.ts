/**
 * The complete, typed state of an agent: what `.duas` files and every backend
 * store. Field names are camelCase here; the on-disk `.duas` keys are the
 * snake_case names given in each field's doc.
 *
 * @module
 */
import { z } from "zod";
import { FormatError, InvalidStateError, NonJsonValueError } from "./errors.js";
import { assertJson, checkStoredJson, isStoredJson, type JsonValue, type StoredJsonSource } from "./json.js";
import { isWellFormedMessage, type Message, messageSchemaFor, type Protocol, ProtocolSchema } from "./messages.js";
import { SUPPORTED_FORMAT_VERSIONS } from "./version.js";

/** Agent configuration (`[CONFIG]`). API keys are never stored: only the env-var name. */
export const AgentConfigSchema = z.object({
  /** `prompt`: the system prompt. @default "" */
  prompt: z.string().default(""),
  /** `api_provider`: base URL or full `…/chat/completions` / `…/messages` URL. @default "" */
  apiProvider: z.string().default(""),
  /** `api_key_env`: NAME of the environment variable holding the API key. @default "" */
  apiKeyEnv: z.string().default(""),
  /** `model_name`. @default "" */
  modelName: z.string().default(""),
  /** `max_tokens`: completion token limit. @default 4096 */
  maxTokens: z.number().int().positive().default(4096),
  /** `stream`: stream tokens while a turn runs. @default false */
  stream: z.boolean().default(false),
  /** `fc_model`: function-calling mode (run requested tools and call the model again). @default true */
  fcModel: z.boolean().default(true),
  /** `tool_timeout`: per-tool-call limit in seconds. @default 60 */
  toolTimeout: z.number().positive().default(60),
  /** `tool_max_workers`: tools of one round run at most this many at a time. @default 4 */
  toolMaxWorkers: z.number().int().positive().default(4),
});
/** Agent configuration, all fields present. */
export type AgentConfig = z.infer<typeof AgentConfigSchema>;
/** Agent configuration as accepted by constructors (every field optional). */
export type AgentConfigInput = z.input<typeof AgentConfigSchema>;

/** `[META]` of a saved state. */
export const StateMetaSchema = z.object({
  /** `format_version`, e.g. `"1.0"`. */
  formatVersion: z.string(),
  /** `schema_version`: version of the dumplings-ai package that wrote it. */
  schemaVersion: z.string(),
  /** `agent_uuid`. */
  agentUuid: z.string(),
  /** `agent_name`. */
  agentName: z.string(),
  /** `protocol`: `openai` or `anthropic`. */
  protocol: ProtocolSchema,
  /** `class`: `module:export` of the agent class, e.g. `dumplings-ai:BaseAgent`. */
  class: z.string(),
  /** `saved_at`: ISO-8601 with offset. */
  savedAt: z.string(),
  /** `message_count`: number of history messages (checked on load). */
  messageCount: z.number().int().nonnegative(),
});
export type StateMeta = z.infer<typeof StateMetaSchema>;

/**
 * `[STATE]` `fields`: an object of JSON values, checked in place: the parsed value is the caller's
 * object itself. zod's `z.record` would build a copy by assignment, and a key named `"__proto__"`
 * (legal JSON: a word in a word-count map, a user-supplied id) would set the copy's prototype
 * instead of being kept, at any depth: the value would be lost on the way through a backend. The
 * issue names the path of the first value JSON cannot carry (as {@link assertJson} does).
 */
const JsonFieldsSchema = z
  .custom<Record<string, JsonValue>>(
    (v) => v !== null && typeof v === "object" && !Array.isArray(v),
    "expected an object of JSON values",
  )
  .superRefine((v, ctx) => {
    try {
      assertJson(v, "fields");
    } catch (e) {
      if (!(e instanceof NonJsonValueError)) throw e;
      ctx.addIssue({ code: "custom", message: e.message });
    }
  });

/** `[STATE]` of a saved state. */
export const AgentRuntimeStateSchema = z.object({
  /** `current_task_id`: id of the current/last turn, or null. */
  currentTaskId: z.string().nullable(),
  /** `hooks`: tool-call hooks as `module:export` names. */
  hooks: z.array(z.string()),
  /** Persistent fields declared by an agent subclass, by field name (JSON values). */
  fields: JsonFieldsSchema,
});
export type AgentRuntimeState = z.infer<typeof AgentRuntimeStateSchema>;

/**
 * The whole state of an agent.
 *
 * Shape: `{ meta, config, state: { currentTaskId, hooks, fields }, history }`.
 */
export interface AgentState {
  meta: StateMeta;
  config: AgentConfig;
  state: AgentRuntimeState;
  /** History in the protocol's own message shape (`meta.protocol`). */
  history: Message[];
}

/**
 * Validates an untrusted object as an {@link AgentState}.
 *
 * @param value - candidate state
 * @param label - what it is, for the error (a key or file name)
 * @returns the validated state (messages keep their unknown extra fields)
 * @throws {InvalidStateError} naming the first offending field path
 */
export function parseAgentState(value: unknown, label = "state"): AgentState {
  const head = z
    .object({
      meta: StateMetaSchema,
      config: AgentConfigSchema,
      state: AgentRuntimeStateSchema,
      history: z.array(z.unknown()),
    })
    .safeParse(value);
  if (!head.success) throw zodToError(head.error, label);
  const protocol: Protocol = head.data.meta.protocol;
  const schema = messageSchemaFor(protocol);
  head.data.history.forEach((m, i) => {
    const r = schema.safeParse(m);
    if (!r.success) throw zodToError(r.error, label, `history[${i}]`);
  });
  return head.data as AgentState;
}

function zodToError(error: z.ZodError, label: string, prefix = ""): InvalidStateError {
  const issue = error.issues[0];
  const path = [prefix, ...(issue?.path ?? []).map((p) => (typeof p === "number" ? `[${p}]` : `.${String(p)}`))]
    .join("")
    .replace(/^\./, "");
  return new InvalidStateError(path, `${label}: ${issue?.message ?? "does not match the schema"}`, { cause: error });
}

/**
 * Refuses a stored `format_version` this build cannot read. Every read path
 * (load, a header read by `dumplings show`, a streamed history) checks it
 * before trusting anything else in the record.
 *
 * @param version - the stored `meta.formatVersion` (`undefined` passes: the schema check reports it)
 * @param file - where it is stored (a file, or a store label naming the key)
 * @throws {FormatError} with `version` set, naming the versions this build reads
 * @example
 * checkFormatVersion("9.0", "postgres:dumplings.sessions[\"k\"]") // throws FormatError
 */
export function checkFormatVersion(version: unknown, file: string | undefined): void {
  if (version === undefined) return;
  if (typeof version !== "string" || !SUPPORTED_FORMAT_VERSIONS.includes(version)) {
    throw new FormatError(
      `unsupported format_version ${JSON.stringify(version)} (this build reads ${SUPPORTED_FORMAT_VERSIONS.join(", ")}); upgrade dumplings-ai to read it`,
      { file, version: String(version) },
    );
  }
}

/**
 * The happy path of {@link checkStoredMessage}, allocating nothing: true when `value` is a JSON
 * object that keeps the read rule as it is and is a well-formed message of `protocol` (a known one).
 * False means "not sure": `checkStoredMessage` then decides and names the problem.
 *
 * @param value - a message just parsed from a store
 * @param protocol - the history's protocol
 * @example
 * isStoredMessage(JSON.parse('{"role":"user","content":"hi"}'), "openai") // true
 */
export function isStoredMessage(value: unknown, protocol: Protocol): boolean {
  return (
    typeof value === "object" &&
    value !== null &&
    !Array.isArray(value) &&
    isStoredJson(value) &&
    ProtocolSchema.options.includes(protocol) &&
    isWellFormedMessage(protocol, value)
  );
}

/**
 * Checks one history message read from a store by the rules a save applies:
 * the JSON read rule of `core/json.ts` (depth limit, numbers in range, `-0`
 * read as `0`) and the message schema of the history's protocol (an OpenAI
 * history never loads `{"role":"robot"}`).
 *
 * @param value - the parsed message
 * @param protocol - the history's protocol (`meta.protocol`; when it is not a known one, only
 *   the JSON rule is checked here: the header check refuses the state and names `meta.protocol`)
 * @param index - its index in the history
 * @param source - `label` naming the key, `file`, `line` when known
 * @returns the message
 * @throws {FormatError} naming the source, `history[index]` and the offending field
 * @example
 * checkStoredMessage({ role: "robot" }, "openai", 3, { label: 'key "k"', file: "redis:…" }) // throws FormatError
 */
export function checkStoredMessage(
  value: unknown,
  protocol: Protocol,
  index: number,
  source: StoredJsonSource,
): Message {
  if (isStoredMessage(value, protocol)) return value as Message;
  const where = { file: source.file, line: source.line };
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new FormatError(`${source.label}: history[${index}] is not a JSON object`, where);
  }
  checkStoredJson(value, { ...source, label: `${source.label}: history[${index}]` });
  // A header without a known protocol is refused by the header's own check, which names it.
  if (!ProtocolSchema.options.includes(protocol)) return value as Message;
  if (isWellFormedMessage(protocol, value)) return value as Message; // the schema's verdict, without zod
  const r = messageSchemaFor(protocol).safeParse(value);
  if (!r.success) {
    const issue = r.error.issues[0];
    const path = (issue?.path ?? []).map((p) => (typeof p === "number" ? `[${p}]` : `.${String(p)}`)).join("");
    throw new FormatError(
      `${source.label}: history[${index}]${path}: ${issue?.message ?? "not a valid message"} (not a ${protocol} message)`,
      { ...where, cause: r.error },
    );
  }
  return value as Message;
}
