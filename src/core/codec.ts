/**
 * The `.duas` codec (format `duagent-state/1.0`): an agent's whole state as a
 * human-readable, line-oriented UTF-8 text, and back.
 *
 * ## Layout
 *
 * ```text
 * # dumplingsAI Agent State File
 * # format: duagent-state/1.0
 * # Written by dumplings-ai: do not edit by hand (values are escaped; [HISTORY] is one JSON message per line).
 *
 * [META]
 * format_version = 1.0
 * schema_version = 0.1.0            ← the package's own version (package.json)
 * agent_uuid = 5b0c…
 * agent_name = weather
 * protocol = openai                 ← openai | anthropic
 * class = dumplings-ai:BaseAgent
 * saved_at = 2026-01-02T03:04:05.678Z
 * message_count = 3                 ← checked on load: a cut file is caught
 * revision = 7                      ← only in files written by FileBackend,
 * generation = 3f0c…                ←   as are these three (see "Integrity" below)
 * key = weather-42                  ← FileBackend: the state key (see "Key")
 * history_crc32 = 9a4e01c2
 * header_crc32 = 51d2e7f0
 *
 * [CONFIG]
 * prompt = "You are terse.\nAnswer in French."
 * api_provider = https://api.openai.com/v1
 * api_key_env = OPENAI_API_KEY      ← the NAME of the env var, never the key
 * model_name = gpt-4o
 * max_tokens = 4096
 * stream = false
 * fc_model = true
 * tool_timeout = 60
 * tool_max_workers = 4
 *
 * [STATE]
 * current_task_id = "task-12"       ← [STATE] values are JSON
 * hooks = ["./hooks.js:audit"]
 * field.counter = 3                 ← one line per subclass field: field.<name> = <JSON>
 *
 * [HISTORY]
 * {"role":"system","content":"You are terse."}
 * {"role":"user","content":"hi"}
 * ```
 *
 * Every line ends with `\n` (the last one too). Sections appear exactly once,
 * in this order. Before `[HISTORY]`, blank lines and lines starting with `#`
 * or `;` are comments. A `#` preceded by whitespace after a value starts an
 * inline comment (`api_key_env = API_KEY   # a note`, as the original design's
 * example writes them), except inside a JSON string literal; the writer
 * never writes one (it quotes every string holding `#`), so its values are
 * never cut.
 * Every key is required except `revision`, `generation`, `key`,
 * `history_crc32`, `header_crc32` (and FileBackend's `history_bytes`,
 * `prior_commit`) and the `field.*` keys; unknown and duplicate keys are
 * errors (nothing is ever silently dropped).
 *
 * ## Key (files written by FileBackend)
 *
 * `key` is the state key the file was written whole under (a string, escaped
 * as any `[META]` string). A file system that folds case or normalises
 * Unicode (macOS and Windows by default) gives `Alice.duas` and `alice.duas`,
 * or `é` and `e\u0301`, one file: FileBackend reads `key` and refuses to
 * read, write or delete the file under a key that differs from it when both
 * names lead to the same file. It is sealed by `header_crc32` like the rest.
 *
 * ## Integrity (files written by FileBackend)
 *
 * A structurally valid file can still hold other data than was saved: a
 * swapped or duplicated history line, a flipped byte inside a string. Files
 * written by FileBackend therefore carry, in `[META]`:
 *
 * - `history_crc32`: the CRC-32 of the history lines, each with its `\n`
 *   (blank lines skipped, a `\r` before `\n` removed): a running checksum,
 *   so an append extends it from the stored value in O(new messages);
 * - `generation`: a random id of the file's incarnation (new with every
 *   whole-file write), which binds FileBackend's header journal to the file;
 * - `header_crc32`: the CRC-32 of the canonical header — the header as
 *   {@link encodeHeader} writes it without fixed-width padding, without the
 *   padding comment and without the `header_crc32` line — recomputed from the
 *   parsed values on read.
 *
 * They detect corruption and accidental edits (a flipped bit, a duplicated,
 * swapped or cut line: all but one in 2^32 of random damage), not tampering:
 * anyone who can edit the file can recompute any unkeyed checksum. Every
 * reader of this module verifies both when present ({@link decodeState}, and
 * {@link DuasLineParser} for streaming readers: the header before the first
 * message, the history in {@link DuasLineParser.end}); a mismatch is a
 * {@link FormatError}. A header with `generation` or `history_crc32` but no
 * `header_crc32` is refused. Text without them (written by {@link encodeState},
 * by the original design or by hand) is checked structurally only.
 *
 * ## Escaping rule (string values of `[META]` and `[CONFIG]`)
 *
 * A string is written **plain** (verbatim) when it is non-empty, does not
 * start with `"`, has no leading or trailing whitespace, and contains none of
 * `=` `#` `;` `[` `]`, no control character (U+0000–U+001F, U+007F–U+009F),
 * no U+2028/U+2029 and no lone UTF-16 surrogate. Any other string is written
 * as a **JSON string literal** (`"…"` with JSON's backslash escapes; U+007F–
 * U+009F, U+2028, U+2029 and lone surrogates always as `\uXXXX`), so
 * multi-line prompts, tabs, `\r\n`, NUL and half emoji all fit on one line and
 * come back byte for byte. Reading: the text after the first `=` with the
 * surrounding whitespace removed; if it starts with `"` it must be exactly
 * one JSON string literal, otherwise it is the value as is.
 * Numbers are JSON numbers (`4096`, `0.5`), booleans `true`/`false`.
 * `[STATE]` values and `[HISTORY]` lines are compact JSON (`JSON.stringify`):
 * lone surrogates become `\udXXX` escapes, line breaks inside strings are
 * escaped, other non-ASCII text stays raw UTF-8. A `field.<name>` key writes
 * the name plain when it is an identifier (`[A-Za-z_$][A-Za-z0-9_$]*`), else as
 * a JSON string literal: `field."my field" = 1`.
 *
 * ## Tolerated on read (unambiguous because the writer never produces them)
 *
 * A `\r` right before a line's `\n` (a file converted to CRLF) and a leading
 * UTF-8 byte-order mark are ignored; whitespace around `=` is optional;
 * blank lines inside `[HISTORY]` are ignored. Bytes that are not valid UTF-8
 * are a {@link FormatError}.
 *
 * ## Files of the original design (dumplingsAI 0.4.0)
 *
 * A file whose `[META]` says `format_version = 1` (an integer: the original
 * design's spelling; the second line may say `duagent-state/1` too) is read
 * as version `1.0` with the original's leniencies, which this package's
 * writer never produces and which are therefore not accepted in `1.0` files:
 * a `[STATE]` value that does not look like JSON is plain text
 * (`current_task_id = tid-abc123` is the string `tid-abc123`; empty or `None`
 * is null), a bare `[STATE]` key other than `current_task_id`/`hooks` is a
 * subclass field (`notes = ["a"]`, written back as `field.notes`), and
 * `True`/`False` are booleans (and `None` null in a field). Everything else is checked as in a `1.0` file,
 * and saving writes the canonical `1.0` form.
 *
 * `message_count` is always written as `history.length`. `.duas.gz` is the same
 * text gzip-compressed; {@link decodeStateBytes} detects it by its magic bytes.
 *
 * @module
 */
import { isUtf8 } from "node:buffer";
import * as zlib from "node:zlib";
import { gunzipSync, gzipSync } from "node:zlib";
import { FormatError, InvalidStateError } from "./errors.js";
import { assertJson, checkStoredJson, isWrittenJson, setOwn } from "./json.js";
import { isWellFormedMessage, type Message, messageSchemaFor, type Protocol } from "./messages.js";
import { checkOptions, optionKeys } from "./options.js";
import { normalizeFormatVersion } from "./original.js";
import {
  type AgentConfig,
  AgentConfigSchema,
  AgentRuntimeStateSchema,
  type AgentState,
  type StateMeta,
  StateMetaSchema,
} from "./state.js";
import { SUPPORTED_FORMAT_VERSIONS } from "./version.js";

/** The keys of the options of `decodeState` / `decodeStateBytes`, and of `encodeStateBytes`. */
const DECODE_OPTIONS = optionKeys<{ source?: string }>({ source: true });
const ENCODE_OPTIONS = optionKeys<{ gzip?: boolean }>({ gzip: true });

// The file extensions live in version.ts (the file backend lists its keys without loading this module).
export { DUAS_EXTENSION, DUAS_GZ_EXTENSION } from "./version.js";

/** First line of every `.duas` file. */
export const DUAS_MAGIC_LINE = "# dumplingsAI Agent State File";
const FORMAT_LINE_PREFIX = "# format: duagent-state/";
/** Third line: the do-not-edit warning. */
export const DUAS_WARNING_LINE =
  "# Written by dumplings-ai: do not edit by hand (values are escaped; [HISTORY] is one JSON message per line).";

