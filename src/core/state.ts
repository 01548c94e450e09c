/**
 * The complete, typed state of an agent: what `.duas` files and every backend
 * store. Field names are camelCase here; the on-disk `.duas` keys are the
 * snake_case names given in each field's doc.
 *
 * @module
 */
import { z } from "zod";
import { InvalidStateError } from "./errors.js";
import type { JsonValue } from "./json.js";
import { type Message, messageSchemaFor, type Protocol, ProtocolSchema } from "./messages.js";

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

const jsonValue: z.ZodType<JsonValue> = z.lazy(() =>
  z.union([z.null(), z.boolean(), z.number(), z.string(), z.array(jsonValue), z.record(z.string(), jsonValue)]),
);

/** `[STATE]` of a saved state. */
export const AgentRuntimeStateSchema = z.object({
  /** `current_task_id`: id of the current/last turn, or null. */
  currentTaskId: z.string().nullable(),
  /** `hooks`: tool-call hooks as `module:export` names. */
  hooks: z.array(z.string()),
  /** Persistent fields declared by an agent subclass, by field name (JSON values). */
  fields: z.record(z.string(), jsonValue),
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
