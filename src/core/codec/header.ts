/** The `.duas` header (`[META]`, `[CONFIG]`, `[STATE]`): its layout options, validation and encoding. */

import { InvalidStateError } from "../errors.js";
import { assertJson, isWrittenJson } from "../json.js";
import {
  type AgentConfig,
  AgentConfigSchema,
  AgentRuntimeStateSchema,
  type AgentState,
  type StateMeta,
  StateMetaSchema,
} from "../state.js";
import { crcHex, crcOf, historyCrc } from "./crc.js";
import { encodeIniString, IDENT, quoteString } from "./escape.js";

/** First line of every `.duas` file. */
export const DUAS_MAGIC_LINE = "# dumplingsAI Agent State File";
export const FORMAT_LINE_PREFIX = "# format: duagent-state/";
/** Third line: the do-not-edit warning. */
export const DUAS_WARNING_LINE =
  "# Written by dumplings-ai: do not edit by hand (values are escaped; [HISTORY] is one JSON message per line).";

// ---------------------------------------------------------------------------
// Encoding

/** Options of {@link encodeHeader}. @internal used by FileBackend */
export interface HeaderLayout {
  /** Write `[META] revision = n`. */
  revision?: number;
  /**
   * Pad the in-place-updatable META values (`saved_at`, `message_count`,
   * `revision`) with trailing spaces to fixed widths so a later update can
   * overwrite them without moving bytes. @default false
   */
  fixedWidth?: boolean;
  /** Total byte length to pad the header to with a final `#   …` comment line (must be large enough). */
  padTo?: number;
  /** Write `[META] generation = <id>`: the identity of this file's incarnation (FileBackend). */
  generation?: string;
  /**
   * Write `[META] key = <key>`: the state key the file was written under (FileBackend), so a read
   * under another key that names the same file (`Alice` and `alice` on a case-insensitive file
   * system) can be refused. Written by whole-file writes, constant for the file's life.
   */
  key?: string;
  /** Write `[META] history_crc32 = <8 hex digits>`: the {@link historyCrc} of the history lines. */
  historyCrc32?: string;
  /** Write `[META] header_crc32`: the CRC-32 of the canonical header (module doc, "Integrity"). @default false */
  checksum?: boolean;
  /** Write `[META] history_bytes = n`: the byte length of the history lines `message_count` counts (FileBackend). */
  historyBytes?: number;
  /** Write `[META] prior_commit`: the save before this one (FileBackend's one-sync appends; module doc, "Commits"). */
  prior?: PriorCommit;
}

/**
 * The commit before the header's own, kept in `[META] prior_commit` by
 * FileBackend: what a reader falls back to when the history bytes of the
 * header's commit are not all on disk (a power loss between the write and its
 * `fdatasync`). @internal used by FileBackend
 */
export interface PriorCommit {
  revision: number;
  messageCount: number;
  /** Byte length of the history lines through that commit. */
  historyBytes: number;
  /** `history_crc32` at that commit (8 lowercase hex digits). */
  historyCrc32: string;
  savedAt: string;
}

/** Widths of the fixed-width META values written when {@link HeaderLayout.fixedWidth} is set. */
export const FIXED_WIDTHS = {
  savedAt: 40,
  messageCount: 16,
  revision: 16,
  historyBytes: 16,
  priorCommit: 100,
} as const;

/** `[META] prior_commit`'s value: `<revision> <message_count> <history_bytes> <history_crc32> <saved_at>`. */
function priorText(p: PriorCommit): string {
  return `${p.revision} ${p.messageCount} ${p.historyBytes} ${p.historyCrc32} ${p.savedAt}`;
}

export function line(key: string, value: string): string {
  return `${key} = ${value}\n`;
}

function fixed(value: string, width: number | undefined): string {
  return width === undefined || value.length >= width ? value : value + " ".repeat(width - value.length);
}

function fieldKey(name: string): string {
  return IDENT.test(name) ? `field.${name}` : `field.${quoteString(name)}`;
}

/**
 * Validates the header parts of a state (meta/config/state) against the schemas
 * and returns the validated copies (config defaults filled in).
 */
export function checkHeader(state: AgentState): { meta: StateMeta; config: AgentConfig; st: AgentState["state"] } {
  return validateHeader(state.meta, state.config, state.state, "state");
}

/**
 * Validates meta/config/state with the schemas of `core/state.ts` (compiled
 * once; much cheaper than building the whole-state schema per call).
 *
 * @throws {InvalidStateError} with a path such as `meta.protocol` or `config.maxTokens`
 */