const NEEDS_QUOTE = /[\u0000-\u001f\u007f-\u009f\u2028\u2029=#;[\]]/;
const EXTRA_ESCAPES = /[\u007f-\u009f\u2028\u2029]/g;
const PLAIN_FORBIDDEN = /[\u0000-\u001f\u007f-\u009f]/;
const IDENT = /^[A-Za-z_$][A-Za-z0-9_$]*$/;
const JSON_NUMBER = /^-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?$/;

// ---------------------------------------------------------------------------
// Escaping

/**
 * Encodes a string value of `[META]`/`[CONFIG]` by the module's escaping rule.
 *
 * @param value - any string (lone surrogates and control characters included)
 * @returns the text written after `key = ` (plain, or a JSON string literal)
 * @example
 * encodeIniString("gpt-4o")   // 'gpt-4o'
 * encodeIniString("a\nb")     // '"a\\nb"'
 * encodeIniString(" x")       // '" x"'
 */
export function encodeIniString(value: string): string {
  // A long value (a prompt of many MB) is saved again and again unchanged: scan and quote it once.
  if (value.length >= LONG_VALUE && lastLong?.value === value) return lastLong.encoded;
  const encoded =
    value === "" ||
    value.charCodeAt(0) === 0x22 ||
    value !== value.trim() ||
    NEEDS_QUOTE.test(value) ||
    !value.isWellFormed()
      ? quoteString(value)
      : value;
  if (value.length >= LONG_VALUE) lastLong = { value, encoded };
  return encoded;
}

/** Length from which {@link encodeIniString} remembers its last value (one entry: strings compare in O(1) when identical). */
const LONG_VALUE = 64 * 1024;
let lastLong: { value: string; encoded: string } | undefined;

/** JSON string literal with C1 controls, U+2028/9 escaped too (JSON.stringify already escapes lone surrogates). */
function quoteString(value: string): string {
  return JSON.stringify(value).replace(EXTRA_ESCAPES, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);
}

/**
 * Decodes a value written by {@link encodeIniString} (the raw text after `=`).
 *
 * @param raw - text after the `=`, surrounding whitespace allowed
 * @returns the string value
 * @throws {SyntaxError} only internally; callers wrap it into a {@link FormatError}
 */
function decodeIniString(raw: string): string {
  const text = raw.trim();
  if (text.charCodeAt(0) !== 0x22) {
    // The writer quotes every value holding a control character, so a plain one is malformed input.
    if (PLAIN_FORBIDDEN.test(text)) throw new SyntaxError("a plain value must not contain control characters");
    return text;
  }
  const v: unknown = JSON.parse(text);
  if (typeof v !== "string") throw new SyntaxError("not a single JSON string literal");
  return v;
}

// ---------------------------------------------------------------------------
// JSON checks

/**
 * Checks that every part of a state is JSON (see `core/json.ts` for the rule).
 * Used by {@link encodeState}; exported for backends that do not use the codec.
 *
 * @param state - the state to check
 * @throws {NonJsonValueError} naming the path (`history[3].content[0].text`,
 *   `state.fields.cache`) and, for a message, its `messageIndex`
 * @example
 * assertStateJson(state) // throws for a BigInt in history[2].content
 */
export function assertStateJson(state: AgentState): void {
  assertJson(state.meta, "meta");
  assertJson(state.config, "config");
  assertJson(state.state, "state");
  const history = state.history as unknown;
  if (!Array.isArray(history)) throw new InvalidStateError("history", "history must be an array");
  for (let i = 0; i < history.length; i++) {
    if (!(i in history)) assertJson(history, "history"); // reports the hole
    assertJson(history[i], `history[${i}]`, i);
  }
}

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

function line(key: string, value: string): string {
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
function checkHeader(state: AgentState): { meta: StateMeta; config: AgentConfig; st: AgentState["state"] } {
  return validateHeader(state.meta, state.config, state.state, "state");
}

/**
 * Validates meta/config/state with the schemas of `core/state.ts` (compiled
 * once; much cheaper than building the whole-state schema per call).
 *
 * @throws {InvalidStateError} with a path such as `meta.protocol` or `config.maxTokens`
 */
function validateHeader(
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
function parseMeta(meta: unknown, label: string): StateMeta {
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
function parseRuntimeState(st: unknown, label: string): AgentState["state"] {
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

function issueError(
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
export interface HeaderMemo {
  /** Shallow copy of the caller's `config` the body was encoded from (every value a primitive). */
  readonly config: Readonly<Record<string, unknown>>;
  /** The `[STATE]` section's text (a state is small: it is re-encoded and compared on every save). */
  readonly stateText: string;
  /** CRC-32 of the body's UTF-8 bytes. */
  readonly bodyCrc: number;
  /** The operator that carries a CRC-32 over the body's byte length (see {@link crc32Shift}). */
  readonly shift: Uint32Array;
  /** CRC-32 and UTF-8 byte length of the `[CONFIG]` section alone (the body's first part). */
  readonly configCrc: number;
  readonly configBytes: number;
}

/** The result of {@link encodeHeaderMemo}. @internal */
export interface EncodedHeader {
  /**
   * The whole header (as {@link encodeHeader} writes it), or, when `headOnly`,
   * only its first `headBytes` bytes: the prefix and `[META]` through the
   * `header_crc32` line (the body is byte for byte the one of the memo).
   */
  text: string;
  headOnly: boolean;
  /**
   * When only `[STATE]` changed (same config as the memo, a fixed-width layout): `text` is the head
   * (as with `headOnly`), the `[CONFIG]` bytes after it are the memo's, unchanged, and `tail` is the
   * rest of the header from byte `offset`: `[STATE]`, the padding and the `[HISTORY]` line.
   */
  tail?: { offset: number; text: string };
  /** UTF-8 byte length of the prefix and `[META]` through the `header_crc32` line. */
  headBytes: number;
  /** The memo for the next call (undefined when a config value is not a primitive). */
  memo: HeaderMemo | undefined;
}

function sameConfig(memo: Readonly<Record<string, unknown>>, config: object): boolean {
  const c = config as Record<string, unknown>;
  let n = 0;
  for (const k in c) {
    if (!Object.hasOwn(c, k)) continue;
    n++;
    if (!Object.hasOwn(memo, k) || memo[k] !== c[k]) return false;
  }
  return n === Object.keys(memo).length;
}

/**
 * {@link encodeHeader} with `checksum: true` for a writer that saves the same
 * session again and again: when `memo` (returned by the previous call for the
 * header now on disk) has the same config values (`===`, so an unchanged
 * 50 MB prompt costs nothing) and the same `[STATE]` text, the config is not
 * validated, encoded or checksummed again: only the head (prefix and
 * `[META]`) is returned, sealed with the body's cached CRC. The value of
 * `header_crc32` is the same as {@link encodeHeader}'s (CRC-32 is carried over
 * the body's length, zlib's `crc32_combine`): the format does not change.
 * @internal used by FileBackend
 *
 * @throws {InvalidStateError} / {NonJsonValueError} as {@link encodeHeader}
 * @throws {RangeError} when the whole header does not fit `layout.padTo`
 */
export function encodeHeaderMemo(
  state: AgentState,
  messageCount: number,
  layout: HeaderLayout,
  memo?: HeaderMemo,
): EncodedHeader {
  const reuse = memo !== undefined && sameConfig(memo.config, state.config);
  assertJson(state.meta, "meta");
  if (!reuse) assertJson(state.config, "config");
  assertJson(state.state, "state");
  const meta = parseMeta(state.meta, "state");
  let config: AgentConfig | undefined;
  if (!reuse) {
    const c = AgentConfigSchema.safeParse(state.config);
    if (!c.success) throw issueError(c.error, "config", "state");
    config = c.data;
  }
  const checked = parseRuntimeState(state.state, "state");
  // as encodeHeader: the caller's own (checked) fields object
  const stateText = stateSection({ ...checked, fields: state.state.fields });
  const start = headStart(meta);
  const canonicalHead = crc32(changingMetaLines(meta, messageCount, layout, false), start.crc);
  const head = start.text + changingMetaLines(meta, messageCount, layout, layout.fixedWidth === true);
  if (reuse && memo !== undefined && stateText === memo.stateText) {
    const text = head + line("header_crc32", crcHex((crc32Apply(memo.shift, canonicalHead) ^ memo.bodyCrc) >>> 0));
    return { text, headOnly: true, headBytes: Buffer.byteLength(text), memo };
  }
  const stateBytes = Buffer.byteLength(stateText);
  const stateCrc = crc32(stateText);
  if (reuse && memo !== undefined && layout.padTo !== undefined && layout.fixedWidth === true) {
    // Only [STATE] changed: the config's bytes and CRC are the memo's (a 50 MB prompt is not touched).
    const bodyCrc = (crc32Apply(crc32Shift(stateBytes), memo.configCrc) ^ stateCrc) >>> 0;
    const shift = crc32Shift(memo.configBytes + stateBytes);
    const sealed = head + line("header_crc32", crcHex((crc32Apply(shift, canonicalHead) ^ bodyCrc) >>> 0));
    const headBytes = Buffer.byteLength(sealed);
    const used = headBytes + memo.configBytes + stateBytes + "[HISTORY]\n".length;
    const pad = layout.padTo - used;
    if (pad < 2) throw new RangeError(`header needs ${used + 2} bytes, more than padTo=${layout.padTo}`);
    return {
      text: sealed,
      headOnly: false,
      tail: { offset: headBytes + memo.configBytes, text: `${stateText}#${" ".repeat(pad - 2)}\n[HISTORY]\n` },
      headBytes,
      memo: { ...memo, stateText, bodyCrc, shift },
    };
  }
  const configText = configSection(config ?? checkHeader(state).config);
  const body = configText + stateText;
  const configBytes = Buffer.byteLength(configText);
  const configCrc = crc32(configText);
  const bodyCrc = (crc32Apply(crc32Shift(stateBytes), configCrc) ^ stateCrc) >>> 0;
  const shift = crc32Shift(configBytes + stateBytes);
  const sealed = head + line("header_crc32", crcHex((crc32Apply(shift, canonicalHead) ^ bodyCrc) >>> 0));
  let out = sealed + body;
  if (layout.padTo !== undefined) {
    const used = Buffer.byteLength(out) + "[HISTORY]\n".length;
    const pad = layout.padTo - used;
    if (pad < 2) throw new RangeError(`header needs ${used + 2} bytes, more than padTo=${layout.padTo}`);
    out += `#${" ".repeat(pad - 2)}\n`;
  }
  const primitive = Object.values(state.config).every((v) => v === null || typeof v !== "object");
  return {
    text: `${out}[HISTORY]\n`,
    headOnly: false,
    headBytes: Buffer.byteLength(sealed),
    memo: primitive ? { config: { ...state.config }, stateText, bodyCrc, shift, configCrc, configBytes } : undefined,
  };
}

function headerPrefix(meta: StateMeta): string {
  return `${DUAS_MAGIC_LINE}\n${FORMAT_LINE_PREFIX}${meta.formatVersion}\n${DUAS_WARNING_LINE}\n\n[META]\n`;
}

/** The `[META]` key lines (without `header_crc32`), fixed-width or canonical. */
function metaLines(meta: StateMeta, messageCount: number, layout: HeaderLayout, fw: boolean): string {
  return constantMetaLines(meta) + changingMetaLines(meta, messageCount, layout, fw);
}

/** The `[META]` lines a session's saves do not change (`format_version` … `class`), the same fixed-width or not. */
function constantMetaLines(meta: StateMeta): string {
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
const headStarts = new Map<string, { meta: StateMeta; text: string; crc: number }>();

function headStart(meta: StateMeta): { text: string; crc: number } {
  const last = headStarts.get(meta.agentUuid);
  if (
    last !== undefined &&
    last.meta.formatVersion === meta.formatVersion &&
    last.meta.schemaVersion === meta.schemaVersion &&
    last.meta.agentUuid === meta.agentUuid &&
    last.meta.agentName === meta.agentName &&
    last.meta.protocol === meta.protocol &&
    last.meta.class === meta.class
  ) {
    return last;
  }
  const text = headerPrefix(meta) + constantMetaLines(meta);
  const start = { meta: { ...meta }, text, crc: crc32(text) };
  if (headStarts.size >= 1024) headStarts.clear();
  headStarts.set(meta.agentUuid, start);
  return start;
}

/** The `[META]` lines after {@link constantMetaLines}: `saved_at`, `message_count` and the layout's. */
function changingMetaLines(meta: StateMeta, messageCount: number, layout: HeaderLayout, fw: boolean): string {
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
function headerBody(config: AgentConfig, st: AgentState["state"]): string {
  return configSection(config) + stateSection(st);
}

/** `[CONFIG]` with the blank line before it. */
function configSection(config: AgentConfig): string {
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
function stateSection(st: AgentState["state"]): string {
  let out = `\n[STATE]\n${line("current_task_id", JSON.stringify(st.currentTaskId))}${line("hooks", JSON.stringify(st.hooks))}`;
  for (const name of Object.keys(st.fields)) {
    out += line(fieldKey(name), JSON.stringify(st.fields[name]));
  }
  return `${out}\n`;
}

const nativeCrc32 = (zlib as { crc32?: (data: string | Uint8Array, value?: number) => number }).crc32;
let crcTable: Uint32Array | undefined;

/** CRC-32 (the zlib/gzip polynomial) of `data` continued from `value`: zlib's where Node has it (>= 20.15). @internal */
export function crc32(data: string | Uint8Array, value = 0): number {
  // Nothing to add: and Node 20's zlib.crc32 may return 0 for an empty buffer whose memory another
  // Buffer has viewed (seen with Buffer.from(b.buffer, …) of a zero-length b).
  if (data.length === 0) return value;
  if (nativeCrc32) return nativeCrc32(data, value);
  if (!crcTable) {
    crcTable = new Uint32Array(256);
    for (let n = 0; n < 256; n++) {
      let c = n;
      for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
      crcTable[n] = c >>> 0;
    }
  }
  const bytes = typeof data === "string" ? Buffer.from(data, "utf8") : data;
  let c = ~value >>> 0;
  for (let i = 0; i < bytes.length; i++) c = (crcTable[(c ^ (bytes[i] as number)) & 0xff] as number) ^ (c >>> 8);
  return ~c >>> 0;
}

/** `vec` multiplied by the GF(2) matrix `mat` (32 columns). */
function gf2Times(mat: Uint32Array, vec: number): number {
  let sum = 0;
  let v = vec >>> 0;
  for (let i = 0; v !== 0; i++, v >>>= 1) if (v & 1) sum ^= mat[i] as number;
  return sum >>> 0;
}

/** The product `a · b` of two GF(2) 32×32 matrices (apply `b`, then `a`). */
function gf2Product(a: Uint32Array, b: Uint32Array): Uint32Array {
  const out = new Uint32Array(32);
  for (let n = 0; n < 32; n++) out[n] = gf2Times(a, b[n] as number);
  return out;
}

/**
 * The linear operator that carries a CRC-32 over `length` more bytes:
 * `crc32(A ‖ B) = crc32Apply(crc32Shift(B.length), crc32(A)) ^ crc32(B)`
 * (zlib's `crc32_combine`, as a matrix built once per length). @internal
 */
export function crc32Shift(length: number): Uint32Array {
  // the operator for one zero bit, then squared: 2, 4, 8 bits = one byte, then per bit of `length`
  let op: Uint32Array = new Uint32Array(32);
  op[0] = 0xedb88320;
  for (let n = 1; n < 32; n++) op[n] = (1 << (n - 1)) >>> 0;
  for (let i = 0; i < 3; i++) op = gf2Product(op, op);
  let result: Uint32Array | undefined;
  for (let len = length; len > 0; len = Math.floor(len / 2)) {
    if (len % 2 === 1) result = result === undefined ? op : gf2Product(op, result);
    if (len > 1) op = gf2Product(op, op);
  }
  if (result === undefined) {
    result = new Uint32Array(32);
    for (let n = 0; n < 32; n++) result[n] = (1 << n) >>> 0;
  }
  return result;
}

/** Applies a {@link crc32Shift} operator to a CRC-32. @internal */
export function crc32Apply(shift: Uint32Array, crc: number): number {
  return gf2Times(shift, crc);
}

function crcOf(parts: readonly string[]): number {
  let c = 0;
  for (const p of parts) c = crc32(p, c);
  return c;
}

/** 8 lowercase hex digits. @internal */
export function crcHex(value: number): string {
  return value.toString(16).padStart(8, "0");
}

/** The running value of `[META] history_crc32` for an empty history. @internal */
export const HISTORY_CRC_START = 0;

/**
 * Continues the history checksum with one `[HISTORY]` line (given without its
 * `\n`, and without a `\r` before it; the `\n` is counted): `history_crc32`
 * is the CRC-32 of every message line with its `\n`, in order, so an append
 * extends it from the stored value without reading the history again. @internal
 *
 * @param previous - the running value so far ({@link HISTORY_CRC_START} for none)
 * @param text - one history line (a string, or its UTF-8 bytes: the same value)
 * @returns the new running value
 */
export function historyCrc(previous: number, text: string | Uint8Array): number {
  return crc32("\n", crc32(text, previous));
}

/**
 * {@link historyCrc} over history lines as written by {@link encodeHistoryLines}
 * (each ends with `\n`). @internal
 */
export function historyCrcOfLines(previous: number, text: string): number {
  return crc32(text, previous);
}

/**
 * Encodes history messages as `[HISTORY]` lines (each compact JSON + `\n`),
 * checking each is JSON and matches the protocol's message schema. @internal
 *
 * @param messages - the messages to encode
 * @param protocol - the history's protocol
 * @param firstIndex - history index of `messages[0]` (for error paths)
 * @returns the lines, concatenated
 * @throws {NonJsonValueError} with `messageIndex` and a path like `history[3].content[0].text`
 * @throws {InvalidStateError} when a message does not match the protocol's schema
 */
export function encodeHistoryLines(messages: readonly Message[], protocol: Protocol, firstIndex = 0): string {
  const schema = messageSchemaFor(protocol);
  const parts: string[] = [];
  for (let i = 0; i < messages.length; i++) {
    const index = firstIndex + i;
    if (!(i in messages)) assertJson(messages, "history");
    const m = messages[i];
    assertJson(m, `history[${index}]`, index);
    const r = schema.safeParse(m);
    if (!r.success) {
      const issue = r.error.issues[0];
      const path = (issue?.path ?? []).map((p) => (typeof p === "number" ? `[${p}]` : `.${String(p)}`)).join("");
      throw new InvalidStateError(`history[${index}]${path}`, issue?.message ?? "not a valid message", {
        cause: r.error,
      });
    }
    parts.push(JSON.stringify(m), "\n");
  }
  return parts.join("");
}

/**
 * Encodes a whole state as `.duas` text.
 *
 * Everything is checked before any text is produced: non-JSON values anywhere
 * (history messages, `[STATE]` fields) and schema violations are refused.
 * `message_count` is written as `history.length`.
 *
 * @param state - the state to encode
 * @returns the complete `.duas` text (UTF-8 when written; every line ends with `\n`)
 * @throws {NonJsonValueError} with `messageIndex` and `path` (e.g. `history[3].content[0].text`)
 * @throws {InvalidStateError} when meta/config/state/a message does not match its schema
 * @example
 * const text = encodeState(makeState([{ role: "user", content: "hi" }]));
 * decodeState(text).history[0].content // "hi"
 */
export function encodeState(state: AgentState): string {
  assertStateJson(state);
  const header = encodeHeader(state, state.history.length);
  return header + encodeHistoryLines(state.history, state.meta.protocol);
}

/**
 * Encodes a state as bytes: UTF-8 `.duas` text, gzip-compressed when asked.
 *
 * @param state - the state to encode
 * @param options - `gzip`: compress (the `.duas.gz` form). @default false
 * @returns the bytes
 * @throws {NonJsonValueError} / {InvalidStateError} as {@link encodeState}
 * @example
 * writeFileSync("a.duas.gz", encodeStateBytes(state, { gzip: true }));
 */
export function encodeStateBytes(state: AgentState, options: { gzip?: boolean } = {}): Buffer {
  checkOptions("encodeStateBytes", options, ENCODE_OPTIONS);
  const bytes = Buffer.from(encodeState(state), "utf8");
  return options.gzip ? gzipSync(bytes) : bytes;
}

// ---------------------------------------------------------------------------
// Decoding

/** Result of parsing a header. @internal */
export interface ParsedHeader {
  meta: StateMeta;
  config: AgentConfig;
  state: AgentState["state"];
  /** `[META] revision`, when present. */
  revision: number | undefined;
  /** `[META] generation` (FileBackend: the file's incarnation), when present. */
  generation?: string;
  /** `[META] key` (FileBackend: the state key the file was written under), when present. */
  key?: string;
  /** `[META] history_crc32` (verified against the history by {@link DuasLineParser.end}), when present. */
  historyCrc32?: string;
  /** `[META] history_bytes` (FileBackend: where the committed history ends), when present. */
  historyBytes?: number;
  /** `[META] prior_commit` (FileBackend: the commit to fall back to), when present. */
  prior?: PriorCommit;
  /** 1-based line number of the `[HISTORY]` line. */
  historyLine: number;
  /**
   * True for a file a writer sealed whose two checksum lines were removed by hand: a hand-written
   * file, read whole (every history line counts, as `message_count` must say), its writer's bookkeeping
   * dropped.
   */
  handWritten?: boolean;
}

type Section = "" | "META" | "CONFIG" | "STATE" | "HISTORY";
const SECTION_ORDER: Section[] = ["META", "CONFIG", "STATE", "HISTORY"];

type Kind = "string" | "int" | "number" | "bool" | "json";
const META_KEYS: ReadonlyMap<string, [string, Kind]> = new Map([
  ["format_version", ["formatVersion", "string"]],
  ["schema_version", ["schemaVersion", "string"]],
  ["agent_uuid", ["agentUuid", "string"]],
  ["agent_name", ["agentName", "string"]],
  ["protocol", ["protocol", "string"]],
  ["class", ["class", "string"]],
  ["saved_at", ["savedAt", "string"]],
  ["message_count", ["messageCount", "int"]],
  ["revision", ["revision", "int"]],
  ["generation", ["generation", "string"]],
  ["key", ["key", "string"]],
  ["history_crc32", ["historyCrc32", "string"]],
  ["header_crc32", ["headerCrc32", "string"]],
  ["history_bytes", ["historyBytes", "int"]],
  ["prior_commit", ["priorCommit", "string"]],
]);
/** `[META]` keys a file may leave out (files not written by FileBackend have none of them). */
const OPTIONAL_META = new Set([
  "revision",
  "generation",
  "key",
  "history_crc32",
  "header_crc32",
  "history_bytes",
  "prior_commit",
]);
const HEX8 = /^[0-9a-f]{8}$/;
const CONFIG_KEYS: ReadonlyMap<string, [string, Kind]> = new Map([
  ["prompt", ["prompt", "string"]],
  ["api_provider", ["apiProvider", "string"]],
  ["api_key_env", ["apiKeyEnv", "string"]],
  ["model_name", ["modelName", "string"]],
  ["max_tokens", ["maxTokens", "number"]],
  ["stream", ["stream", "bool"]],
  ["fc_model", ["fcModel", "bool"]],
  ["tool_timeout", ["toolTimeout", "number"]],
  ["tool_max_workers", ["toolMaxWorkers", "number"]],
]);
const STATE_KEYS: ReadonlyMap<string, [string, Kind]> = new Map([
  ["current_task_id", ["currentTaskId", "json"]],
  ["hooks", ["hooks", "json"]],
]);
const KEYS: Record<"META" | "CONFIG" | "STATE", ReadonlyMap<string, [string, Kind]>> = {
  META: META_KEYS,
  CONFIG: CONFIG_KEYS,
  STATE: STATE_KEYS,
};

/** Finds the end (index after the closing quote) of a JSON string literal starting at `start`. */
function jsonStringEnd(text: string, start: number): number {
  for (let i = start + 1; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x5c) i++;
    else if (c === 0x22) return i + 1;
  }
  return -1;
}

/**
 * The value text of a header line without its inline comment: a `#` preceded
 * by whitespace (`api_key_env = API_KEY   # the name, never the key`) starts a
 * comment, as in the original design's files; the value before it must not be
 * empty (`prompt = #tag` keeps `#tag`). In a JSON string literal (a quoted
 * value, or any string inside a `[STATE]` JSON value) `#` is text. The writer
 * quotes every string holding `#`, so what it writes is never cut.
 *
 * @param rest - the text after `=`
 * @param json - a `[STATE]` value (JSON, or the original design's plain text): strings in it are skipped
 * @returns `rest` up to the comment (or whole)
 */
function withoutInlineComment(rest: string, json: boolean): string {
  const hash = rest.indexOf("#");
  if (hash < 0) return rest;
  const start = rest.length - rest.trimStart().length;
  const quotes = json || rest.charCodeAt(start) === 0x22;
  for (let i = start; i < rest.length; i++) {
    const c = rest.charCodeAt(i);
    if (quotes && c === 0x22) {
      const end = jsonStringEnd(rest, i);
      if (end < 0) return rest; // unterminated: the value's own check reports it
      i = end - 1;
    } else if (c === 0x23 && i > start && (rest.charCodeAt(i - 1) === 0x20 || rest.charCodeAt(i - 1) === 0x09)) {
      return rest.slice(0, i);
    }
  }
  return rest;
}

/** A value of a header line summarised by {@link LongValueSummary}. */
export interface ValueSummary {
  /** The value's first `clipAt` UTF-16 code units: decoded for a string, the JSON text for a JSON value. */
  preview: string;
  /** Its whole length in UTF-16 code units (a string's `length`; for a JSON value, its text's). */
  length: number;
}

/**
 * The `key = value` split of a header line as {@link DuasLineParser} reads it
 * (a quoted `field."…"` name included), from the start of the line alone.
 * @internal used by FileBackend's bounded header read
 *
 * @param text - the start of a line (at least through its `=`)
 * @returns the key as written and the index just after its `=`, or undefined when no `=` is found
 */
export function iniKeyOf(text: string): { key: string; valueStart: number } | undefined {
  const lead = text.length - text.trimStart().length;
  const t = text.slice(lead);
  if (t.startsWith('field."')) {
    const end = jsonStringEnd(t, 6);
    if (end < 0) return undefined;
    const eq = t.indexOf("=", end);
    if (eq < 0 || t.slice(end, eq).trim() !== "") return undefined;
    return { key: t.slice(0, end), valueStart: lead + eq + 1 };
  }
  const eq = t.indexOf("=");
  return eq < 0 ? undefined : { key: t.slice(0, eq).trim(), valueStart: lead + eq + 1 };
}

/**
 * Reads one header value in pieces, keeping only its first `clipAt` code
 * units and its length: how a reader shows a value of many MB (a 50 MB
 * prompt) in bounded memory. `string` decodes the INI string rule (plain, or a
 * JSON string literal); `json` keeps the JSON text as written. It does not
 * validate the value: the reader checks the bytes against `header_crc32`
 * (see {@link DuasLineParser.checkSeal}). @internal used by FileBackend
 *
 * @example
 * const s = new LongValueSummary("string", 80);
 * s.push(' "ab\\n'); s.push('c"');
 * s.finish(); // { preview: "ab\nc", length: 4 }
 */
export class LongValueSummary {
  private started = false;
  /** The value is a JSON string literal (else plain text, or JSON text for `json`). */
  quoted = false;
  private closed = false;
  /** 0: not in an escape; 1: after `\`; 2–5: hex digits of `\u` still to come. */
  private escape = 0;
  private hex = "";
  private trailingSpace = 0;
  private count = 0;
  private text = "";
  /** Set when the value is not one string literal (the caller reads the line whole instead). */
  bad = false;

  /**
   * @param kind - `string` (an INI string, e.g. `prompt`) or `json` (a `[STATE]` value)
   * @param clipAt - how many code units of the value to keep
   */
  constructor(
    readonly kind: "string" | "json",
    readonly clipAt: number,
  ) {}

  /** Continues the value with `chunk` (text after the `=`, in order; the line's `\n` excluded). */
  push(chunk: string): void {
    let i = 0;
    if (!this.started) {
      while (i < chunk.length && (chunk.charCodeAt(i) === 0x20 || chunk.charCodeAt(i) === 0x09)) i++;
      if (i === chunk.length) return;
      this.started = true;
      this.quoted = this.kind === "string" && chunk.charCodeAt(i) === 0x22;
      if (this.quoted) i++;
    }
    if (!this.quoted) {
      for (let j = i; j < chunk.length; j++) {
        const c = chunk.charCodeAt(j);
        this.trailingSpace = c === 0x20 || c === 0x09 || c === 0x0d ? this.trailingSpace + 1 : 0;
      }
      this.count += chunk.length - i;
      if (this.text.length < this.clipAt) this.text += chunk.slice(i, i + this.clipAt - this.text.length);
      return;
    }
    let run = i;
    const flush = (end: number) => {
      if (end > run && this.text.length < this.clipAt) {
        this.text += chunk.slice(run, Math.min(end, run + this.clipAt - this.text.length));
      }
      this.count += end - run;
    };
    while (i < chunk.length) {
      if (this.closed) {
        if (!/^[ \t\r]*$/.test(chunk.slice(i))) this.bad = true;
        return;
      }
      if (this.escape === 0) {
        // the run of plain characters up to the next quote or backslash, found by the regex engine
        SPECIAL.lastIndex = i;
        const m = SPECIAL.exec(chunk);
        if (m === null) {
          flush(chunk.length);
          return;
        }
        flush(m.index);
        if (chunk.charCodeAt(m.index) === 0x22) this.closed = true;
        else this.escape = 1;
        i = m.index + 1;
        run = i;
        continue;
      }
      const ch = chunk[i] as string;
      if (this.escape === 1) {
        const simple = ESCAPES[ch];
        if (ch === "u") {
          this.escape = 2;
          this.hex = "";
        } else {
          if (simple === undefined) this.bad = true;
          else this.unit(simple);
          this.escape = 0;
        }
      } else {
        this.hex += ch;
        if (this.escape++ === 5) {
          if (!/^[0-9a-fA-F]{4}$/.test(this.hex)) this.bad = true;
          this.unit(String.fromCharCode(Number.parseInt(this.hex, 16)));
          this.escape = 0;
        }
      }
      i++;
      run = i;
    }
  }

  private unit(c: string): void {
    if (this.text.length < this.clipAt) this.text += c;
    this.count++;
  }

  /**
   * @returns the preview and length, or undefined when the value was not one
   *   well-formed string literal (or an empty/unterminated one)
   */
  finish(): ValueSummary | undefined {
    if (this.quoted && (!this.closed || this.escape !== 0)) this.bad = true;
    if (this.bad || !this.started) return undefined;
    const length = this.quoted ? this.count : this.count - this.trailingSpace;
    return { preview: this.text.slice(0, Math.min(this.clipAt, length)), length };
  }
}

const SPECIAL = /["\\]/g;
const ESCAPES: Record<string, string> = { '"': '"', "\\": "\\", "/": "/", b: "\b", f: "\f", n: "\n", r: "\r", t: "\t" };

/**
 * Incremental `.duas` parser: feed it lines (without `\n`) in order.
 * Used by {@link decodeState} and, line by line over a stream, by FileBackend. @internal
 */
export class DuasLineParser {
  private lineNo = 0;
  private section: Section = "";
  private readonly seen = new Map<string, number>(); // "META.protocol" → line
  private readonly meta: Record<string, unknown> = {};
  private readonly config: Record<string, unknown> = {};
  private readonly st: Record<string, unknown> = {};
  private readonly fields: Record<string, unknown> = {};
  private formatLineVersion = "";
  /** The file says `format_version = 1`: written by the original design (see "Files of the original design"). */
  private original = false;
  /** `format_version` as written (for errors). */
  private formatVersionText = "";
  private parsedHeader: ParsedHeader | undefined;
  private schema: ReturnType<typeof messageSchemaFor> | undefined;
  /** The running history checksum, when the header has `history_crc32`. */
  private crc: number | undefined;
  /** The history's protocol, once the header is read. */
  private protocol: Protocol = "openai";
  /** {@link DuasLineParser.historyCrcOfBytes} gave the history checksum: lines are not checksummed one by one. */
  private crcGiven = false;
  /** {@link DuasLineParser.deferSeal} was called: `header_crc32` is kept for {@link DuasLineParser.checkSeal}. */
  private deferred = false;
  /** `header_crc32` and the layout it seals, kept by a deferred check. */
  private seal: { checksum: string; layout: HeaderLayout } | undefined;
  /** Number of history messages parsed so far. */
  messages = 0;

  /** @param source - file name (or label) used in errors */
  constructor(readonly source?: string) {}

  /** The header, available once the `[HISTORY]` line has been read. */
  get header(): ParsedHeader | undefined {
    return this.parsedHeader;
  }

  /** Current 1-based line number (of the last line fed). */
  get line(): number {
    return this.lineNo;
  }

  /**
   * Leaves the `header_crc32` comparison to {@link DuasLineParser.checkSeal}:
   * for a reader that fed some `[CONFIG]`/`[STATE]` lines in a shortened form
   * (a long value summarised, see {@link LongValueSummary}) and checksums the
   * body's bytes as they were read. Call it before the `[HISTORY]` line.
   */
  deferSeal(): void {
    this.deferred = true;
  }

  /**
   * After a {@link DuasLineParser.deferSeal}: whether the header is sealed and
   * its `header_crc32` matches the canonical `[META]` (recomputed from what was
   * parsed) followed by a body with this CRC-32 and byte length, i.e. the bytes
   * between the `header_crc32` line and the padding comment (or `[HISTORY]`)
   * as read. False also for a header without `header_crc32`.
   *
   * @param bodyCrc - CRC-32 of the body bytes as read
   * @param bodyBytes - their number
   */
  checkSeal(bodyCrc: number, bodyBytes: number): boolean {
    const header = this.parsedHeader;
    if (header === undefined || this.seal === undefined) return false;
    const { meta } = header;
    const head = crcOf([headerPrefix(meta), metaLines(meta, meta.messageCount, this.seal.layout, false)]);
    return crcHex((crc32Apply(crc32Shift(bodyBytes), head) ^ bodyCrc) >>> 0) === this.seal.checksum;
  }

  /**
   * For a reader holding the history's bytes: the CRC-32 of every history line
   * to come, each with its `\n` (no blank line, no `\r`: then it equals what
   * the lines would add one by one), computed in one call over the bytes; the
   * lines fed next are not checksummed again, and {@link DuasLineParser.end}
   * compares this value with `history_crc32`. Call it right after the
   * `[HISTORY]` line. No effect for a header without `history_crc32`.
   *
   * @param crc - CRC-32 of the history bytes
   */
  historyCrcOfBytes(crc: number): void {
    if (this.crc === undefined) return;
    this.crc = crc;
    this.crcGiven = true;
  }

  /** Throws a FormatError for the current line. */
  fail(message: string, extra: { cause?: unknown; version?: string; line?: number } = {}): never {
    throw new FormatError(message, {
      file: this.source,
      line: extra.line ?? this.lineNo,
      version: extra.version,
      cause: extra.cause,
    });
  }

  /**
   * Feeds the next line.
   *
   * @param raw - the line without its `\n` (a trailing `\r` is ignored)
   * @returns the decoded message for a `[HISTORY]` line, else `undefined`
   * @throws {FormatError} with the line number
   */
  feed(raw: string): Message | undefined {
    try {
      return this.feedLine(raw);
    } catch (e) {
      if (e instanceof FormatError) throw e;
      // e.g. a RangeError from absurdly deep nesting: every reader gets a FormatError with the line, as decodeState
      return this.fail(`cannot decode: ${(e as Error)?.message ?? String(e)}`, { cause: e });
    }
  }

  private feedLine(raw: string): Message | undefined {
    this.lineNo++;
    let text = raw.charCodeAt(raw.length - 1) === 0x0d ? raw.slice(0, -1) : raw;
    const n = this.lineNo;
    if (n === 1 && text.charCodeAt(0) === 0xfeff) text = text.slice(1);
    if (this.section === "HISTORY") return this.historyLine(text);
    if (n === 1) {
      if (text !== DUAS_MAGIC_LINE) this.fail(`not a .duas file: the first line must be "${DUAS_MAGIC_LINE}"`);
      return undefined;
    }
    if (n === 2) {
      if (!text.startsWith(FORMAT_LINE_PREFIX)) this.fail(`the second line must be "${FORMAT_LINE_PREFIX}<version>"`);
      const v = text.slice(FORMAT_LINE_PREFIX.length);
      if (!SUPPORTED_FORMAT_VERSIONS.includes(normalizeFormatVersion(v))) {
        this.fail(
          `unknown format version ${JSON.stringify(v)} (this build reads ${SUPPORTED_FORMAT_VERSIONS.join(", ")})`,
          { version: v },
        );
      }
      this.formatLineVersion = normalizeFormatVersion(v);
      return undefined;
    }
    if (n === 3) {
      if (!text.startsWith("#")) this.fail("the third line must be a comment");
      return undefined;
    }
    const trimmed = text.trim();
    if (trimmed === "" || trimmed.startsWith("#") || trimmed.startsWith(";")) return undefined;
    if (trimmed.startsWith("[")) {
      const m = /^\[([A-Z]+)\]$/.exec(trimmed);
      const name = m?.[1] as Section | undefined;
      const expected = SECTION_ORDER[SECTION_ORDER.indexOf(this.section) + 1];
      if (name === undefined || !SECTION_ORDER.includes(name)) this.fail(`unknown section ${trimmed}`);
      if (name !== expected) this.fail(`section [${name}] out of order: expected [${expected}]`);
      this.section = name;
      if (name === "HISTORY") this.finishHeader();
      return undefined;
    }
    if (this.section === "") this.fail("a key = value line before the first section");
    this.keyValue(text);
    return undefined;
  }

  private keyValue(text: string): void {
    const section = this.section as "META" | "CONFIG" | "STATE";
    let key: string;
    let rest: string;
    const t = text.trimStart();
    if (section === "STATE" && t.startsWith('field."')) {
      const end = jsonStringEnd(t, 6);
      if (end < 0) this.fail("unterminated quoted field name");
      key = t.slice(0, end);
      rest = t.slice(end).trimStart();
      if (!rest.startsWith("=")) this.fail(`expected "=" after ${key}`);
      rest = rest.slice(1);
    } else {
      const eq = t.indexOf("=");
      if (eq < 0) this.fail(`expected "key = value" in [${section}]`);
      key = t.slice(0, eq).trim();
      rest = t.slice(eq + 1);
    }
    rest = withoutInlineComment(rest, section === "STATE");
    const seenKey = `${section}.${key}`;
    const previous = this.seen.get(seenKey);
    if (previous !== undefined) this.fail(`duplicate key ${key} in [${section}] (first on line ${previous})`);
    this.seen.set(seenKey, this.lineNo);

    if (section === "STATE" && this.original && !KEYS.STATE.has(key) && !key.startsWith("field.")) {
      // The original design wrote a subclass's persistent fields as plain keys of [STATE].
      if (!IDENT.test(key)) this.fail(`bad field name ${JSON.stringify(key)}`);
      setOwn(this.fields, key, this.originalStateValue(rest, key));
      return;
    }
    if (section === "STATE" && key.startsWith("field.")) {
      let name = key.slice(6);
      if (name.startsWith('"')) {
        try {
          name = JSON.parse(name) as string;
        } catch (e) {
          this.fail(`bad quoted field name ${name}`, { cause: e });
        }
      } else if (!IDENT.test(name)) {
        this.fail(`bad field name ${JSON.stringify(name)}`);
      }
      setOwn(this.fields, name, this.value(rest, "json", key));
      return;
    }
    const spec = KEYS[section].get(key);
    if (spec === undefined) this.fail(`unknown key ${JSON.stringify(key)} in [${section}]`);
    const target = section === "META" ? this.meta : section === "CONFIG" ? this.config : this.st;
    if (section === "META" && key === "format_version") {
      const written = this.value(rest, "string", key) as string;
      this.original = /^\d+$/.test(written);
      this.formatVersionText = written;
      target[spec[0]] = normalizeFormatVersion(written);
      return;
    }
    if (this.original && section === "STATE") {
      const t = rest.trim();
      if (key === "current_task_id" && (t === "" || t === "None")) target[spec[0]] = null;
      else if (key === "hooks" && t === "") target[spec[0]] = [];
      else target[spec[0]] = this.originalStateValue(rest, key);
      return;
    }
    if (this.original && spec[1] === "bool") {
      const t = rest.trim();
      if (t === "True" || t === "False") {
        target[spec[0]] = t === "True";
        return;
      }
    }
    target[spec[0]] = this.value(rest, spec[1], key);
  }

  /**
   * A `[STATE]` value of a file of the original design: JSON when it looks like
   * JSON (starts with `"`, `[`, `{`, a digit or `-`, or is `true`/`false`/`null`;
   * then it must parse), else the plain text (`tid-abc123`), under the plain rules.
   * A JSON number is kept as its text for `current_task_id` (a string field).
   */
  private originalStateValue(rest: string, key: string): unknown {
    const text = rest.trim();
    if (text === "") return "";
    const looksJson = /^["[{\-0-9]/.test(text) || text === "true" || text === "false" || text === "null";
    if (!looksJson) {
      if (PLAIN_FORBIDDEN.test(text))
        this.fail(`bad value of ${key}: a plain value must not contain control characters`);
      // Python's spellings (str() of a field's value); current_task_id is a string field.
      if (key !== "current_task_id" && (text === "True" || text === "False" || text === "None")) {
        return text === "None" ? null : text === "True";
      }
      return text;
    }
    const v = this.value(rest, "json", key);
    return key === "current_task_id" && typeof v === "number" ? text : v;
  }

  private value(rest: string, kind: Kind, key: string): unknown {
    const text = rest.trim();
    switch (kind) {
      case "string":
        try {
          return decodeIniString(text);
        } catch (e) {
          return this.fail(`bad value of ${key}: ${(e as Error).message}`, { cause: e });
        }
      case "int":
        if (!/^(?:0|[1-9]\d*)$/.test(text) || !Number.isSafeInteger(Number(text))) {
          this.fail(`${key} must be a non-negative integer, got ${JSON.stringify(text)}`);
        }
        return Number(text);
      case "number":
        if (!JSON_NUMBER.test(text) || !Number.isFinite(Number(text))) {
          this.fail(`${key} must be a number, got ${JSON.stringify(text)}`);
        }
        return Number(text);
      case "bool":
        if (text !== "true" && text !== "false") this.fail(`${key} must be true or false, got ${JSON.stringify(text)}`);
        return text === "true";
      case "json": {
        let parsed: unknown;
        try {
          parsed = JSON.parse(text);
        } catch (e) {
          return this.fail(`value of ${key} is not JSON: ${(e as Error).message}`, { cause: e });
        }
        // The JSON read rule (core/json.ts), depth counted from `state` as a save counts it.
        const source = { file: this.source, line: this.lineNo, label: `value of ${key}` };
        return checkStoredJson(parsed, source, key.startsWith("field.") ? 2 : 1);
      }
    }
  }

  private finishHeader(): void {
    const lineOf = (path: string): number | undefined => {
      const [part, rawField] = path.split(".");
      const field = rawField?.replace(/\[.*$/, "");
      const section = part === "meta" ? "META" : part === "config" ? "CONFIG" : part === "state" ? "STATE" : "";
      if (!field) return undefined;
      const keys = KEYS[section as "META"] as ReadonlyMap<string, [string, Kind]> | undefined;
      if (!keys) return undefined;
      for (const [k, [camel]] of keys) if (camel === field) return this.seen.get(`${section}.${k}`);
      if (section === "STATE" && field === "fields") {
        const name = path.split(".")[2];
        for (const [k, l] of this.seen) if (k === `STATE.field.${name}`) return l;
      }
      return undefined;
    };
    const missing = (section: "META" | "CONFIG" | "STATE") => {
      for (const key of KEYS[section].keys()) {
        if (section === "META" && OPTIONAL_META.has(key)) continue;
        if (!this.seen.has(`${section}.${key}`)) this.fail(`missing key ${key} in [${section}]`);
      }
    };
    missing("META");
    missing("CONFIG");
    missing("STATE");
    const formatVersion = this.meta.formatVersion as string;
    if (formatVersion !== this.formatLineVersion) {
      this.fail(
        `format_version ${JSON.stringify(this.formatVersionText)} does not match the format line (${this.formatLineVersion})`,
        { version: formatVersion, line: this.seen.get("META.format_version") },
      );
    }
    const revision = this.meta.revision as number | undefined;
    const historyCrc32 = this.meta.historyCrc32 as string | undefined;
    const checksum = this.meta.headerCrc32 as string | undefined;
    // A header whose two checksum lines were both removed by hand is a hand-written file (the format is
    // hand-editable): the writer's bookkeeping beside them (generation, key, history_bytes, prior_commit)
    // describes a file that no longer exists and is dropped; every history line is read and the next
    // save rewrites the file whole. One checksum line without the other is an edited or cut file.
    const sealed = checksum !== undefined || historyCrc32 !== undefined;
    const unsealed =
      !sealed &&
      (this.meta.generation !== undefined ||
        this.meta.key !== undefined ||
        this.meta.historyBytes !== undefined ||
        this.meta.priorCommit !== undefined);
    const generation = sealed ? (this.meta.generation as string | undefined) : undefined;
    const key = sealed ? (this.meta.key as string | undefined) : undefined;
    const historyBytes = sealed ? (this.meta.historyBytes as number | undefined) : undefined;
    const priorValue = sealed ? (this.meta.priorCommit as string | undefined) : undefined;
    delete this.meta.revision;
    delete this.meta.generation;
    delete this.meta.key;
    delete this.meta.historyCrc32;
    delete this.meta.headerCrc32;
    delete this.meta.historyBytes;
    delete this.meta.priorCommit;
    const prior = priorValue === undefined ? undefined : this.priorCommit(priorValue);
    for (const [k, v] of [
      ["history_crc32", historyCrc32],
      ["header_crc32", checksum],
    ] as const) {
      if (v !== undefined && !HEX8.test(v)) {
        this.fail(`${k} must be 8 lowercase hex digits`, { line: this.seen.get(`META.${k}`) });
      }
    }
    if (
      checksum === undefined &&
      (generation !== undefined ||
        key !== undefined ||
        historyCrc32 !== undefined ||
        historyBytes !== undefined ||
        prior !== undefined)
    ) {
      // the writer seals every header that carries these: one without its seal was edited or cut
      this.fail("the header has generation/history_crc32 but no header_crc32 (edited or corrupted file)");
    }
    if ((historyBytes !== undefined || prior !== undefined) && (revision === undefined || historyCrc32 === undefined)) {
      this.fail("history_bytes/prior_commit need revision and history_crc32 (edited or corrupted file)");
    }
    if (prior !== undefined && (prior.revision > (revision as number) || historyBytes === undefined)) {
      this.fail("prior_commit must come with history_bytes and not be newer than revision", {
        line: this.seen.get("META.prior_commit"),
      });
    }
    this.st.fields = this.fields;
    let header: ParsedHeader;
    try {
      const v = validateHeader(this.meta, this.config, this.st, this.source ?? "state");
      const p = { meta: v.meta, config: v.config, state: v.st };
      // keep our own fields object (own properties only, "__proto__" included), validated by the schema above
      const st = { ...p.state, fields: this.fields as AgentState["state"]["fields"] };
      header = { meta: p.meta, config: p.config, state: st, revision, historyLine: this.lineNo };
      if (generation !== undefined) header.generation = generation;
      if (key !== undefined) header.key = key;
      if (historyCrc32 !== undefined) header.historyCrc32 = historyCrc32;
      if (historyBytes !== undefined) header.historyBytes = historyBytes;
      if (prior !== undefined) header.prior = prior;
      if (unsealed) header.handWritten = true;
    } catch (e) {
      if (e instanceof InvalidStateError) this.fail(e.message, { cause: e, line: lineOf(e.path) });
      throw e;
    }
    if (checksum !== undefined && this.deferred) {
      this.seal = { checksum, layout: { revision, generation, key, historyCrc32, historyBytes, prior } };
    } else if (checksum !== undefined) {
      const layout = { revision, generation, key, historyCrc32, historyBytes, prior };
      const expected = crcHex(
        crcOf([
          headerPrefix(header.meta),
          metaLines(header.meta, header.meta.messageCount, layout, false),
          headerBody(header.config, header.state),
        ]),
      );
      if (expected !== checksum) {
        this.fail("the header does not match header_crc32 (edited or corrupted file)", {
          line: this.seen.get("META.header_crc32"),
        });
      }
    }
    this.crc = historyCrc32 === undefined ? undefined : HISTORY_CRC_START;
    this.parsedHeader = header;
    this.schema = messageSchemaFor(header.meta.protocol);
    this.protocol = header.meta.protocol;
  }

  /** Parses `[META] prior_commit` (`<revision> <message_count> <history_bytes> <history_crc32> <saved_at>`). */
  private priorCommit(value: string): PriorCommit {
    const line = this.seen.get("META.prior_commit");
    // saved_at is any string (decodeState takes any): the rest of the value after the fourth space
    const m = /^(0|[1-9]\d*) (0|[1-9]\d*) (0|[1-9]\d*) ([0-9a-f]{8}) ([\s\S]*)$/.exec(value);
    const nums = m ? [Number(m[1]), Number(m[2]), Number(m[3])] : [];
    if (!m || !nums.every(Number.isSafeInteger)) {
      this.fail(
        `prior_commit must be "<revision> <message_count> <history_bytes> <history_crc32> <saved_at>", got ${JSON.stringify(value)}`,
        { line },
      );
    }
    const [revision, messageCount, historyBytes] = nums as [number, number, number];
    return { revision, messageCount, historyBytes, historyCrc32: m[4] as string, savedAt: m[5] as string };
  }

  /**
   * Makes the header's commit `prior` (its `[META] prior_commit`): the count,
   * revision, `saved_at`, `history_crc32` and `history_bytes` the rest of the
   * read checks and returns. For FileBackend, whose newest commit's history
   * bytes did not all reach the disk (see its module doc). Call it right
   * after the `[HISTORY]` line, before any history line. @internal
   */
  useCommit(prior: PriorCommit): void {
    const h = this.parsedHeader;
    if (h === undefined || this.messages > 0) throw new Error("useCommit: call it right after the [HISTORY] line");
    this.parsedHeader = {
      ...h,
      meta: { ...h.meta, messageCount: prior.messageCount, savedAt: prior.savedAt },
      revision: prior.revision,
      historyCrc32: prior.historyCrc32,
      historyBytes: prior.historyBytes,
      prior,
    };
  }

  private historyLine(text: string): Message | undefined {
    if (text.trim() === "") return undefined;
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch (e) {
      this.fail(`history line is not JSON: ${(e as Error).message}`, { cause: e });
    }
    const index = this.messages;
    // The JSON read rule every backend applies (core/json.ts): depth limit, numbers in range, -0 read as 0.
    checkStoredJson(value, { file: this.source, line: this.lineNo, label: `history[${index}]` });
    // The plain predicate first: zod runs only to name what is wrong with a message.
    const r = isWellFormedMessage(this.protocol, value)
      ? { success: true as const }
      : (this.schema as NonNullable<typeof this.schema>).safeParse(value);
    if (!r.success) {
      const issue = r.error.issues[0];
      const path = (issue?.path ?? []).map((p) => (typeof p === "number" ? `[${p}]` : `.${String(p)}`)).join("");
      this.fail(`history[${index}]${path}: ${issue?.message ?? "not a valid message"}`, { cause: r.error });
    }
    this.messages++;
    if (this.crc !== undefined && !this.crcGiven) this.crc = historyCrc(this.crc, text);
    return value as Message;
  }

  /**
   * Checks the end of input: the header is complete, the number of
   * messages equals `message_count` and, when the header has
   * `history_crc32`, the messages fed match it.
   *
   * @throws {FormatError} when truncated, when the count differs or the history does not match its hash
   */
  end(): ParsedHeader {
    const h = this.parsedHeader;
    if (h === undefined) {
      this.fail(`truncated: no [HISTORY] section (the file ends in [${this.section || "no section"}])`);
    }
    if (this.messages !== h.meta.messageCount) {
      this.fail(
        `message_count is ${h.meta.messageCount} but [HISTORY] holds ${this.messages} messages (truncated or edited file)`,
      );
    }
    if (this.crc !== undefined && crcHex(this.crc) !== h.historyCrc32) {
      this.fail(
        "the history does not match history_crc32 (a message was changed, duplicated, reordered or cut: edited or corrupted file)",
        { line: h.historyLine },
      );
    }
    return h;
  }
}

/**
 * Decodes `.duas` text into a validated state. Never returns a partly filled
 * state and never throws a bare `SyntaxError`.
 *
 * @param text - the whole `.duas` text
 * @param options - `source`: file name (or label) used in error messages
 * @returns the state (`meta.messageCount === history.length`)
 * @throws {FormatError} with `file`, 1-based `line`, and `version` for an unknown
 *   `format_version`: malformed/duplicate/missing/unknown keys, bad numbers, bad
 *   JSON, invalid messages, a missing final newline, or a `message_count` that
 *   does not match the history (a truncated file)
 * @example
 * const state = decodeState(readFileSync("a.duas", "utf8"), { source: "a.duas" });
 */
export function decodeState(text: string, options: { source?: string } = {}): AgentState {
  checkOptions("decodeState", options, DECODE_OPTIONS);
  return decodeStateDetailed(text, options).state;
}

/**
 * {@link decodeState}, also returning `[META] revision` (written by FileBackend). @internal
 *
 * @param text - the whole `.duas` text
 * @param options - `source`: file name used in errors
 * @returns the state and the revision (`undefined` when the file has none)
 * @throws {FormatError} as {@link decodeState}
 */
export function decodeStateDetailed(text: string, options: DecodeContext = {}): DecodedDetail {
  try {
    return decodeText(text, options);
  } catch (e) {
    if (e instanceof FormatError) throw e;
    // Defensive: e.g. a RangeError from absurdly deep nesting in a hand-made file.
    throw new FormatError(`cannot decode: ${(e as Error)?.message ?? String(e)}`, { file: options.source, cause: e });
  }
}

/** What the detailed decoders return: the state, and `[META] revision` and `key` when present. @internal */
export interface DecodedDetail {
  state: AgentState;
  revision: number | undefined;
  /** `[META] key` (FileBackend: the key the file was written under), when present. */
  key?: string | undefined;
}

/** What the internal decoders are told about their input. @internal */
export interface DecodeContext {
  /** File name (or label) used in errors. */
  source?: string;
  /** Read the header's `prior_commit` instead of its own commit ({@link DuasLineParser.useCommit}). */
  commit?: PriorCommit;
}

function decodeText(text: string, options: DecodeContext): DecodedDetail {
  const parser = new DuasLineParser(options.source);
  if (text === "") parser.fail("empty input: not a .duas file", { line: 1 });
  const lines = text.split("\n");
  const last = lines.pop();
  const history: Message[] = [];
  let commit = options.commit;
  for (const l of lines) {
    const m = parser.feed(l);
    if (m !== undefined) history.push(m);
    else if (commit !== undefined && parser.header !== undefined) {
      parser.useCommit(commit); // right after the [HISTORY] line
      commit = undefined;
    }
  }
  if (last !== "") {
    parser.feed(last ?? "");
    parser.fail("truncated: the last line does not end with a newline");
  }
  const h = parser.end();
  return { state: { meta: h.meta, config: h.config, state: h.state, history }, revision: h.revision, key: h.key };
}

/**
 * {@link decodeStateDetailed} over the UTF-8 bytes of a plain `.duas` file,
 * without decoding them into one string first: each line is decoded on its
 * own (ASCII lines become one-byte strings), and the history is checked
 * against `history_crc32` in one pass over its bytes. Same result and errors
 * as `decodeStateDetailed(decodeUtf8(bytes))`. @internal used by FileBackend
 *
 * @param bytes - the file's bytes (not gzip)
 * @param options - `source`: file name used in errors
 * @returns the state and the revision (`undefined` when the file has none)
 * @throws {FormatError} as {@link decodeStateDetailed}, and for invalid UTF-8 (with its line)
 */
export function decodeBytesDetailed(bytes: Buffer, options: DecodeContext = {}): DecodedDetail {
  const source = options.source;
  // Anything unusual (invalid UTF-8, no final newline) takes the text path, whose errors name the line.
  if (bytes.length === 0 || bytes[bytes.length - 1] !== 0x0a || !isUtf8(bytes)) {
    return decodeStateDetailed(decodeUtf8(bytes, source), options);
  }
  try {
    const parser = new DuasLineParser(source);
    let pos = 0;
    while (parser.header === undefined && pos < bytes.length) {
      const nl = bytes.indexOf(0x0a, pos);
      parser.feed(bytes.toString("utf8", pos, nl));
      pos = nl + 1;
    }
    const history: Message[] = [];
    if (parser.header !== undefined) {
      if (options.commit !== undefined) parser.useCommit(options.commit);
      const body = bytes.subarray(pos);
      // A \r before a \n is not in the checksum; a blank line (not either) sends the read down the text path below.
      const given = body.length > 0 && body.indexOf(0x0d) < 0;
      if (given) parser.historyCrcOfBytes(crc32(body));
      while (pos < bytes.length) {
        const nl = bytes.indexOf(0x0a, pos);
        const m = parser.feed(bytes.toString("utf8", pos, nl));
        // a blank (whitespace) line is not part of the checksum: the text path checks it line by line
        if (m === undefined && given) return decodeStateDetailed(decodeUtf8(bytes, source), options);
        if (m !== undefined) history.push(m);
        pos = nl + 1;
      }
    }
    const h = parser.end();
    return { state: { meta: h.meta, config: h.config, state: h.state, history }, revision: h.revision, key: h.key };
  } catch (e) {
    if (e instanceof FormatError) throw e;
    throw new FormatError(`cannot decode: ${(e as Error)?.message ?? String(e)}`, { file: source, cause: e });
  }
}

/**
 * Decodes `.duas` bytes: gzip is detected by its magic bytes (`1f 8b`), then
 * the text must be valid UTF-8.
 *
 * @param bytes - file contents (`.duas` or `.duas.gz`)
 * @param options - `source`: file name used in error messages
 * @returns the state
 * @throws {FormatError} for corrupt gzip, invalid UTF-8 (with its line), or any
 *   error of {@link decodeState}
 * @example
 * const state = decodeStateBytes(readFileSync("a.duas.gz"), { source: "a.duas.gz" });
 */
export function decodeStateBytes(bytes: Uint8Array, options: { source?: string } = {}): AgentState {
  checkOptions("decodeStateBytes", options, DECODE_OPTIONS);
  let data = bytes;
  if (isGzip(bytes)) {
    try {
      data = gunzipSync(bytes);
    } catch (e) {
      throw new FormatError(`corrupt gzip data: ${(e as Error).message}`, { file: options.source, cause: e });
    }
  }
  return decodeState(decodeUtf8(data, options.source), options);
}

/** True when `bytes` start with the gzip magic `1f 8b`. */
export function isGzip(bytes: Uint8Array): boolean {
  return bytes.length >= 2 && bytes[0] === 0x1f && bytes[1] === 0x8b;
}

const utf8 = new TextDecoder("utf-8", { fatal: true });
const utf8KeepBom = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

/**
 * Decodes strict UTF-8 (a leading BOM is removed). @internal
 *
 * @param bytes - the bytes
 * @param source - file name for errors
 * @param firstLine - line number of the first byte's line, for errors
 * @param keepBom - keep a leading U+FEFF (for a piece that does not start the text) @default false
 * @throws {FormatError} naming the line holding the first invalid byte
 */
export function decodeUtf8(bytes: Uint8Array, source?: string, firstLine = 1, keepBom = false): string {
  // Validated by simdutf, then decoded by Buffer's fast path: a fatal TextDecoder takes ICU's slow
  // path on non-ASCII text (it was a third of a 10,000-message load).
  if (bytes.length === 0) return "";
  if (isUtf8(bytes)) {
    const buf = Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    const text = buf.toString("utf8");
    return !keepBom && text.charCodeAt(0) === 0xfeff ? text.slice(1) : text;
  }
  try {
    return (keepBom ? utf8KeepBom : utf8).decode(bytes);
  } catch (e) {
    let lineNo = firstLine;
    let start = 0;
    for (let i = 0; i <= bytes.length; i++) {
      if (i === bytes.length || bytes[i] === 0x0a) {
        try {
          utf8.decode(bytes.subarray(start, i));
        } catch {
          break;
        }
        lineNo++;
        start = i + 1;
      }
    }
    throw new FormatError("invalid UTF-8", { file: source, line: lineNo, cause: e });
  }
}
