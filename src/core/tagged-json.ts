/**
 * The tagged JSON encoding the ecosystem adapters store messages with (AI SDK
 * chats in `dumplings-ai/ai-sdk`, OpenAI Agents session items in
 * `dumplings-ai/openai-agents`): how a message holding values JSON cannot
 * carry is stored as JSON and read back deep-equal, with the same types.
 *
 * Rule: every value is stored as itself, except these, stored as an object
 * whose only "tag" key is `"$dumplings"`:
 *
 * | value | stored as | read back as |
 * | --- | --- | --- |
 * | `Uint8Array` (and `Buffer`, a subclass) | `{ "$dumplings": "bytes", "base64": "…" }` | `Uint8Array` |
 * | `ArrayBuffer` | `{ "$dumplings": "arraybuffer", "base64": "…" }` | `ArrayBuffer` |
 * | `URL` | `{ "$dumplings": "url", "href": "…" }` | `URL` |
 * | `Date` | `{ "$dumplings": "date", "iso": "…" }` | `Date` |
 * | `undefined` (a property or an array element) | `{ "$dumplings": "undefined" }` | `undefined` (the property is present) |
 * | `NaN`, `±Infinity`, `-0` | `{ "$dumplings": "number", "value": "NaN" }` | the number |
 * | a plain object that has its own `"$dumplings"` key | `{ "$dumplings": "object", "value": { … } }` | that object |
 *
 * A `Buffer` comes back as a plain `Uint8Array` (same bytes). Anything else
 * JSON cannot carry — a BigInt, a function, a symbol, a `Map`/`Set`, a class
 * instance, a cycle — is refused with a `NonJsonValueError` naming its path
 * (`messages[3].parts[1].data`) and nothing is stored.
 *
 * @module
 */
import { FormatError, NonJsonValueError } from "./errors.js";
import { type JsonObject, type JsonValue, setOwn } from "./json.js";

/** The key marking a tagged value. */
export const TAG = "$dumplings";

type Tagged = { [TAG]: string } & Record<string, JsonValue>;

function isPlainObject(value: object): boolean {
  const proto = Object.getPrototypeOf(value);
  return proto === Object.prototype || proto === null;
}

function toBase64(bytes: Uint8Array): string {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString("base64");
}

function fromBase64(text: string): Uint8Array {
  const b = Buffer.from(text, "base64");
  // a plain Uint8Array (not a Buffer) over a copy of exactly these bytes
  const out = new Uint8Array(b.byteLength);
  out.set(b);
  return out;
}

function encodeNumber(n: number): JsonValue {
  if (Number.isNaN(n)) return { [TAG]: "number", value: "NaN" };
  if (n === Number.POSITIVE_INFINITY) return { [TAG]: "number", value: "Infinity" };
  if (n === Number.NEGATIVE_INFINITY) return { [TAG]: "number", value: "-Infinity" };
  if (Object.is(n, -0)) return { [TAG]: "number", value: "-0" };
  return n;
}

/**
 * Encodes a value (a chat message) as JSON by the rule in this module's comment.
 *
 * @param value - the value
 * @param path - its path, for errors, e.g. `messages[3]`
 * @param messageIndex - the message index, for errors
 * @returns a JSON value
 * @throws {NonJsonValueError} naming the path of a value the rule cannot carry
 * @example
 * encodeTagged({ type: "file", data: new Uint8Array([1]) }, "m") // { type: "file", data: { $dumplings: "bytes", base64: "AQ==" } }
 */