export function validateHeader(
  meta: unknown,
  config: unknown,
  st: unknown,
  label: string,
): { meta: StateMeta; config: AgentConfig; st: AgentState["state"] } {
  const m = parseMeta(meta, label);
  const c = AgentConfigSchema.safeParse(config);
  if (!c.success) throw issueError(c.error, "config", label);
  return { meta: m, config: c.data, st: parseRuntimeState(st, label) };
}

/**
 * `StateMetaSchema.parse(meta)` without zod for the common meta (every field of the right type, no
 * other check applies), which a save validates every time (its `savedAt` and `messageCount` change);
 * anything else is left to the schema, which reports it.
 */
export function parseMeta(meta: unknown, label: string): StateMeta {
  if (typeof meta === "object" && meta !== null && !Array.isArray(meta)) {
    const {
      formatVersion,
      schemaVersion,
      agentUuid,
      agentName,
      protocol,
      class: cls,
      savedAt,
      messageCount,
    } = meta as Record<string, unknown>;
    if (
      typeof formatVersion === "string" &&
      typeof schemaVersion === "string" &&
      typeof agentUuid === "string" &&
      typeof agentName === "string" &&
      (protocol === "openai" || protocol === "anthropic") &&
      typeof cls === "string" &&
      typeof savedAt === "string" &&
      typeof messageCount === "number" &&
      Number.isSafeInteger(messageCount) &&
      messageCount >= 0
    ) {
      return { formatVersion, schemaVersion, agentUuid, agentName, protocol, class: cls, savedAt, messageCount };
    }
  }
  const m = StateMetaSchema.safeParse(meta);
  if (!m.success) throw issueError(m.error, "meta", label);
  return m.data;
}

/**
 * `AgentRuntimeStateSchema.parse(st)` without zod when its values are plainly what the schema
 * accepts ({@link isWrittenJson}, the fields check's own fast walk); anything else is left to the
 * schema, which reports it.
 * The returned `fields` is the caller's object (callers keep the caller's own anyway).
 */
export function parseRuntimeState(st: unknown, label: string): AgentState["state"] {
  if (typeof st === "object" && st !== null && !Array.isArray(st)) {
    const { currentTaskId, hooks, fields } = st as Record<string, unknown>;
    if (
      (currentTaskId === null || typeof currentTaskId === "string") &&
      Array.isArray(hooks) &&
      hooks.every((h) => typeof h === "string") &&
      typeof fields === "object" &&
      fields !== null &&
      !Array.isArray(fields) &&
      isWrittenJson(fields)
    ) {
      return { currentTaskId, hooks: hooks.slice() as string[], fields: fields as AgentState["state"]["fields"] };
    }
  }
  const s = AgentRuntimeStateSchema.safeParse(st);
  if (!s.success) throw issueError(s.error, "state", label);
  return s.data;
}

export function issueError(
  error: { issues: readonly { path: readonly PropertyKey[]; message: string }[] },
  prefix: string,
  label: string,
): InvalidStateError {
  const issue = error.issues[0];
  const path = [prefix, ...(issue?.path ?? []).map((p) => (typeof p === "number" ? `[${p}]` : `.${String(p)}`))]
    .join("")
    .replace(/^\./, "");
  return new InvalidStateError(path, `${label}: ${issue?.message ?? "does not match the schema"}`, { cause: error });
}

/**
 * Encodes everything up to and including the `[HISTORY]` line.
 * `message_count` is `messageCount`. @internal used by FileBackend
 *
 * @param state - the state (its meta/config/state are validated)
 * @param messageCount - number of history messages the file will hold
 * @param layout - revision / fixed-width / padding options
 * @returns the header text
 * @throws {InvalidStateError} when meta/config/state do not match the schema
 * @throws {NonJsonValueError} when a `[STATE]` value is not JSON
 */
export function encodeHeader(state: AgentState, messageCount: number, layout: HeaderLayout = {}): string {
  assertJson(state.meta, "meta");
  assertJson(state.config, "config");
  assertJson(state.state, "state");
  const { meta, config, st: checked } = checkHeader(state);
  // zod's record copy would drop (or misuse) a field named "__proto__": keep the caller's own, already checked, object.
  const st = { ...checked, fields: state.state.fields };
  const prefix = headerPrefix(meta);
  const body = headerBody(config, st);
  let out = prefix + metaLines(meta, messageCount, layout, layout.fixedWidth === true);
  if (layout.checksum === true) {
    const canonical = metaLines(meta, messageCount, layout, false);
    out += line("header_crc32", crcHex(crcOf([prefix, canonical, body])));
  }
  out += body;
  if (layout.padTo !== undefined) {
    const used = Buffer.byteLength(out) + "[HISTORY]\n".length;
    const pad = layout.padTo - used;
    if (pad < 2) throw new RangeError(`header needs ${used + 2} bytes, more than padTo=${layout.padTo}`);
    out += `#${" ".repeat(pad - 2)}\n`;
  }
  return `${out}[HISTORY]\n`;
}

