/**
 * Reading what the original design (dumplingsAI 0.4.0, Python) wrote: its
 * spellings of the same agent state, mapped onto the current model. Only
 * reading: every writer of this package writes the canonical form.
 *
 * - `format_version = 1` (an integer, or the JSON number `1`) is the same
 *   version as `1.0`: {@link normalizeFormatVersion}.
 * - An SQLite `sessions` row of the original design keeps `meta`, `config`
 *   and `state` as snake_case JSON objects (`{"format_version": "1.0",
 *   "agent_uuid": …}`, `{"model_name": …}`, `{"current_task_id": …,
 *   "hooks": […], <subclass fields>}`): {@link fromOriginalRecord} maps them
 *   to `meta`/`config`/`state` of {@link AgentState}. Nothing is silently
 *   dropped: an unknown `meta` or `config` key is a {@link FormatError};
 *   an unknown `state` key is a subclass's persistent field (as in the
 *   original, which wrote them beside `current_task_id`).
 *
 * @module
 */
import { FormatError } from "./errors.js";
import { setOwn } from "./json.js";
import type { AgentState } from "./state.js";

/**
 * The canonical spelling of a `.duas` format version: an integer major
 * version `N` (text or number) is `N.0`; anything else is returned as text.
 *
 * @param version - the version as found (`"1"`, `1`, `"1.0"`…)
 * @returns `"1.0"` for `"1"`, `1` and `"1.0"`; other values as text
 * @example
 * normalizeFormatVersion("1")   // "1.0"
 * normalizeFormatVersion(1)     // "1.0"
 * normalizeFormatVersion("2.1") // "2.1"
 */
export function normalizeFormatVersion(version: unknown): string {
  if (typeof version === "number" && Number.isSafeInteger(version) && version >= 0) return `${version}.0`;
  const text = String(version);
  return /^(?:0|[1-9]\d*)$/.test(text) ? `${text}.0` : text;
}

const META: ReadonlyMap<string, string> = new Map([
  ["format_version", "formatVersion"],
  ["schema_version", "schemaVersion"],
  ["agent_uuid", "agentUuid"],
  ["agent_name", "agentName"],
  ["protocol", "protocol"],
  ["class", "class"],
  ["saved_at", "savedAt"],
  ["message_count", "messageCount"],
]);
const CONFIG: ReadonlyMap<string, string> = new Map([
  ["prompt", "prompt"],
  ["api_provider", "apiProvider"],
  ["api_key_env", "apiKeyEnv"],
  ["model_name", "modelName"],
  ["max_tokens", "maxTokens"],
  ["stream", "stream"],
  ["fc_model", "fcModel"],
  ["tool_timeout", "toolTimeout"],
  ["tool_max_workers", "toolMaxWorkers"],
]);

/**
 * True when a stored `meta` object is spelled as the original design wrote
 * it (snake_case `format_version` / `agent_uuid`, no camelCase `formatVersion`).
 *
 * @param meta - a parsed `meta` object
 * @returns whether {@link fromOriginalRecord} applies
 */
export function isOriginalRecord(meta: Record<string, unknown>): boolean {
  return (
    !Object.hasOwn(meta, "formatVersion") &&
    (Object.hasOwn(meta, "format_version") || Object.hasOwn(meta, "agent_uuid"))
  );
}

/**
 * Maps the snake_case `meta`, `config` and `state` objects of a record written
 * by the original design onto the current (camelCase) shape. The result is
 * validated afterwards by the caller's usual checks.
 *
 * @param parts - the three parsed JSON objects
 * @param label - what is read (a key or file), for errors
 * @returns `{ meta, config, state }`; `meta.formatVersion` normalized (`1` → `"1.0"`),
 *   `state.currentTaskId` `null` when absent, `state.hooks` `[]` when absent, other
 *   `state` keys in `state.fields`
 * @throws {FormatError} naming the unknown key of `meta` or `config`
 * @example
 * fromOriginalRecord({ meta: { format_version: 1, agent_uuid: "u", … }, config: { model_name: "gpt-4o" }, state: { current_task_id: "t1" } }, 'key "a"')
 */
export function fromOriginalRecord(
  parts: { meta: Record<string, unknown>; config: Record<string, unknown>; state: Record<string, unknown> },
  label: string,
): Pick<AgentState, "meta" | "config" | "state"> {
  const map = (section: string, obj: Record<string, unknown>, names: ReadonlyMap<string, string>) => {
    const out: Record<string, unknown> = {};
    for (const key of Object.keys(obj)) {
      const name = names.get(key);
      if (name === undefined) {
        throw new FormatError(
          `${label}: unknown key ${JSON.stringify(key)} in ${section} of a record in the original (0.4) layout`,
          { file: label },
        );
      }
      setOwn(out, name, obj[key]);
    }
    return out;
  };
  const meta = map("meta", parts.meta, META);
  if (meta.formatVersion !== undefined) meta.formatVersion = normalizeFormatVersion(meta.formatVersion);
  const config = map("config", parts.config, CONFIG);
  const fields: Record<string, unknown> = {};
  const state: Record<string, unknown> = { currentTaskId: null, hooks: [], fields };
  for (const key of Object.keys(parts.state)) {
    const value = parts.state[key];
    if (key === "current_task_id") state.currentTaskId = value ?? null;
    else if (key === "hooks") state.hooks = value ?? [];
    else setOwn(fields, key, value);
  }
  return { meta, config, state } as unknown as Pick<AgentState, "meta" | "config" | "state">;
}
