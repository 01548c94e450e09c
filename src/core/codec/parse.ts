/** The `.duas` parser: lines fed in order, the header checked, then the history messages. */

import { FormatError, InvalidStateError } from "../errors.js";
import { checkStoredJson, setOwn } from "../json.js";
import { isWellFormedMessage, type Message, messageSchemaFor, type Protocol } from "../messages.js";
import { normalizeFormatVersion } from "../original.js";
import type { AgentConfig, AgentState, StateMeta } from "../state.js";
import { SUPPORTED_FORMAT_VERSIONS } from "../version.js";
import { crc32Apply, crc32Shift, crcHex, crcOf, HISTORY_CRC_START, historyCrc } from "./crc.js";
import { decodeIniString, IDENT, JSON_NUMBER, PLAIN_FORBIDDEN } from "./escape.js";
import {
  DUAS_MAGIC_LINE,
  FORMAT_LINE_PREFIX,
  type HeaderLayout,
  headerBody,
  headerPrefix,
  metaLines,
  type PriorCommit,
  validateHeader,
} from "./header.js";

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
export function jsonStringEnd(text: string, start: number): number {
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

/**
 * Incremental `.duas` parser: feed it lines (without `\n`) in order.
 * Used by `decodeState` and, line by line over a stream, by FileBackend. @internal
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