/**
 * What {@link encodeHeaderMemo} remembers of the `[CONFIG]` and `[STATE]`
 * sections it encoded (the "body" of the header, after the `header_crc32`
 * line), so that the next header with the same config and state is encoded
 * and sealed without touching the body again. @internal used by FileBackend
 */

export function headerPrefix(meta: StateMeta): string {
  return `${DUAS_MAGIC_LINE}\n${FORMAT_LINE_PREFIX}${meta.formatVersion}\n${DUAS_WARNING_LINE}\n\n[META]\n`;
}

/** The `[META]` key lines (without `header_crc32`), fixed-width or canonical. */
export function metaLines(meta: StateMeta, messageCount: number, layout: HeaderLayout, fw: boolean): string {
  return constantMetaLines(meta) + changingMetaLines(meta, messageCount, layout, fw);
}

/** The `[META]` lines a session's saves do not change (`format_version` … `class`), the same fixed-width or not. */
export function constantMetaLines(meta: StateMeta): string {
  return (
    line("format_version", encodeIniString(meta.formatVersion)) +
    line("schema_version", encodeIniString(meta.schemaVersion)) +
    line("agent_uuid", encodeIniString(meta.agentUuid)) +
    line("agent_name", encodeIniString(meta.agentName)) +
    line("protocol", encodeIniString(meta.protocol)) +
    line("class", encodeIniString(meta.class))
  );
}

/**
 * The text before the changing `[META]` lines (the prefix and {@link constantMetaLines}) and its
 * CRC-32, per `agentUuid` (at most 1024; sessions saved in turn each keep theirs): a writer saving a
 * session again and again encodes and checksums them once.
 */

/** The `[META]` lines after {@link constantMetaLines}: `saved_at`, `message_count` and the layout's. */
export function changingMetaLines(meta: StateMeta, messageCount: number, layout: HeaderLayout, fw: boolean): string {
  let out =
    line("saved_at", fixed(encodeIniString(meta.savedAt), fw ? FIXED_WIDTHS.savedAt : undefined)) +
    line("message_count", fixed(String(messageCount), fw ? FIXED_WIDTHS.messageCount : undefined));
  if (layout.revision !== undefined) {
    out += line("revision", fixed(String(layout.revision), fw ? FIXED_WIDTHS.revision : undefined));
  }
  if (layout.generation !== undefined) out += line("generation", encodeIniString(layout.generation));
  if (layout.key !== undefined) out += line("key", encodeIniString(layout.key));
  if (layout.historyCrc32 !== undefined) out += line("history_crc32", encodeIniString(layout.historyCrc32));
  if (layout.historyBytes !== undefined) {
    out += line("history_bytes", fixed(String(layout.historyBytes), fw ? FIXED_WIDTHS.historyBytes : undefined));
  }
  if (layout.prior !== undefined) {
    out += line(
      "prior_commit",
      fixed(encodeIniString(priorText(layout.prior)), fw ? FIXED_WIDTHS.priorCommit : undefined),
    );
  }
  return out;
}

/** `[CONFIG]` and `[STATE]` with the blank line after them. */
export function headerBody(config: AgentConfig, st: AgentState["state"]): string {
  return configSection(config) + stateSection(st);
}

/** `[CONFIG]` with the blank line before it. */
export function configSection(config: AgentConfig): string {
  return (
    "\n[CONFIG]\n" +
    line("prompt", encodeIniString(config.prompt)) +
    line("api_provider", encodeIniString(config.apiProvider)) +
    line("api_key_env", encodeIniString(config.apiKeyEnv)) +
    line("model_name", encodeIniString(config.modelName)) +
    line("max_tokens", String(config.maxTokens)) +
    line("stream", String(config.stream)) +
    line("fc_model", String(config.fcModel)) +
    line("tool_timeout", String(config.toolTimeout)) +
    line("tool_max_workers", String(config.toolMaxWorkers))
  );
}

/** `[STATE]` with the blank lines before and after it. */
export function stateSection(st: AgentState["state"]): string {
  let out = `\n[STATE]\n${line("current_task_id", JSON.stringify(st.currentTaskId))}${line("hooks", JSON.stringify(st.hooks))}`;
  for (const name of Object.keys(st.fields)) {
    out += line(fieldKey(name), JSON.stringify(st.fields[name]));
  }
  return `${out}\n`;
}
