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

import { gzipSync } from "node:zlib";
import { InvalidStateError } from "../errors.js";
import { assertJson } from "../json.js";
import { type Message, messageSchemaFor, type Protocol } from "../messages.js";
import { checkOptions, optionKeys } from "../options.js";
import type { AgentState } from "../state.js";
import { encodeHeader } from "./header.js";

const ENCODE_OPTIONS = optionKeys<{ gzip?: boolean }>({ gzip: true });

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