export function encodeTagged(value: unknown, path: string, messageIndex?: number): JsonValue {
  const seen = new Set<object>();
  const walk = (v: unknown, at: string): JsonValue => {
    switch (typeof v) {
      case "string":
      case "boolean":
        return v;
      case "number":
        return encodeNumber(v);
      case "undefined":
        return { [TAG]: "undefined" };
      case "object": {
        if (v === null) return null;
        if (v instanceof Uint8Array) return { [TAG]: "bytes", base64: toBase64(v) };
        if (v instanceof ArrayBuffer) return { [TAG]: "arraybuffer", base64: toBase64(new Uint8Array(v)) };
        if (v instanceof URL) return { [TAG]: "url", href: v.href };
        if (v instanceof Date) {
          if (Number.isNaN(v.getTime())) throw new NonJsonValueError(at, "an invalid Date", messageIndex);
          return { [TAG]: "date", iso: v.toISOString() };
        }
        if (seen.has(v)) throw new NonJsonValueError(at, "a cycle", messageIndex);
        if (Array.isArray(v)) {
          seen.add(v);
          const out: JsonValue[] = new Array(v.length);
          for (let i = 0; i < v.length; i++) out[i] = walk(v[i], `${at}[${i}]`);
          seen.delete(v);
          return out;
        }
        if (!isPlainObject(v)) {
          const name = (v as object).constructor?.name ?? "an object without a plain prototype";
          throw new NonJsonValueError(at, `a ${name} (not a plain object)`, messageIndex);
        }
        seen.add(v);
        const out: JsonObject = {};
        for (const [k, x] of Object.entries(v)) setOwn(out, k, walk(x, `${at}.${k}`));
        seen.delete(v);
        return Object.hasOwn(v, TAG) ? { [TAG]: "object", value: out } : out;
      }
      default:
        throw new NonJsonValueError(at, typeof v === "bigint" ? "a BigInt" : `a ${typeof v}`, messageIndex);
    }
  };
  return walk(value, path);
}

/**
 * Decodes what {@link encodeTagged} produced.
 *
 * @param value - the stored JSON value
 * @param source - where it was read from, for errors (e.g. `chat "c1" message 3`)
 * @returns the original value (Uint8Array, URL, Date, undefined … restored)
 * @throws {FormatError} for a tag this version does not know or a malformed tagged value
 */
export function decodeTagged(value: JsonValue, source: string): unknown {
  const walk = (v: JsonValue): unknown => {
    if (v === null || typeof v !== "object") return v;
    if (Array.isArray(v)) return v.map(walk);
    if (!Object.hasOwn(v, TAG)) {
      const out: Record<string, unknown> = {};
      for (const [k, x] of Object.entries(v)) setOwn(out, k, walk(x));
      return out;
    }
    const t = v as Tagged;
    const bad = (): never => {
      throw new FormatError(`malformed tagged value ${JSON.stringify(v).slice(0, 200)}`, { file: source });
    };
    switch (t[TAG]) {
      case "bytes":
        return typeof t.base64 === "string" ? fromBase64(t.base64) : bad();
      case "arraybuffer": {
        if (typeof t.base64 !== "string") return bad();
        const bytes = fromBase64(t.base64);
        return bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength);
      }
      case "url":
        try {
          return new URL(String(t.href));
        } catch (e) {
          throw new FormatError(`stored URL ${JSON.stringify(t.href)} does not parse`, { file: source, cause: e });
        }
      case "date":
        return typeof t.iso === "string" ? new Date(t.iso) : bad();
      case "undefined":
        return undefined;
      case "number": {
        const n = t.value === "-0" ? -0 : Number(t.value);
        return typeof t.value === "string" && Number.isNaN(n) === (t.value === "NaN") ? n : bad();
      }
      case "object": {
        if (t.value === null || typeof t.value !== "object" || Array.isArray(t.value)) return bad();
        const out: Record<string, unknown> = {};
        for (const [k, x] of Object.entries(t.value)) setOwn(out, k, walk(x));
        return out;
      }
      default:
        throw new FormatError(`unknown tagged value type ${JSON.stringify(t[TAG])} (written by a newer version?)`, {
          file: source,
        });
    }
  };
  return walk(value);
}

/**
 * JSON text with object keys sorted at every level: the same text for two
 * deep-equal values whatever their key order (a store may reorder keys).
 *
 * @param value - a JSON value
 * @returns canonical JSON text
 */
export function canonicalJson(value: JsonValue): string {
  if (value === null || typeof value !== "object") return JSON.stringify(value);
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(",")}]`;
  const keys = Object.keys(value).sort();
  return `{${keys.map((k) => `${JSON.stringify(k)}:${canonicalJson(value[k] as JsonValue)}`).join(",")}}`;
}
