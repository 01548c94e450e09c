/**
 * Reading the input files of `dumplings import`: `.duas` and `.duas.gz`
 * saved states, OpenAI-format (or Anthropic-format) JSONL with one message
 * per line (or a single `{"messages": [...]}` line, as in OpenAI's
 * fine-tuning files), and JSON files holding a message array (or an object
 * with a `messages` array, as in a chat-completions request). Each JSONL/JSON file
 * becomes a new session whose key is the file stem unless `--key` is given.
 *
 * Every problem is a typed error naming the file and line: nothing is saved
 * from a file that does not parse completely.
 *
 * @module
 */
import { readFile } from "node:fs/promises";
import path from "node:path";
import { decodeStateBytes } from "../core/codec/bytes.js";
import { FormatError } from "../core/errors.js";
import { type Message, messageSchemaFor, type Protocol } from "../core/messages.js";
import type { AgentState } from "../core/state.js";
import { InputNotFoundError } from "../ops/errors.js";

/** Kind of an import input, from its file name. */
export type InputKind = "duas" | "jsonl" | "json";

/** A parsed import input. */
export type ImportInput =
  | { kind: "duas"; file: string; stem: string; state: AgentState }
  | { kind: "jsonl" | "json"; file: string; stem: string; protocol: Protocol; messages: Message[] };

const SUFFIXES: readonly [string, InputKind][] = [
  [".duas.gz", "duas"],
  [".duas", "duas"],
  [".jsonl", "jsonl"],
  [".ndjson", "jsonl"],
  [".json", "json"],
];

/**
 * The kind and stem of an input file name.
 *
 * @param file - a path such as `runs/weather-1.jsonl` or `a.duas.gz`
 * @returns `{ kind, stem }` (`stem`: the base name without the recognised suffix),
 *   or `undefined` when the extension is not one `import` reads
 */
export function classifyInput(file: string): { kind: InputKind; stem: string } | undefined {
  const base = path.basename(file);
  const lower = base.toLowerCase();
  for (const [suffix, kind] of SUFFIXES) {
    if (lower.endsWith(suffix) && lower.length > suffix.length) {
      return { kind, stem: base.slice(0, base.length - suffix.length) };
    }
  }
  return undefined;
}

/**
 * The protocol of a JSONL/JSON input: `anthropic` for `*.anthropic.jsonl` /
 * `*.anthropic.json`, else `openai`, unless `forced`.
 *
 * @param stem - file stem from {@link classifyInput}
 * @param forced - the `--protocol` option, when given
 */
export function protocolOf(stem: string, forced?: Protocol): Protocol {
  if (forced) return forced;
  return stem.toLowerCase().endsWith(".anthropic") ? "anthropic" : "openai";
}

/**
 * Reads and parses one import input.
 *
 * @param file - path of the input file, or `-` for standard input (its kind is recognised from the
 *   content: gzip or `.duas` text, a JSON document, else JSONL; its stem is empty: the caller needs a key)
 * @param options - `protocol`: force the message protocol of JSONL/JSON inputs; `stdin`: the stream `-` reads
 *   @default process.stdin
 * @returns the parsed input
 * @throws {InputNotFoundError} when the file does not exist
 * @throws {FormatError} when the extension is unknown or the content is malformed
 *   (with the file and 1-based line number)
 */
export async function readImportInput(
  file: string,
  options: { protocol?: Protocol; stdin?: NodeJS.ReadableStream } = {},
): Promise<ImportInput> {
  let bytes: Buffer;
  let kind: { kind: InputKind; stem: string } | undefined;
  if (file === STDIN) {
    bytes = await readAll(options.stdin ?? process.stdin);
    kind = { kind: sniffKind(bytes), stem: "" };
  } else {
    kind = classifyInput(file);
    if (!kind) {
      throw new FormatError("unknown input type: expected .duas, .duas.gz, .jsonl or .json (or - for stdin)", {
        file,
      });
    }
    try {
      bytes = await readFile(file);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === "ENOENT") throw new InputNotFoundError(file, { cause: e });
      throw e;
    }
  }
  if (kind.kind === "duas") {
    return { kind: "duas", file, stem: kind.stem, state: decodeStateBytes(bytes, { source: file }) };
  }
  const protocol = protocolOf(kind.stem, options.protocol);
  const text = decodeUtf8(bytes, file);
  const messages =
    kind.kind === "jsonl" ? unwrapConversationLine(parseJsonl(text, file), file) : parseJsonMessages(text, file);
  messages.forEach((m, i) => {
    checkMessage(m.value, protocol, file, m.line, i);
  });
  return { kind: kind.kind, file, stem: kind.stem, protocol, messages: messages.map((m) => m.value as Message) };
}

/** The file name that means standard input. */
export const STDIN = "-";

async function readAll(stream: NodeJS.ReadableStream): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of stream) chunks.push(typeof chunk === "string" ? Buffer.from(chunk) : (chunk as Buffer));
  return Buffer.concat(chunks);
}

/** The kind of an input read from stdin: gzip or `# dumplingsAI`/`[META]` text is `.duas`, one JSON document is JSON, else JSONL. */
function sniffKind(bytes: Buffer): InputKind {
  if (bytes[0] === 0x1f && bytes[1] === 0x8b) return "duas";
  const head = bytes
    .subarray(0, 256)
    .toString("utf8")
    .replace(/^\uFEFF/, "")
    .trimStart();
  if (head.startsWith("#") || head.startsWith("[META]")) return "duas";
  if (head.startsWith("[")) return "json";
  try {
    JSON.parse(bytes.toString("utf8").replace(/^\uFEFF/, ""));
    return "json";
  } catch {
    return "jsonl";
  }
}

function decodeUtf8(bytes: Buffer, file: string): string {
  try {
    const text = new TextDecoder("utf-8", { fatal: true }).decode(bytes);
    return text.charCodeAt(0) === 0xfeff ? text.slice(1) : text;
  } catch (e) {
    throw new FormatError("not valid UTF-8 text", { file, cause: e });
  }
}

function parseJsonl(text: string, file: string): { value: unknown; line: number }[] {
  const out: { value: unknown; line: number }[] = [];
  const lines = text.split("\n");
  lines.forEach((raw, i) => {
    const line = raw.endsWith("\r") ? raw.slice(0, -1) : raw;
    if (line.trim() === "") return;
    try {
      out.push({ value: JSON.parse(line), line: i + 1 });
    } catch (e) {
      throw new FormatError(`not a JSON value: ${(e as Error).message}`, { file, line: i + 1, cause: e });
    }
  });
  return out;
}

/**
 * OpenAI's fine-tuning/batch JSONL holds a whole conversation per line
 * (`{"messages": [...]}`). One such line is taken as the file's conversation;
 * several are refused with a clear message (one file is one session).
 */
function unwrapConversationLine(
  lines: { value: unknown; line: number }[],
  file: string,
): { value: unknown; line: number | undefined }[] {
  const first = lines[0]?.value as { role?: unknown; messages?: unknown } | undefined;
  if (first === undefined || first === null || typeof first !== "object" || "role" in first) return lines;
  if (!Array.isArray(first.messages)) return lines;
  if (lines.length > 1) {
    throw new FormatError(
      `each line holds a whole conversation ({"messages": [...]}, ${lines.length} lines); import takes one conversation per file: split it into one file per line`,
      { file, line: 2 },
    );
  }
  return first.messages.map((m) => ({ value: m, line: lines[0]?.line }));
}

function parseJsonMessages(text: string, file: string): { value: unknown; line: number | undefined }[] {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (e) {
    const message = (e as Error).message;
    const position = /position (\d+)/.exec(message);
    const line = position ? text.slice(0, Number(position[1])).split("\n").length : undefined;
    throw new FormatError(`not JSON: ${message}`, { file, line, cause: e });
  }
  const list = Array.isArray(value)
    ? value
    : value !== null && typeof value === "object" && Array.isArray((value as { messages?: unknown }).messages)
      ? ((value as { messages: unknown[] }).messages as unknown[])
      : undefined;
  if (!list) {
    throw new FormatError('expected a JSON array of messages or an object with a "messages" array', { file });
  }
  return list.map((m) => ({ value: m, line: undefined }));
}

function checkMessage(value: unknown, protocol: Protocol, file: string, line: number | undefined, index: number): void {
  const result = messageSchemaFor(protocol).safeParse(value);
  if (result.success) return;
  const issue = result.error.issues[0];
  const where = (issue?.path ?? []).map(String).join(".");
  throw new FormatError(
    `message ${index} is not an ${protocol === "openai" ? "OpenAI chat" : "Anthropic"} message${where ? ` (at ${where})` : ""}: ${issue?.message ?? "invalid"}${protocol === "openai" ? " (use --protocol anthropic for Anthropic messages)" : ""}`,
    { file, line },
  );
}
